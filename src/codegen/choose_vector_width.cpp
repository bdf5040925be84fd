// Pass 2: elements per thread. Default: 16 bytes of the narrowest full tensor
// (4 for f32, 8 for 16-bit), so every full tensor moves in 16-byte (or wider)
// accesses. Philox serves four consecutive elements per call (DESIGN §4), so
// with dropout the width is at least 4.
#include <algorithm>

#include "codegen/kernel_plan.hpp"

namespace epifuse {

int natural_vector_width(const KernelSpec& spec) {
  std::size_t narrowest = 4;
  for (const Node& n : spec.graph.nodes())
    if (n.kind == NodeKind::input && n.broadcast == Broadcast::full)
      narrowest = std::min(narrowest, size_of(n.dtype));
  for (const Output& o : spec.graph.outputs()) narrowest = std::min(narrowest, size_of(o.dtype));
  return static_cast<int>(16 / narrowest);
}

TileConfig resolve_tile(const KernelSpec& spec, TileConfig tile) {
  int vec = tile.vec ? tile.vec : natural_vector_width(spec);
  for (const Node& n : spec.graph.nodes())
    if (n.kind == NodeKind::op && n.op == OpKind::dropout && n.p > 0.0 && n.p < 1.0)
      vec = std::max(vec, 4);
  tile.vec = vec;
  return tile;
}

void choose_vector_width(KernelPlan& plan) {
  plan.tile = resolve_tile(*plan.spec, plan.tile);
  plan.row_vectors_aligned = plan.shape.n % plan.tile.vec == 0;
}

}  // namespace epifuse
