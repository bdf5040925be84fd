#pragma once
/// grad(spec): reverse-mode differentiation over the IR (docs/design.md §9,
/// docs/autodiff.md). The result is two ordinary specs: the forward with the
/// state the backward needs as extra outputs, and the backward.
#include <string>
#include <vector>

#include "epifuse/spec.hpp"

namespace epifuse {

struct GradOptions {
  /// The inputs to differentiate with respect to, by name (`acc`, `acc0`,
  /// `acc1` for a GEMM's accumulators). Empty: every differentiable input
  /// (and the accumulators of a GEMM chain).
  std::vector<std::string> wrt;
};

/// One tensor the forward saves for the backward.
struct SavedTensor {
  std::string name;         ///< output of `forward`, input of `backward`
  /// "pre-activation" ([M,N], the outputs' dtype), "row statistic" ([M], f32),
  /// or "output": one of the forward's own outputs, read back (not an extra output)
  std::string kind;
  std::string of;           ///< what it holds: the forward value's name or its op
};

struct GradResult {
  /// The spec given, with the saved tensors (but not the "output" ones) appended
  /// to its outputs (its own outputs first, unchanged).
  KernelSpec forward;
  /// An elementwise spec with the forward's shape [M,N]. Inputs: `d<y>` for
  /// each output y of the spec given (y's dtype, full), the saved tensors,
  /// and the forward inputs the backward reads again (same names and
  /// dtypes). Outputs: `d<x>` for each x differentiated, in x's dtype and
  /// shape ([M,N], [N] through a col_sum, [M] through a row sum); `dacc`
  /// (`dacc0`, `dacc1`) in the dtype of the spec's first output. Dropouts
  /// are regenerated with the forward's streams, never saved (§4).
  KernelSpec backward;
  std::vector<SavedTensor> saved;
  /// The names differentiated, in the order of `backward`'s outputs.
  std::vector<std::string> wrt;
};

/// UserError for: a name that is not an input (or accumulator), an input
/// marked not differentiable (`"grad": false`), `seed` or `offset` (the
/// dropout's RNG state is not an input), a gradient name that would clash
/// with an input's or pass the name limit, and a gradient that is zero
/// everywhere by construction (the input reaches no output, or only through
/// step or relu_deriv).
GradResult grad(const KernelSpec& spec, const GradOptions& options = {});

}  // namespace epifuse
