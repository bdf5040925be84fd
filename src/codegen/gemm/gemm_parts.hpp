#pragma once
// The pieces of emit_gemm.cpp that every GEMM template's emitter uses: the
// operand parameters and bindings, the shared template variables, and the
// staged epilogue's text (Note [Staged epilogue], templates/gemm_mma.cu.in):
// a lane's four consecutive columns of one row, `quad[e]` (and a dual GEMM's
// `quad1[e]`) at (row, col0 + e).
#include <string>
#include <string_view>
#include <vector>

#include "codegen/epilogue.hpp"
#include "codegen/gemm/gemm.hpp"
#include "codegen/param_layout.hpp"
#include "codegen/template_engine.hpp"

namespace epifuse {

/// A, B (B0 and B1), the graph's tensors, M, N, K, the RNG and the scales.
void operand_params(const GemmPlan& g, ParamLayout& layout);
/// The loaders' leading dimensions (lda_kmajor, lda_mmajor, ldb_..., ldb1_...):
/// `p.lda` for a strided operand, else the dense p.k, p.m or p.n (Note [Strided operands]).
TemplateVars operand_ld_vars(const GemmPlan& g);
/// The mainloop operands' binding names, in parameter order.
std::vector<std::string> operand_bindings(const GemmPlan& g);
/// kernel, description, param_fields, epilogue_signature, epilogue_body.
TemplateVars common_vars(const KernelPlan& plan, const EpilogueContract& contract, const ParamLayout& layout);

/// Note [Batched GEMM] (emit_gemm_batch.cpp): the batch's fields after the
/// operands' lds (batch count, a batch stride per operand); and the template
/// variables of a kernel that finds its batch as `batch_expr` (blockIdx.z, or
/// the wgmma tile's): batch_setup (the per-batch pointers and the batch's first
/// dropout element, `batch_base`, at `pad`; empty for an unbatched kernel),
/// a_ptr, b_ptr and b1 (the operands' pointers, p.a, p.b, p.b1 unbatched; the
/// wgmma kernel's batch_setup has none: TMA reads its operands).
void batch_params(const GemmPlan& g, ParamLayout& layout);
TemplateVars batch_vars(const GemmPlan& g, std::string_view batch_expr, std::string_view pad);
/// An epilogue tensor's pointer in the kernel: `p.<field>`, or in a batched
/// kernel a full tensor's pointer at its batch (`<field>_bat`).
std::string tensor_pointer(const GemmPlan& g, const TensorPlan& t);
std::string tensor_pointer(const GemmPlan& g, std::string_view field);
/// Elements between the rows of a full [M,N] epilogue tensor as the kernel
/// reads them: `p.ld_<field>` for a strided one (Note [Strided epilogue
/// tensors]), else `p.n`.
std::string tensor_row_stride(const TensorPlan& t);
/// A dropout element index `index` (an expression of row and column) as the
/// kernel passes it to Philox: in a batched kernel `batch_base + index`
/// (docs/design.md §4, batched elements), else `index` unchanged.
std::string draw_index(const GemmPlan& g, std::string_view index);

/// The shared dropout draws of a lane's four columns: one Philox call each.
std::string emit_staged_draws(const GemmPlan& g);
/// The loads of an element's epilogue inputs at (row, col), clamped into the tensor.
/// `held[i]`, where given and not empty, is input i's value already in registers
/// (Note [Prefetched epilogue inputs], templates/gemm_sm90.cu.in): no load.
std::string emit_element_loads(const GemmPlan& g, const std::string& pad = "        ", bool staged = false,
                               const std::vector<std::string>& held = {});
/// One element: its own draws, the epilogue call, its stores (or, with
/// `quads`, the value into `<out>_q[e]` for a four-element store); a col_sum
/// output's term is added into `<out>_s<column_slot>` (Note [GEMM column sums]).
std::string emit_element(const GemmPlan& g, const EpilogueContract& contract, std::string_view accumulator,
                         const std::string& pad, bool quads = false, std::string_view column_slot = {});
/// Whether the staged epilogue stores four outputs at once (N % 4 == 0, aligned outputs).
bool vector_stores(const GemmPlan& g);
/// The `<out>_q[4]` arrays of a four-element store, and the stores.
std::string emit_staged_quads(const GemmPlan& g);
std::string emit_staged_stores(const GemmPlan& g);

/// The staged epilogue's template variables (staged_draws, _loads, _element,
/// _quads, _stores), its loop body at `indent` spaces; placeholders where the
/// kernel is not staged.
TemplateVars staged_vars(const GemmPlan& g, const EpilogueContract& contract, int indent, bool staged = true);
/// The graph's tensors as bindings: inputs read element by element, outputs
/// stored four at a time where vector_stores(g) (aligned to four elements,
/// else the general kernel).
void bind_epilogue_tensors(const GemmPlan& g, KernelSource& ks);

/// Note [GEMM column sums] (emit_gemm_col_sums.cpp): the col_sum workspace's
/// fields (col_counters, col_partials; none without col_sum outputs); the
/// lanes' sums of each col_sum output, declared after the mainloop as arrays
/// of `extent` ("[NI][2]", "[4]", "[TN]"; a line of its own each, or nothing
/// without col_sum outputs); and the code after the epilogue that combines
/// them into the [N] outputs, for the mma.sync kernel (`staged`: the staged
/// epilogue's lanes, four consecutive columns, else the fragments', two
/// columns of each), the SIMT kernel and the wave kernel.
void column_sum_params(const GemmPlan& g, ParamLayout& layout);
std::string emit_column_sum_decls(const GemmPlan& g, std::string_view extent);
std::string emit_column_sums(const GemmPlan& g, bool staged);
std::string emit_simt_column_sums(const GemmPlan& g);
std::string emit_wave_column_sums(const GemmPlan& g);
/// The same for the wgmma kernel (templates/gemm_sm90.cu.in): colbuf's and
/// col_last's pointers after the staging area; a chunk's sums declared, and
/// after the chunk combined into the warp's colbuf row (`fragment`: the
/// fragment epilogue's chunks of 64 columns, else the staged ones of CHUNK);
/// at the tile's end, the team's rows into the partials and the last
/// arrival's [N] outputs. Empty text without col_sum outputs.
std::string emit_wgmma_column_setup(const GemmPlan& g);
std::string emit_wgmma_chunk_decls(const GemmPlan& g, bool fragment);
std::string emit_wgmma_chunk_sums(const GemmPlan& g, bool fragment);
std::string emit_wgmma_column_sums(const GemmPlan& g);

}  // namespace epifuse
