#pragma once
// The numbers a dropout node turns into (docs/design.md §4), computed once on the host
// in double and shared by every consumer: the reference evaluator, every
// kernel family's emitter. IR layer: depends on the graph only.
#include <cstdint>

#include "epifuse/graph.hpp"

namespace epifuse {

/// thr = llround(p * 2^24) in double: keep iff (draw >> 8) >= thr. p in [0, 1].
/// thr is 0 for p < 2^-25 (keeps all) and 2^24 for p >= 1 - 2^-25 (drops all).
std::uint32_t dropout_threshold(double p);

/// scale = float(1 / (1 - p)), 0 when p = 1: kept values are v * scale (fp32 multiply).
float dropout_scale(double p);

/// The fp32 probability of the triton mode's `r > p`: float(p), round to nearest.
float triton_probability(double p);

/// What a dropout node does for every element, decided from its numbers alone.
/// `keep_all` and `drop_all` need no draws, and a kernel must not test draws
/// for them: the philox4 test in 32 bits (draw >= thr << 8) wraps at thr = 2^24.
enum class DropoutEffect : std::uint8_t {
  keep_all,  ///< every element kept: v * scale (philox4 thr = 0; triton float(p) <= 0)
  drop_all,  ///< every element 0 (philox4 thr = 2^24; triton float(p) >= 1, since r < 1)
  masked,    ///< per-element keep test on a draw
};
DropoutEffect dropout_effect(double p, RngMode rng);

}  // namespace epifuse
