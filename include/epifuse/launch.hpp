#pragma once
/// What a launch supplies besides tensors: the dropout RNG's seed and offset.
/// Never baked into a kernel (docs/design.md §4); the reference evaluator takes the same.
#include <cstdint>

namespace epifuse {

struct LaunchArgs {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  /// A device pointer to two uint64 {seed, offset base}, or 0. When set, a
  /// dropout kernel reads its seed there and adds the base to `offset` on the
  /// device (Note [Seeds on the device]), and `seed` is not used.
  std::uint64_t rng_state = 0;
};

}  // namespace epifuse
