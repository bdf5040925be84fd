#pragma once
/// The dgrad epilogue (docs/gemm-backward.md §1): a backward spec run on the
/// accumulator of the GEMM that produces its upstream gradient, so that the
/// GEMM dY_above·W_aboveᵀ writes dacc (and the bias gradient) of the layer
/// below in its own epilogue instead of storing dy for a second kernel.
#include <string_view>

#include "epifuse/spec.hpp"

namespace epifuse {

/// `backward` (an elementwise spec, e.g. grad(spec).backward) with its input
/// `upstream` (a full [M,N] input: `dy`) replaced by the accumulator of a GEMM
/// whose mainloop is `gemm`: every other input, op (dropout streams
/// included), name and output is kept, so the result computes what
/// `backward` computes with dy := A·B, read as fp32 instead of rounded to dy's
/// dtype. UserError for: a `backward` that is not elementwise, an `upstream`
/// that is not one of its inputs or not full, and a `gemm` that is not a
/// single GEMM. Whether a GEMM family runs the result (column sums, [M]
/// outputs) is checked where it is compiled, as for any chain.
KernelSpec as_gemm_epilogue(const KernelSpec& backward, std::string_view upstream, const Mainloop& gemm);

}  // namespace epifuse
