// The elementwise family's face to the pipeline (Note [Kernel families]).
#include <algorithm>

#include "codegen/elementwise/elementwise.hpp"
#include "codegen/family.hpp"
#include "epifuse/errors.hpp"
#include "ir/limits.hpp"

namespace epifuse {

namespace {

bool has_param(const KernelSource& source, ParamRole role) {
  return std::any_of(source.params.begin(), source.params.end(), [&](const ParamField& f) { return f.role == role; });
}

// A column-sum kernel is the one whose parameters hold a workspace (Note [Column sums]).
bool sums_columns(const KernelSource& source) { return has_param(source, ParamRole::workspace); }

// The 2-D kernel over strided rows is the one with an ld, no workspace and no
// 1/N (the flat kernel's, whose one index it divides; Note [Strided rows]).
bool walks_strided_rows(const KernelSource& source) {
  return !sums_columns(source) && !has_param(source, ParamRole::inv_n) &&
         (has_param(source, ParamRole::ld) || has_param(source, ParamRole::output_ld));
}

class ElementwiseFamily final : public KernelFamily {
 public:
  MainloopKind kind() const override { return MainloopKind::elementwise; }
  // A row reduction is the row family's.
  bool generates(const KernelSpec& spec) const override {
    return spec.mainloop.kind == MainloopKind::elementwise && row_reduction_of(spec) == nullptr;
  }

  TileConfig resolve_tile(const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& requested,
                          std::string_view target, const DeviceInfo& device) const override {
    const bool column_sums = has_column_sums(spec);
    ElementwiseTile tile;
    if (!requested)
      tile = column_sums ? default_column_sum_tile(spec, shape, target, device)
                         : default_elementwise_tile(spec, shape, target, device);
    if (requested) {
      const auto* t = std::get_if<ElementwiseTile>(&*requested);
      EPIFUSE_CHECK(t, "tile {}: an elementwise kernel takes an elementwise tile (threads, vec, blocks per SM)",
                    to_string(*requested));
      tile = *t;
    }
    check_threads_and_vec("tile", tile.threads, tile.vec);
    EPIFUSE_CHECK(tile.blocks_per_sm >= 0 && tile.blocks_per_sm <= limits::k_max_blocks_per_sm,
                  "tile: blocks per SM must be in [0, {}], got {}", limits::k_max_blocks_per_sm, tile.blocks_per_sm);
    EPIFUSE_CHECK(tile.stages == 0 || (column_sums && tile.stages >= 2 && tile.stages <= 4),
                  "tile {}: s{} asks for shared-memory stages, which only a column-sum kernel has (2 to 4; "
                  "Note [Staged column loads])",
                  tile.str(), tile.stages);
    ElementwiseTile resolved = resolve_elementwise_tile(spec, tile);
    // Note [Strided rows]: over strided rows a narrower vector rather than
    // none (the column-sum kernel keeps its tile: its VEC orders the sums).
    if (epilogue_strided(shape) && !column_sums)
      resolved.vec = strided_rows_vector_width(spec, shape, resolved.vec);
    if (column_sums) {
      // Note [Staged column loads]: what the fastest path's kernel stages.
      const bool vector_only = shape.n % resolved.vec == 0 && !ragged(resolved, shape);
      resolved.stages = vector_only ? column_sum_stages(spec, resolved, tile.stages) : 0;
    }
    return resolved;
  }

  std::string_view shape_class(const KernelSpec&, const TileConfig& resolved, const Shape& shape) const override {
    return elementwise_shape_class(std::get<ElementwiseTile>(resolved), shape);
  }

  KernelPath path_for(const KernelSpec&, const TileConfig& resolved, const Shape& shape) const override {
    // A ragged shape needs the scalar tail either way.
    return ragged(std::get<ElementwiseTile>(resolved), shape) ? KernelPath::general : KernelPath::fastest;
  }

