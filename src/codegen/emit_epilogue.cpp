// Pass 4: the epilogue as straight-line SSA (`v<node>`), one line per node,
// spelled from one table. The device functions named here live in
// templates/common/*.cuh; a HIP dialect reuses the names with its own headers.
#include <cmath>

#include "codegen/kernel_plan.hpp"
#include "epifuse/errors.hpp"
#include "reference/philox.hpp"

namespace epifuse {

std::string float_literal(float v) {
  EPIFUSE_ASSERT(std::isfinite(v), "non-finite literal");
  std::string s = fmt::format("{}", v);  // shortest round-trip form
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s + "f";
}

std::string_view storage_type_name(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f16: return "ef_half";
    case DType::bf16: return "ef_bf16";
  }
  return "?";
}

namespace {

// Spelling of each op over already-named operands a and b.
std::string spell(const KernelPlan& plan, std::size_t id, const Node& n, const std::string& a,
                  const std::string& b) {
  const bool fast = plan.fast[id];
  auto fn = [&](std::string_view name, bool has_fast) {
    return fmt::format("ef_{}{}({})", name, has_fast && fast ? "_fast" : "", a);
  };
  switch (n.op) {
    case OpKind::add: return fmt::format("{} + {}", a, b);
    case OpKind::sub: return fmt::format("{} - {}", a, b);
    case OpKind::mul: return fmt::format("{} * {}", a, b);
    case OpKind::max: return fmt::format("ef_max({}, {})", a, b);
    case OpKind::min: return fmt::format("ef_min({}, {})", a, b);
    case OpKind::relu: return fn("relu", false);
    case OpKind::gelu_tanh: return fn("gelu_tanh", true);
    case OpKind::gelu_erf: return fn("gelu_erf", false);
    case OpKind::sigmoid: return fn("sigmoid", true);
    case OpKind::silu: return fn("silu", true);
    case OpKind::tanh: return fn("tanh", true);
    case OpKind::cast: return fmt::format("ef_round_to<{}>({})", storage_type_name(n.dtype), a);
    case OpKind::scale: {
      std::size_t k = 0;
      while (plan.scales[k].id != id) ++k;
      return fmt::format("p.alpha{} * {}", k, a);
    }
    case OpKind::dropout: {
      if (n.p == 0.0) return a;         // keeps everything, scale 1
      if (n.p == 1.0) return "0.0f";    // drops everything
      std::size_t k = 0;
      while (plan.dropouts[k].id != id) ++k;
      const std::string scale = float_literal(dropout_scale(n.p));
      // masked(a) * scale: an add that follows contracts with the multiply
      // into one FFMA (common/philox.cuh, ef_dropout_masked).
      if (n.rng == RngMode::philox4)  // 0 < p < 1 here, so thr < 2^24
        return fmt::format("ef_dropout_masked(d{}, {}u, {}) * {}", k, dropout_threshold(n.p) << 8, a, scale);
      return fmt::format("ef_triton_keep(d{}, {}) ? {} * {} : 0.0f", k,
                         float_literal(triton_probability(n.p)), a, scale);
    }
  }
  EPIFUSE_ASSERT(false, "no spelling for op {}", static_cast<int>(n.op));
  return {};
}

}  // namespace

std::string emit_epilogue(const KernelPlan& plan, std::string& signature) {
  const Graph& g = plan.spec->graph;
  signature = fmt::format("const {}_params& p", plan.kernel_name);
  for (const auto& in : plan.inputs) signature += fmt::format(", float v{}", in.value.id);
  for (std::size_t k = 0; k < plan.accumulators.size(); ++k)
    signature += fmt::format(", float v{}", plan.accumulators[k].id);
  for (std::size_t k = 0; k < plan.dropouts.size(); ++k) signature += fmt::format(", unsigned d{}", k);
  for (std::size_t k = 0; k < plan.outputs.size(); ++k) signature += fmt::format(", float& o{}", k);

  std::string body;
  for (std::size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.kind != NodeKind::op) continue;
    const std::string a = fmt::format("v{}", n.args[0].id);
    const std::string b = n.args.size() > 1 ? fmt::format("v{}", n.args[1].id) : std::string();
    body += fmt::format("  const float v{} = {};\n", i, spell(plan, i, n, a, b));
  }
  for (std::size_t k = 0; k < plan.outputs.size(); ++k)
    body += fmt::format("  o{} = v{};\n", k, plan.outputs[k].value.id);
  if (!body.empty() && body.back() == '\n') body.pop_back();
  return body;
}


}  // namespace epifuse
