#include "ir/dropout.hpp"

#include <cmath>

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

DropoutEffect dropout_effect(double p, RngMode rng) {
  if (rng == RngMode::triton) {
    // keep = p <= 0 || r > p with r in [0, 1 - 2^-24] (common/philox.cuh).
    const float pf = triton_probability(p);
    if (pf <= 0.0f) return DropoutEffect::keep_all;
    return pf >= 1.0f ? DropoutEffect::drop_all : DropoutEffect::masked;
  }
  // keep = (draw >> 8) >= thr with draw >> 8 in [0, 2^24 - 1].
  const std::uint32_t thr = dropout_threshold(p);
  if (thr == 0) return DropoutEffect::keep_all;
  return thr >= (1u << 24) ? DropoutEffect::drop_all : DropoutEffect::masked;
}

}  // namespace epifuse
