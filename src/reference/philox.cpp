#include "reference/philox.hpp"

#include <cmath>

#include "common/philox.cuh"
#include "epifuse/errors.hpp"

namespace epifuse {

std::uint32_t dropout_threshold(double p) {
  EPIFUSE_ASSERT(p >= 0.0 && p <= 1.0, "dropout probability {} outside [0, 1]", p);
  // p * 2^24 is exact in double (a power-of-two scale), so only llround rounds.
  return static_cast<std::uint32_t>(std::llround(p * 16777216.0));
}

float dropout_scale(double p) {
  EPIFUSE_ASSERT(p >= 0.0 && p <= 1.0, "dropout probability {} outside [0, 1]", p);
  return p == 1.0 ? 0.0f : static_cast<float>(1.0 / (1.0 - p));
}

float triton_probability(double p) { return static_cast<float>(p); }

std::uint32_t philox4_draw(std::uint64_t seed, std::uint64_t offset, std::uint32_t stream,
                           std::uint64_t i) {
  return ef_philox4_draw(seed, offset, stream, i);
}

std::uint32_t triton_draw(std::uint64_t seed, std::uint64_t offset, std::uint64_t i) {
  return ef_triton_draw(seed, offset, i);
}

bool dropout_keep(RngMode mode, double p, std::uint64_t seed, std::uint64_t offset,
                  std::uint32_t stream, std::uint64_t i) {
  if (mode == RngMode::triton)
    return ef_triton_keep(ef_triton_draw(seed, offset, i), triton_probability(p));
  return ef_dropout_keep(ef_philox4_draw(seed, offset, stream, i), dropout_threshold(p));
}

}  // namespace epifuse
