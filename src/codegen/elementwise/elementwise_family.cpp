// The elementwise family's face to the pipeline (Note [Kernel families]).
#include <algorithm>

#include "codegen/elementwise/elementwise.hpp"
#include "codegen/family.hpp"
#include "epifuse/errors.hpp"
#include "ir/limits.hpp"

namespace epifuse {

void check_no_column_sums(const KernelSpec& spec, std::string_view family);  // families.cpp

namespace {

class ElementwiseFamily final : public KernelFamily {
 public:
  MainloopKind kind() const override { return MainloopKind::elementwise; }
  // A row reduction is the row family's.
  bool generates(const KernelSpec& spec) const override {
    return spec.mainloop.kind == MainloopKind::elementwise && row_reduction_of(spec) == nullptr;
  }

  TileConfig resolve_tile(const KernelSpec& spec, const Shape&, const std::optional<TileConfig>& requested,
                          std::string_view, const DeviceInfo&) const override {
    ElementwiseTile tile;
    if (requested) {
      const auto* t = std::get_if<ElementwiseTile>(&*requested);
      EPIFUSE_CHECK(t, "tile {}: an elementwise kernel takes an elementwise tile (threads, vec, blocks per SM)",
                    to_string(*requested));
      tile = *t;
    }
    check_threads_and_vec("tile", tile.threads, tile.vec);
    EPIFUSE_CHECK(tile.blocks_per_sm >= 0 && tile.blocks_per_sm <= limits::k_max_blocks_per_sm,
                  "tile: blocks per SM must be in [0, {}], got {}", limits::k_max_blocks_per_sm, tile.blocks_per_sm);
    return resolve_elementwise_tile(spec, tile);
  }

  std::string_view shape_class(const KernelSpec&, const TileConfig& resolved, const Shape& shape) const override {
    return elementwise_shape_class(std::get<ElementwiseTile>(resolved), shape);
  }

  KernelPath path_for(const KernelSpec&, const TileConfig& resolved, const Shape& shape) const override {
    // A ragged shape needs the scalar tail either way.
    return ragged(std::get<ElementwiseTile>(resolved), shape) ? KernelPath::general : KernelPath::fastest;
  }

  std::vector<TileConfig> tile_candidates(const KernelSpec& spec, const Shape&, std::string_view,
                                          const DeviceInfo&) const override {
    const int natural = natural_vector_width(spec);
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
    check_no_column_sums(*plan.spec, "elementwise");
    plan.shape_class = shape_class(*plan.spec, plan.tile, plan.shape);
    plan.path = std::max(plan.path, path_for(*plan.spec, plan.tile, plan.shape));  // general wins
    const ElementwisePlan e = choose_vector_width(plan);
    plan.kernel_name = kernel_name(plan);
    return emit_elementwise(e);
  }

  LaunchGeometry geometry(const KernelSource& source, const Shape& shape, int multiprocessors) const override {
    const auto& tile = std::get<ElementwiseTile>(source.tile);
    const std::int64_t nvec = (shape.m * shape.n + tile.vec - 1) / tile.vec;
    std::int64_t blocks = (nvec + tile.threads - 1) / tile.threads;
    if (tile.blocks_per_sm > 0) blocks = std::min<std::int64_t>(blocks, std::int64_t{multiprocessors} * tile.blocks_per_sm);
    LaunchGeometry g;
    g.grid[0] = static_cast<unsigned>(std::min<std::int64_t>(blocks, 0x7fffffff));
    g.block[0] = static_cast<unsigned>(tile.threads);
    return g;
  }
};

}  // namespace

const KernelFamily& elementwise_family() {
  static const ElementwiseFamily family;
  return family;
}

}  // namespace epifuse
