#pragma once
// What a chain's forward saves for its backward: which accumulator-dependent
// values a GEMM chain saves (Note [Saving a minimum cut] in saved_state.cpp),
// which ReLUs read an output instead of their operand and which softmax
// results are saved instead of recomputed (Note [Choices of what the backward
// reads]); docs/autodiff.md. IR layer.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "epifuse/autodiff.hpp"
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

/// The [M,N] output that carries the sign of ReLU node `relu`: the ReLU itself,
/// or the end of its chain of single users that keep the sign (dropout, a
/// positive scale, a cast); nullopt where there is none (Note [ReLU's
/// derivative from an output]).
std::optional<std::uint32_t> output_of_same_sign(const Graph& g, std::uint32_t relu);

/// The backward `differentiate` gives for the cheapest choice at the nodes
/// where the backward may obtain a value two ways: a ReLU with an output of its
/// sign (its rule reads that output, or its operand) and a softmax or
/// log_softmax whose result no [M,N] output stores (the forward saves it, or
/// the backward recomputes it); per node: true for the output read or the
/// result saved. Chosen by the bytes of [M,N] tensors the forward writes and
/// the backward reads (Note [Choices of what the backward reads]). A UserError
/// every choice throws is rethrown.
GradResult choose_reads(const KernelSpec& spec,
                        const std::function<GradResult(const std::vector<bool>&)>& differentiate);

}  // namespace epifuse
