#pragma once
// Which accumulator-dependent values a GEMM chain's forward saves for its
// backward (Note [Saving a minimum cut] in saved_state.cpp, docs/autodiff.md).
// IR layer: depends on the graph only.
#include <vector>

#include "epifuse/graph.hpp"

namespace epifuse {

/// Whether node i of `g` depends on a GEMM accumulator (is one, or reads one).
std::vector<bool> accumulator_dependent(const Graph& g);

/// `read[i]`: a derivative rule reads forward node i. Returns, per node, whether
/// the forward saves it as an extra output: a minimum set of accumulator-dependent
/// values (not row reductions, not dropouts, not [M,N] outputs) from which every
/// value read is recomputed elementwise, with the forward inputs, the forward's
/// [M,N] outputs and its row statistics. Deterministic: the same graph and reads
/// give the same set.
std::vector<bool> choose_saved(const Graph& g, const std::vector<bool>& read);

}  // namespace epifuse
