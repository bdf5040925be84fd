// Pass 1: verify the spec and shape, then decide which generated identifier
// each tensor gets. Binding names stay in the plan; only in<k>/out<k>/v<id>
// reach the source (DESIGN §6: no user text in generated code).
#include "codegen/kernel_plan.hpp"
#include "epifuse/errors.hpp"

namespace epifuse {

KernelPlan plan_operands(const KernelSpec& spec, const Shape& shape, const TileConfig& tile, KernelPath path) {
  verify(spec);
  verify_shape(spec, shape);
  EPIFUSE_CHECK(spec.mainloop.kind == MainloopKind::elementwise,
                "code generation for the {} mainloop is not implemented yet (elementwise only)",
                to_string(spec.mainloop.kind));
  EPIFUSE_CHECK(tile.threads >= 32 && tile.threads <= 1024 && tile.threads % 32 == 0,
                "tile: threads per block must be a multiple of 32 in [32, 1024], got {}",
                tile.threads);
  EPIFUSE_CHECK(tile.vec == 0 || tile.vec == 1 || tile.vec == 2 || tile.vec == 4 ||
                    tile.vec == 8 || tile.vec == 16,
                "tile: vec must be 0 (auto), 1, 2, 4, 8 or 16, got {}", tile.vec);
  EPIFUSE_CHECK(tile.blocks_per_sm >= 0 && tile.blocks_per_sm <= 64,
                "tile: blocks per SM must be in [0, 64], got {}", tile.blocks_per_sm);

  KernelPlan plan;
  plan.spec = &spec;
  plan.shape = shape;
  plan.tile = tile;
  plan.path = path;
  const Graph& g = spec.graph;
  for (Value v : g.inputs()) {
    const Node& n = g.node(v);
    plan.inputs.push_back({v, n.name, n.dtype, n.broadcast,
                           fmt::format("in{}", plan.inputs.size())});
    plan.needs_row_index |= n.broadcast == Broadcast::col;
    plan.needs_col_index |= n.broadcast == Broadcast::row;
  }
  for (const Output& o : g.outputs())
    plan.outputs.push_back({o.value, o.name, o.dtype, Broadcast::full,
                            fmt::format("out{}", plan.outputs.size())});
  for (std::size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.kind != NodeKind::op) continue;
    const Value v{static_cast<std::uint32_t>(i)};
    if (n.op == OpKind::scale) plan.scales.push_back(v);
    if (n.op == OpKind::dropout && n.p > 0.0 && n.p < 1.0) plan.dropouts.push_back(v);
  }
  return plan;
}

}  // namespace epifuse
