// The row family's face to the pipeline (Note [Kernel families]).
#include <algorithm>

#include "codegen/elementwise/elementwise.hpp"
#include "codegen/family.hpp"
#include "codegen/row/row.hpp"
#include "epifuse/errors.hpp"
#include "ir/limits.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

namespace {

// Floats of full inputs a thread may hold for the row-in-registers kernel:
// beyond this the kernel would spill, and streaming the row again is cheaper.
constexpr int k_register_floats = 64;

int full_inputs(const KernelSpec& spec) {
  int n = 0;
  for (const Node& node : spec.graph.nodes())
    if (node.kind == NodeKind::input && node.broadcast == Broadcast::full) ++n;
  return std::max(n, 1);
}

class RowFamily final : public KernelFamily {
 public:
  MainloopKind kind() const override { return MainloopKind::elementwise; }

  TileConfig resolve_tile(const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& requested,
                          std::string_view) const override {
    RowTile tile;
    if (requested) {
      const auto* t = std::get_if<RowTile>(&*requested);
      EPIFUSE_CHECK(t, "tile {}: a graph with row reductions takes a row tile rTHREADSvVECxREGS[b], e.g. r256v8x2",
                    to_string(*requested));
      tile = *t;
    }
    check_threads_and_vec("row tile", tile.threads, tile.vec);
    EPIFUSE_CHECK(tile.regs >= -1 && tile.regs <= 32, "row tile: regs must be -1 (auto), 0 (stream) or up to 32, got {}",
                  tile.regs);
    EPIFUSE_CHECK(tile.persistent == 0 || tile.persistent == 1, "row tile: persistent is 0 or 1, got {}",
                  tile.persistent);
    return resolve_row_tile(spec, shape, tile);
  }

  std::string_view shape_class(const KernelSpec&, const TileConfig& resolved, const Shape& shape) const override {
    return row_shape_class(std::get<RowTile>(resolved), shape);
  }

  KernelPath path_for(const KernelSpec&, const TileConfig&, const Shape&) const override {
    return KernelPath::fastest;
  }

  // Rows in registers at four block sizes (the tuner finds the occupancy that
  // hides the latency of a reduction's barriers), streaming for long rows,
  // and one block per row as the baseline the persistent grid is measured against.
  std::vector<TileConfig> tile_candidates(const KernelSpec&, const Shape&, std::string_view) const override {
    return {RowTile{128, 0, -1, 1}, RowTile{256, 0, -1, 1}, RowTile{512, 0, -1, 1}, RowTile{1024, 0, -1, 1},
            RowTile{256, 0, 0, 1},  RowTile{1024, 0, 0, 1}, RowTile{256, 0, -1, 0}};
  }

  KernelSource emit(KernelPlan& plan) const override {
    plan.shape_class = shape_class(*plan.spec, plan.tile, plan.shape);
    const RowPlan r = plan_row(plan);
    plan.kernel_name = kernel_name(plan);
    return emit_row(r);
  }

  LaunchGeometry geometry(const KernelSource& source, const Shape& shape, int) const override {
    const auto& tile = std::get<RowTile>(source.tile);
    LaunchGeometry g;
    g.block[0] = static_cast<unsigned>(tile.threads);
    if (tile.persistent)
      g.persistent_work = shape.m;
    else
      g.grid[0] = static_cast<unsigned>(std::min<std::int64_t>(shape.m, 0x7fffffff));
    return g;
  }
};

}  // namespace

bool has_row_reduction(const KernelSpec& spec) {
  return std::any_of(spec.graph.nodes().begin(), spec.graph.nodes().end(),
                     [](const Node& n) { return n.kind == NodeKind::op && is_row_reduction(n.op); });
}

RowTile resolve_row_tile(const KernelSpec& spec, const Shape& shape, RowTile tile) {
  if (tile.vec == 0) tile.vec = natural_vector_width(spec);  // 16 bytes of the narrowest full tensor
  // A vector never straddles rows: lower vec until it divides N (1 always does).
  const std::int64_t n = std::max<std::int64_t>(shape.n, 1);
  while (tile.vec > 1 && n % tile.vec != 0) tile.vec /= 2;
  if (tile.regs < 0) {
    const std::int64_t per_pass = std::int64_t{tile.threads} * tile.vec;
    const std::int64_t items = (n + per_pass - 1) / per_pass;
    tile.regs = items * tile.vec * full_inputs(spec) <= k_register_floats ? static_cast<int>(items) : 0;
  }
  return tile;
}

std::string_view row_shape_class(const RowTile& resolved, const Shape& shape) {
  if (resolved.vec > 1 && shape.n % resolved.vec != 0) return "row/n_not_vec";
  if (resolved.regs > 0 && shape.n > std::int64_t{resolved.threads} * resolved.vec * resolved.regs) return "row/n_too_long";
  return "row";
}

const KernelFamily& row_family() {
  static const RowFamily family;
  return family;
}

}  // namespace epifuse
