// The wave GEMM's emitter (templates/gemm_wave.cu.in, docs/amd.md): the
// AMD mainloop of matrix-instruction waves, with the staged epilogue every
// GEMM template shares (gemm_parts.hpp).
#include <algorithm>

#include <fmt/format.h>

#include "codegen/gemm/gemm.hpp"
#include "codegen/gemm/gemm_parts.hpp"

namespace epifuse {

std::uint32_t wave_shared_bytes(const WaveTile& t, int operand_bytes, bool dual) {
  const auto b = static_cast<std::uint32_t>(operand_bytes);
  const std::uint32_t row = static_cast<std::uint32_t>(t.bk) * b + 16u;  // a [row][k] tile's padded row
  const std::uint32_t buffers = 2u * static_cast<std::uint32_t>(t.bm + (dual ? 2 : 1) * t.bn) * row;
  const std::uint32_t frag_rows = t.op == 0 ? 32u : 16u;
  const auto waves = static_cast<std::uint32_t>(t.waves_m * t.waves_n);
  const auto wtn = static_cast<std::uint32_t>(t.bn / t.waves_n);
  const std::uint32_t staging = waves * (dual ? 2u : 1u) * frag_rows * (wtn + 4u) * 4u;
  return std::max(buffers, staging);
}

KernelSource emit_gemm_wave(const GemmPlan& g) {
  const KernelPlan& plan = *g.plan;
  const WaveTile& t = *g.wave;
  KernelSource ks;
  // The operands take 16-byte loads where the shape allows (the host checks
  // their alignment, else the general kernel); outputs may be stored four at
  // a time (aligned to four elements, else the general kernel).
  ks.inputs = operand_bindings(g);
  ks.input_alignment.assign(ks.inputs.size(), g.ld8 ? 16 : 0);
  bind_epilogue_tensors(g, ks);
  ParamLayout layout;
  operand_params(g, layout);
  if (g.ld8 && !g.vector_only) layout.add(ParamRole::vector_flag, 0, "vectorized", "int vectorized", 4, 4);
  column_sum_params(g, layout);  // Note [GEMM column sums]
  ks.requires_alignment = g.vector_only;
  ks.shared_bytes = wave_shared_bytes(t, g.operand_bytes, g.dual);

  const EpilogueContract contract = epilogue_contract(plan);
  const char* vector_flag = !g.ld8 ? "constexpr bool vec = false;  // operands not 16-byte loadable: element loads"
                            : g.vector_only ? "constexpr bool vec = true;  // the host checked A and B are 16-byte aligned"
                                            : "const bool vec = p.vectorized != 0;";
  TemplateVars vars = common_vars(plan, contract, layout);
  vars.insert({
      {"operand_t", std::string(storage_type_name(plan.spec->mainloop.a))},
      {"operand_bits", g.operand_bytes == 4 ? "unsigned" : "unsigned short"},
      {"matrix_op", fmt::format("{}<T, {}>", t.op == 0 ? "EfMfma32" : "EfWmma16", t.fma ? "false" : "true")},
      {"dual", g.dual ? "true" : "false"},
      {"tf32", plan.spec->mainloop.math == GemmMath::tf32 ? "true" : "false"},
      {"bm", std::to_string(t.bm)},
      {"bn", std::to_string(t.bn)},
      {"bk", std::to_string(t.bk)},
      {"group_m", std::to_string(t.group_m)},
      {"waves_m", std::to_string(t.waves_m)},
      {"waves_n", std::to_string(t.waves_n)},
      {"a_kmajor", g.a_kmajor ? "true" : "false"},
      {"b_kmajor", g.b_kmajor ? "true" : "false"},
      {"vector_flag", vector_flag},
  });
  vars.merge(operand_ld_vars(g));
  vars.merge(batch_vars(g, "(long long)blockIdx.z", "  "));
  vars.merge(staged_vars(g, contract, 8));
  vars.emplace("column_sum_decls", emit_column_sum_decls(g, "[4]"));  // a lane's four staged columns
  vars.emplace("column_sums", emit_wave_column_sums(g));
  layout.finish(ks);
  ks.text = render_template(embedded_template("gemm_wave.cu.in"), vars, "gemm_wave.cu.in");
  return ks;
}

}  // namespace epifuse
