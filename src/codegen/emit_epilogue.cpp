// The epilogue as straight-line SSA (`v<node>`), one line per node, spelled
// from the op table (Note [One epilogue contract] in epilogue.hpp). The device
// functions named here live in templates/common/*.cuh; a HIP dialect reuses
// the names with its own definitions.
#include <cmath>

#include "codegen/epilogue.hpp"
#include "epifuse/errors.hpp"
#include "ir/dropout.hpp"
#include "ir/op_table.hpp"

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

std::size_t position(const std::vector<Value>& list, std::size_t id) {
  std::size_t k = 0;
  while (list[k].id != id) ++k;
  return k;
}

std::string spell_dropout(const KernelPlan& plan, std::size_t id, const Node& n, const std::string& a) {
  const std::string scale = float_literal(dropout_scale(n.p));
  // A dropped element is a * 0, not 0: NaN and inf become NaN as in PyTorch's
  // x * mask * scale (docs/decisions.md, "Dropout multiplies by its mask").
  switch (dropout_effect(n.p, n.rng)) {
    case DropoutEffect::drop_all: return fmt::format("{} * 0.0f", a);
    case DropoutEffect::keep_all: return scale == "1.0f" ? a : fmt::format("{} * {}", a, scale);
    case DropoutEffect::masked: break;
  }
  const std::size_t k = position(plan.dropouts, id);
  // a * factor: an add that follows contracts with the multiply into one
  // FFMA (common/philox.cuh, ef_dropout_factor). masked means thr in
  // [1, 2^24 - 1], so thr << 8 fits 32 bits.
  if (n.rng == RngMode::philox4)
    return fmt::format("{} * ef_dropout_factor(d{}, {}u, {})", a, k, dropout_threshold(n.p) << 8, scale);
  return fmt::format("{} * (ef_triton_keep(d{}, {}) ? {} : 0.0f)", a, k, float_literal(triton_probability(n.p)),
                     scale);
}

// Spelling of each op over already-named operands a and b.
std::string spell(const KernelPlan& plan, std::size_t id, const Node& n, const std::string& a,
                  const std::string& b) {
  const OpInfo& info = op_info(n.op);
  switch (info.spelling) {
    case Spelling::infix: return fmt::format("{} {} {}", a, info.device, b);
    case Spelling::call:
      return fmt::format("{}{}({}{}{})", info.device, info.fast_for != FastFor::none && plan.fast[id] ? "_fast" : "", a,
                         info.arity == 2 ? ", " : "", b);
    case Spelling::special: break;
  }
  switch (n.op) {
    case OpKind::cast: return fmt::format("ef_round_to<{}>({})", storage_type_name(n.dtype), a);
    case OpKind::scale: return fmt::format("p.alpha{} * {}", position(plan.scales, id), a);
    case OpKind::add_scalar: return fmt::format("({} + {})", a, float_literal(static_cast<float>(n.alpha)));
    case OpKind::dropout: return spell_dropout(plan, id, n, a);
    // The row family's 1/N parameter, as row_mean divides (family_for keeps
    // div_n to chains that reduce rows).
    case OpKind::div_n: return fmt::format("(float)((double)({}) * p.n_inv)", a);
    default: break;
  }
  EPIFUSE_ASSERT(false, "no spelling for op {}", info.name);
  return {};
}

}  // namespace

EpilogueContract epilogue_contract(const KernelPlan& plan) {
  using Kind = EpilogueArg::Kind;
  EpilogueContract c;
  for (Value v : plan.accumulators)
    c.args.push_back({Kind::accumulator, static_cast<std::uint32_t>(plan.spec->graph.node(v).accumulator),
                      fmt::format("v{}", v.id)});
  for (std::size_t k = 0; k < plan.inputs.size(); ++k)
    c.args.push_back({Kind::input, static_cast<std::uint32_t>(k), fmt::format("v{}", plan.inputs[k].value.id)});
  for (std::size_t k = 0; k < plan.dropouts.size(); ++k)
    c.args.push_back({Kind::draw, static_cast<std::uint32_t>(k), fmt::format("d{}", k)});
  for (std::size_t k = 0; k < plan.outputs.size(); ++k)
    c.args.push_back({Kind::output, static_cast<std::uint32_t>(k), fmt::format("o{}", k)});
  return c;
}

std::string epilogue_signature(const KernelPlan& plan, const EpilogueContract& contract) {
  std::string s = fmt::format("const {}_params& p", plan.kernel_name);
  for (const EpilogueArg& a : contract.args) {
    const char* type = a.kind == EpilogueArg::Kind::draw ? "unsigned" : a.kind == EpilogueArg::Kind::output ? "float&" : "float";
    s += fmt::format(", {} {}", type, a.param);
  }
  return s;
}

std::string epilogue_body(const KernelPlan& plan) {
  const Graph& g = plan.spec->graph;
  std::string body;
  for (std::size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    // A col_sum has no value at one element: its output receives the
    // operand, which the kernel sums (no op reads it: the families check that).
    if (n.kind != NodeKind::op || is_col_reduction(n.op)) continue;
    const std::string a = fmt::format("v{}", n.args[0].id);
    const std::string b = n.args.size() > 1 ? fmt::format("v{}", n.args[1].id) : std::string();
    body += fmt::format("  const float v{} = {};\n", i, spell(plan, i, n, a, b));
  }
  // A col_sum output receives the col_sum's operand: the term the kernel adds up.
  for (std::size_t k = 0; k < plan.outputs.size(); ++k) {
    const Node& n = g.node(plan.outputs[k].value);
    const bool sum = n.kind == NodeKind::op && is_col_reduction(n.op);
    body += fmt::format("  o{} = v{};{}\n", k, sum ? n.args[0].id : plan.outputs[k].value.id, sum ? "  // a column term" : "");
  }
  if (!body.empty() && body.back() == '\n') body.pop_back();
  return body;
}

std::string spell_op(const KernelPlan& plan, std::size_t id) {
  const Node& n = plan.spec->graph.nodes()[id];
  const std::string a = fmt::format("v{}", n.args[0].id);
  const std::string b = n.args.size() > 1 ? fmt::format("v{}", n.args[1].id) : std::string();
  return spell(plan, id, n, a, b);
}

std::string epilogue_call(const KernelPlan& plan, const EpilogueContract& contract, const ValueProvider& provide) {
  std::string s = fmt::format("{}_epilogue(p", plan.kernel_name);
  for (const EpilogueArg& a : contract.args) s += ", " + provide(a);
  return s + ")";
}

}  // namespace epifuse
