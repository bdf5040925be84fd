// Lowering, read top to bottom (docs/design.md §1; Halide's Lower.cpp): the generic
// passes, each one function in its own file, then the spec's kernel family
// (Note [Kernel families]) runs its own. Set EPIFUSE_DUMP=1 to print the plan
// after the passes.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <optional>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "codegen/family.hpp"
#include "epifuse/errors.hpp"

namespace epifuse {

std::string kernel_name(const KernelPlan& plan) {
  // A hash of everything the code depends on, so the source names no user
  // text and two equal keys give equal bytes.
  const std::string key = fmt::format("{}|{}|{}|{}", signature(*plan.spec), to_string(plan.tile), plan.shape_class,
                                      plan.path == KernelPath::fastest ? "vector" : "general");
  return fmt::format("ef_{:016x}", XXH3_64bits(key.data(), key.size()));
}

namespace {

void dump(const KernelPlan& plan) {
  if (!std::getenv("EPIFUSE_DUMP")) return;
  std::cerr << fmt::format("[epifuse] plan {}: {} tile {} class {} path {} inputs={} outputs={} accumulators={} "
                           "dropouts={} scales={}\n",
                           plan.kernel_name, to_string(plan.spec->mainloop.kind), to_string(plan.tile),
                           plan.shape_class, plan.path == KernelPath::fastest ? "fastest" : "general",
                           plan.inputs.size(), plan.outputs.size(), plan.accumulators.size(), plan.dropouts.size(),
                           plan.scales.size());
}

}  // namespace

KernelSource emit_kernel(const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& tile,
                         KernelPath path, std::string_view target) {
  return emit_kernel(spec, shape, tile, path, target, assumed_device(target));
}

KernelSource emit_kernel(const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& tile,
                         KernelPath path, std::string_view target, const DeviceInfo& device) {
  const KernelFamily& family = family_for(spec);
  KernelPlan plan = plan_operands(spec, shape, path);
  plan.tile = family.resolve_tile(spec, shape, tile, target, device);
  plan_precision(plan);
  KernelSource source = family.emit(plan);
  dump(plan);
  return source;
}

std::vector<TileConfig> tile_candidates(const KernelSpec& spec, const Shape& shape, std::string_view target) {
  return tile_candidates(spec, shape, target, assumed_device(target));
}

// The family's candidates, and its default where they leave it out (a split
// the candidate lists do not make, a dual GEMM's small tile): a tune then
// times what an untuned run would get, so it never picks a tile slower than
// the default, and a default-against-tuned comparison always has the default's
// own time. A default the family refuses (column sums over rows no row tile
// holds) adds nothing; the error comes from the compile, as it would untuned.
std::vector<TileConfig> tile_candidates(const KernelSpec& spec, const Shape& shape, std::string_view target,
                                        const DeviceInfo& device) {
  const KernelFamily& family = family_for(spec);
  std::vector<TileConfig> out = family.tile_candidates(spec, shape, target, device);
  std::optional<TileConfig> untuned;
  try {
    untuned = family.resolve_tile(spec, shape, std::nullopt, target, device);
  } catch (const UserError&) {
  }
  if (untuned && std::find(out.begin(), out.end(), *untuned) == out.end()) out.push_back(*untuned);
  return out;
}

}  // namespace epifuse
