// Note [Batched GEMM] (gemm.hpp): what a batched kernel adds to every GEMM
// template: the batch fields, the per-batch pointers and the dropout index of
// a batch's elements. An unbatched kernel's text is unchanged: each variable is
// its dense spelling, or empty.
#include <fmt/format.h>

#include "codegen/gemm/gemm_parts.hpp"

namespace epifuse {

namespace {
constexpr const char* k_operand_fields[] = {"a", "b", "b1"};
}  // namespace

void batch_params(const GemmPlan& g, ParamLayout& layout) {
  if (!g.batched) return;
  layout.add(ParamRole::batch, 0, "batch", "long long batch", 8, 8);
  for (std::uint32_t i = 0; i < (g.dual ? 3u : 2u); ++i)
    layout.add(ParamRole::batch_stride, i, fmt::format("batch_stride_{}", k_operand_fields[i]),
               fmt::format("long long batch_stride_{}", k_operand_fields[i]), 8, 8);
}

std::string tensor_pointer(const GemmPlan& g, std::string_view field) {
  return g.batched ? fmt::format("{}_bat", field) : fmt::format("p.{}", field);
}

std::string tensor_pointer(const GemmPlan& g, const TensorPlan& t) {
  return t.broadcast == Broadcast::full ? tensor_pointer(g, t.field) : fmt::format("p.{}", t.field);
}

std::string draw_index(const GemmPlan& g, std::string_view index) {
  return g.batched ? fmt::format("batch_base + {}", index) : std::string(index);
}

TemplateVars batch_vars(const GemmPlan& g, std::string_view batch_expr, std::string_view pad) {
  if (!g.batched)
    return {{"batch_setup", ""}, {"a_ptr", "p.a"}, {"b_ptr", "p.b"}, {"b1", g.dual ? "p.b1" : "p.b"}};
  const bool operands = !g.wgmma;  // the wgmma kernel's copy engine finds them (3-D tensor maps)
  const KernelPlan& plan = *g.plan;
  std::string s = fmt::format(
      "\n{0}// Note [Batched GEMM]: the batch; its {2}full tensors, and its first\n"
      "{0}// dropout element (batch b's elements come after b*M*N others).\n"
      "{0}const long long batch = {1}, batch_base = batch * p.m * p.n;\n",
      pad, batch_expr, operands ? "operands and " : "");
  for (int i = 0; i < (operands ? (g.dual ? 3 : 2) : 0); ++i)
    s += fmt::format("{0}const auto {1}_bat = p.{1} + batch * p.batch_stride_{1};\n", pad, k_operand_fields[i]);
  for (const TensorPlan& t : plan.inputs)
    if (t.broadcast == Broadcast::full) s += fmt::format("{0}const auto {1}_bat = p.{1} + batch_base;\n", pad, t.field);
  for (const TensorPlan& t : plan.outputs) s += fmt::format("{0}const auto {1}_bat = p.{1} + batch_base;\n", pad, t.field);
  s.pop_back();
  return {{"batch_setup", s}, {"a_ptr", "a_bat"}, {"b_ptr", "b_bat"}, {"b1", g.dual ? "b1_bat" : "b_bat"}};
}

}  // namespace epifuse
