#pragma once
// Host side of the dropout RNG (docs/design.md §4). The bits come from the one shared
// definition, templates/common/philox.cuh; this adds what only the host
// computes (the integer threshold and the scale) and per-element draws for the
// reference evaluator. The threshold and scale themselves live in the IR
// layer (ir/dropout.hpp), where kernel families take them from too.
#include <cstdint>

#include "epifuse/graph.hpp"
#include "ir/dropout.hpp"

namespace epifuse {

/// Draw of element i, default mode: word (i & 3) of Philox(counter(i >> 2, stream, offset)).
std::uint32_t philox4_draw(std::uint64_t seed, std::uint64_t offset, std::uint32_t stream,
                           std::uint64_t i);

/// Draw of element i, triton mode: word 0 of Philox({off_lo, off_hi, 0, 0}), off = offset + i.
std::uint32_t triton_draw(std::uint64_t seed, std::uint64_t offset, std::uint64_t i);

/// The keep decision for element i of a dropout with probability p (docs/design.md §4).
bool dropout_keep(RngMode mode, double p, std::uint64_t seed, std::uint64_t offset,
                  std::uint32_t stream, std::uint64_t i);

}  // namespace epifuse
