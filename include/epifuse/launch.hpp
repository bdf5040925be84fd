#pragma once
/// What a launch supplies besides tensors: the dropout RNG's seed and offset.
/// Never baked into a kernel (docs/design.md §4); the reference evaluator takes the same.
#include <cstdint>

namespace epifuse {

struct LaunchArgs {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
};

}  // namespace epifuse
