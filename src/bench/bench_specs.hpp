#pragma once
// The specs `epifuse bench` derives from a chain for its baselines (docs/bench.md).
// Pure IR transformations: no GPU, no codegen, testable anywhere. Only the
// bench uses them; the JIT path never does.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epifuse/spec.hpp"

namespace epifuse {

/// The chain with every dropout replaced by its operand (identity): the fused
/// kernel without the cost of its draws. Mainloop, inputs and outputs are kept.
/// nullopt when that would leave an output that is not full [M,N] (a dropout
/// applied to a vector was what made it full).
std::optional<KernelSpec> without_dropout(const KernelSpec& spec);

/// A gemm chain's epilogue as an elementwise kernel that runs after a separate
/// GEMM: the accumulator `acc` becomes a full [M,N] input named `gemm_output`
/// stored in `gemm_dtype` (what the GEMM wrote), everything else unchanged.
struct EpilogueAfterGemm {
  KernelSpec spec;          ///< elementwise
  std::string gemm_output;  ///< the input that replaces `acc` ("gemm_out" unless the chain uses that name)
  /// One per accumulator: gemm_output; a dual GEMM's "gemm_out0", "gemm_out1".
  std::vector<std::string> gemm_outputs;
};
EpilogueAfterGemm epilogue_after_gemm(const KernelSpec& gemm_spec, DType gemm_dtype);

/// True when a gemm chain stores only the accumulator itself, in `gemm_dtype`:
/// the GEMM alone is the whole chain and there is no epilogue to run after it.
bool chain_is_plain_gemm(const KernelSpec& gemm_spec, DType gemm_dtype);

/// One single-op spec per op node, each reading its operands from memory: what
/// an eager framework runs. Intermediates are stored in the first output's
/// dtype; a gemm chain's accumulator is read as a full input of `gemm_dtype`.
/// nullopt when an op works on vectors only (it has no [M,N] kernel).
std::optional<std::vector<KernelSpec>> one_kernel_per_op(const KernelSpec& spec, DType gemm_dtype);

/// cuBLASLt epilogues a gemm chain can start with: D = act(acc + bias), the
/// bias a row-broadcast [N] input (one value per column of C; in cuBLASLt's
/// column-major view C^T, one per row, length N).
/// dgelu_bgrad, drelu_bgrad: the backward's CUBLASLT_EPILOGUE_DGELU_BGRAD and
/// DRELU_BGRAD (match_lt_dgrad). relu_aux: the forward's CUBLASLT_EPILOGUE_RELU_AUX,
/// which the bench runs only to make DRELU_BGRAD's bit mask.
enum class LtEpilogueKind { relu_bias, gelu_bias, dgelu_bgrad, drelu_bgrad, relu_aux };
/// cuBLASLt's name of the epilogue ("CUBLASLT_EPILOGUE_RELU_BIAS", ...).
std::string_view lt_epilogue_name(LtEpilogueKind k);

struct LtEpilogueMatch {
  LtEpilogueKind kind = LtEpilogueKind::relu_bias;
  std::string bias;                  ///< the bias input's binding name
  DType bias_dtype = DType::f16;
  /// The chain's ops the epilogue does not run, in build order, each op named
  /// once ("dropout"); empty when the epilogue is the whole chain.
  std::vector<std::string> not_covered;
  /// The chain has one output and it is act(acc + bias) after only dropouts:
  /// the epilogue's D equals the chain's output with its dropouts removed.
  bool output_is_activation = false;
};

/// Matches `acc` used once, by `add(acc, bias)` (either order) with `bias` a
/// row-broadcast input, used once, by `relu` or `gelu_tanh` (cuBLASLt's GELU is
/// the tanh form). nullopt when the chain does not start that way.
std::optional<LtEpilogueMatch> match_lt_epilogue(const KernelSpec& gemm_spec);

/// A dgrad chain cuBLASLt runs as CUBLASLT_EPILOGUE_DGELU_BGRAD or DRELU_BGRAD:
/// the output `dz` = acc · gelu_tanh_deriv(`saved`) or acc · relu_deriv(`saved`),
/// `saved` a full [M,N] input (the GELU's input, which cuBLASLt's GELU_AUX forward
/// saves; for the ReLU, a value of its sign, whose bit mask RELU_AUX saves), and
/// the output `db` = col_sum(dz) (cuBLASLt's bias gradient: one value per row of
/// its column-major D, our columns). Nothing else in the chain.
struct LtDgradMatch {
  LtEpilogueKind kind = LtEpilogueKind::dgelu_bgrad;  ///< dgelu_bgrad or drelu_bgrad
  std::string saved;  ///< the saved input's binding name
  std::string dz, db;  ///< the outputs' names
};
std::optional<LtDgradMatch> match_lt_dgrad(const KernelSpec& gemm_spec);

}  // namespace epifuse
