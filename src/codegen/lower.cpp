// Lowering, read top to bottom (DESIGN §1; Halide's Lower.cpp): each pass is
// one function in its own file. Set EPIFUSE_DUMP=1 to print the plan after
// the passes.
#include <algorithm>
#include <cstdlib>
#include <iostream>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "codegen/kernel_plan.hpp"
#include "epifuse/errors.hpp"

namespace epifuse {

std::string TileConfig::str() const {
  return fmt::format("t{}v{}g{}", threads, vec, blocks_per_sm);
}

namespace {

// The kernel's name is a hash of everything the code depends on, so the
// source names no user text and two equal keys give equal bytes.
std::string kernel_name(const KernelPlan& plan) {
  const std::string key = fmt::format("{}|{}|{}|{}", signature(*plan.spec), plan.tile.str(),
                                      shape_class(plan.tile, plan.shape), plan.vector_only ? "vector" : "general");
  return fmt::format("ef_{:016x}", XXH3_64bits(key.data(), key.size()));
}

void dump(const KernelPlan& plan) {
  if (!std::getenv("EPIFUSE_DUMP")) return;
  std::cerr << fmt::format("[epifuse] plan {}: tile {} row_vectors_aligned={} vector_only={} inputs={} "
                           "outputs={} dropouts={} scales={}\n",
                           plan.kernel_name, plan.tile.str(), plan.row_vectors_aligned, plan.vector_only,
                           plan.inputs.size(), plan.outputs.size(), plan.dropouts.size(),
                           plan.scales.size());
}

}  // namespace

KernelSource emit_kernel(const KernelSpec& spec, const Shape& shape, const TileConfig& tile, KernelPath path) {
  KernelPlan plan = plan_operands(spec, shape, tile, path);
  choose_vector_width(plan);
  plan_precision(plan);
  plan.kernel_name = kernel_name(plan);
  dump(plan);
  return emit_elementwise(plan);
}

std::vector<TileConfig> tile_candidates(const KernelSpec& spec, const Shape& shape) {
  (void)shape;
  const int natural = natural_vector_width(spec);
  // Grid policies seen to matter on Hopper (../shared/PEERS.md): covering
  // grids, and grid-stride grids of 4 to 16 blocks per SM; vec 0 is 16 bytes,
  // and twice that gives each thread two independent 16-byte accesses.
  std::vector<TileConfig> out;
  for (int threads : {256, 512, 128, 1024})
    for (int blocks : {0, 4, 8, 16})
      for (int vec : {natural, std::min(2 * natural, 16)}) out.push_back({threads, vec, blocks});
  return out;
}

}  // namespace epifuse