  std::vector<TileConfig> tile_candidates(const KernelSpec& spec, const Shape&, std::string_view target,
                                          const DeviceInfo&) const override {
    const int natural = natural_vector_width(spec);
    if (has_column_sums(spec)) {
      // Column sums: the grid fills the GPU at the kernel's minimum occupancy
      // (blocks_per_sm: 0 is half a multiprocessor's threads, 2048 / threads
      // all of them, 512 / threads a quarter), so the candidates trade
      // registers against threads in flight; twice the vector width gives a
      // lane two 16-byte accesses per tensor and row, and on NVIDIA GPUs 16-bit
      // vectors also run staged (Note [Staged column loads]), whichever the
      // GPU's default is.
      std::vector<TileConfig> out;
      const bool stages = !target.starts_with("gfx");
      for (int threads : {256, 512, 128})
        for (int blocks : {0, 2048 / threads, std::max(1, 512 / threads)}) {
          for (int vec : {natural, std::min(2 * natural, 16)}) out.push_back(ElementwiseTile{threads, vec, blocks});
          const ElementwiseTile staged{threads, natural, blocks, 3};
          if (stages && column_sum_stages(spec, resolve_elementwise_tile(spec, staged), 3) > 0) out.push_back(staged);
          // Four rows of slots where all four fit (one 16-bit input at 512
          // threads, two or three at 256): a column sum of few inputs has few
          // bytes in flight a block.
          const ElementwiseTile deeper{threads, natural, blocks, 4};
          if (stages && column_sum_stages(spec, resolve_elementwise_tile(spec, deeper), 4) == 4) out.push_back(deeper);
        }
      // 1024 threads a block, one and two blocks an SM: a sum alone's default
      // (Note [Threads an SM for a sum alone]).
      out.push_back(ElementwiseTile{1024, natural, 0});
      out.push_back(ElementwiseTile{1024, natural, 2});
      return out;
    }
    // Grid policies seen to matter on Hopper (docs/perf/peers.md): covering
    // grids, and grid-stride grids of 4 to 16 blocks per SM; vec 0 is 16 bytes,
    // and twice that gives each thread two independent 16-byte accesses.
    std::vector<TileConfig> out;
    for (int threads : {256, 512, 128, 1024})
      for (int blocks : {0, 4, 8, 16})
        for (int vec : {natural, std::min(2 * natural, 16)}) out.push_back(ElementwiseTile{threads, vec, blocks});
    return out;
  }

  KernelSource emit(KernelPlan& plan) const override {
    const bool column_sums = has_column_sums(*plan.spec);
    column_sum_outputs(*plan.spec);  // UserError for [N] or [M] outputs the family does not write
    plan.shape_class = shape_class(*plan.spec, plan.tile, plan.shape);
    plan.path = std::max(plan.path, path_for(*plan.spec, plan.tile, plan.shape));  // general wins
    const ElementwisePlan e = choose_vector_width(plan);
    plan.kernel_name = kernel_name(plan);
    if (column_sums) return emit_column_sums(e);
    return e.walks_rows ? emit_elementwise_rows(e) : emit_elementwise(e);
  }

  LaunchGeometry geometry(const KernelSource& source, const Shape& shape, int multiprocessors) const override {
    const auto& tile = std::get<ElementwiseTile>(source.tile);
    if (sums_columns(source)) {
      const ColumnGrid c = column_grid(tile, shape, multiprocessors);
      LaunchGeometry g;
      g.grid[0] = static_cast<unsigned>(std::min<std::int64_t>(c.column_tiles, 0x7fffffff));
      g.grid[1] = static_cast<unsigned>(c.row_slices);
      g.block[0] = static_cast<unsigned>(c.lanes);
      g.block[1] = static_cast<unsigned>(c.rows_per_step);
      return g;
    }
    if (walks_strided_rows(source)) {
      const ColumnGrid c = strided_rows_grid(tile, shape, multiprocessors);
      LaunchGeometry g;
      g.grid[0] = static_cast<unsigned>(c.column_tiles);
      g.grid[1] = static_cast<unsigned>(c.row_slices);
      g.block[0] = static_cast<unsigned>(c.lanes);
      g.block[1] = static_cast<unsigned>(c.rows_per_step);
      return g;
    }
    const std::int64_t nvec = (shape.m * shape.n + tile.vec - 1) / tile.vec;
    std::int64_t blocks = (nvec + tile.threads - 1) / tile.threads;
    if (tile.blocks_per_sm > 0) blocks = std::min<std::int64_t>(blocks, std::int64_t{multiprocessors} * tile.blocks_per_sm);
    LaunchGeometry g;
    g.grid[0] = static_cast<unsigned>(std::min<std::int64_t>(blocks, 0x7fffffff));
    g.block[0] = static_cast<unsigned>(tile.threads);
    return g;
  }

  // Column sums: arrival counters and partial sums (an upper bound: one
  // partial row per output, whichever outputs are sums).
  WorkspaceNeeds workspace(const KernelSource& source, const Shape& shape) const override {
    if (!sums_columns(source)) return {};
    return column_sum_workspace(std::get<ElementwiseTile>(source.tile), shape, source.outputs.size());
  }
};

}  // namespace

const KernelFamily& elementwise_family() {
  static const ElementwiseFamily family;
  return family;
}

}  // namespace epifuse
