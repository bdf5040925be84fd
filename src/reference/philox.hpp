#pragma once
// Host side of the dropout RNG (DESIGN §4). The bits come from the one shared
// definition, templates/common/philox.cuh; this adds what only the host
// computes (the integer threshold and the scale) and per-element draws for the
// reference evaluator. Code generators use dropout_threshold / dropout_scale /
// triton_probability so kernels receive exactly the numbers the reference uses.
#include <cstdint>

#include "epifuse/graph.hpp"

namespace epifuse {

/// thr = llround(p * 2^24) in double: keep iff (draw >> 8) >= thr. p in [0, 1].
std::uint32_t dropout_threshold(double p);

/// scale = float(1 / (1 - p)), 0 when p = 1: kept values are v * scale (fp32 multiply).
float dropout_scale(double p);

/// The fp32 probability of the triton mode's `r > p`: float(p), round to nearest.
float triton_probability(double p);

/// Draw of element i, default mode: word (i & 3) of Philox(counter(i >> 2, stream, offset)).
std::uint32_t philox4_draw(std::uint64_t seed, std::uint64_t offset, std::uint32_t stream,
                           std::uint64_t i);

/// Draw of element i, triton mode: word 0 of Philox({off_lo, off_hi, 0, 0}), off = offset + i.
std::uint32_t triton_draw(std::uint64_t seed, std::uint64_t offset, std::uint64_t i);

/// The keep decision for element i of a dropout with probability p (DESIGN §4).
bool dropout_keep(RngMode mode, double p, std::uint64_t seed, std::uint64_t offset,
                  std::uint32_t stream, std::uint64_t i);

}  // namespace epifuse
