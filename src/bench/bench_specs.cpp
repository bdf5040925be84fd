// The specs bench derives from a chain (bench_specs.hpp): copies of the graph
// with one thing changed, made through the builder so that every check of a
// hand-written graph applies to them too.
#include "bench/bench_specs.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>

#include <fmt/format.h>

#include "epifuse/errors.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

namespace {

// Rebuilds `from` into `to` node by node, dropout streams kept. `accumulator` gives the value
// that replaces an accumulator leaf; `drop_dropout` makes each dropout its
// operand. Returns the new value of every old node; outputs are not copied.
std::vector<Value> copy_nodes(const Graph& from, Graph& to,
                              const std::function<Value(Graph&, const Node&)>& accumulator, bool drop_dropout) {
  std::vector<Value> map(from.nodes().size());
  for (std::size_t i = 0; i < from.nodes().size(); ++i) {
    const Node& n = from.nodes()[i];
    switch (n.kind) {
      case NodeKind::accumulator: map[i] = accumulator(to, n); continue;
      case NodeKind::input: map[i] = to.input(n.name, n.dtype, n.broadcast); continue;
      case NodeKind::op: break;
    }
    std::vector<Value> args;
    for (Value a : n.args) args.push_back(map[a.id]);
    if (n.op == OpKind::dropout && drop_dropout) {
      map[i] = args[0];
      continue;
    }
    map[i] = to.copy_op(n, args);
    if (!n.name.empty()) to.set_name(map[i], n.name);
  }
  return map;
}

Value same_accumulator(Graph& to, const Node& n) { return to.accumulator(n.accumulator); }

// Uses of each node by ops and outputs, and (when used once) its user.
struct Uses {
  std::vector<int> count;
  std::vector<std::uint32_t> user;  // the last op using it; UINT32_MAX for none
};

Uses uses_of(const Graph& g) {
  Uses u{std::vector<int>(g.nodes().size(), 0), std::vector<std::uint32_t>(g.nodes().size(), UINT32_MAX)};
  for (std::size_t i = 0; i < g.nodes().size(); ++i)
    for (Value a : g.nodes()[i].args) {
      ++u.count[a.id];
      u.user[a.id] = static_cast<std::uint32_t>(i);
    }
  for (const Output& o : g.outputs()) ++u.count[o.value.id];
  return u;
}

// The op that is the only use of node `i` (no output reads it), or nullptr.
const Node* only_user(const Graph& g, const Uses& u, std::uint32_t i, std::uint32_t* user_index = nullptr) {
  if (u.count[i] != 1 || u.user[i] == UINT32_MAX) return nullptr;
  if (user_index) *user_index = u.user[i];
  return &g.nodes()[u.user[i]];
}

}  // namespace

std::optional<KernelSpec> without_dropout(const KernelSpec& spec) {
  KernelSpec out;
  out.name = spec.name.empty() ? std::string() : spec.name + "_no_dropout";
  out.mainloop = spec.mainloop;
  out.precision = spec.precision;
  out.default_shape = spec.default_shape;
  const std::vector<Value> map = copy_nodes(spec.graph, out.graph, same_accumulator, true);
  for (const Output& o : spec.graph.outputs()) {
    const Value v = map[o.value.id];
    if (out.graph.node(v).broadcast != Broadcast::full) return std::nullopt;
    out.graph.output(o.name, v, o.dtype);
  }
  return out;
}

EpilogueAfterGemm epilogue_after_gemm(const KernelSpec& gemm_spec, DType gemm_dtype) {
  EPIFUSE_ASSERT(gemm_spec.mainloop.kind != MainloopKind::elementwise, "epilogue_after_gemm of an elementwise spec");
  EpilogueAfterGemm out;
  const bool dual = gemm_spec.mainloop.kind == MainloopKind::dual_gemm;
  for (int i = 0; i < (dual ? 2 : 1); ++i) {
    std::string name = dual ? fmt::format("gemm_out{}", i) : "gemm_out";
    while (gemm_spec.graph.find(name).valid()) name += "_";
    out.gemm_outputs.push_back(name);
  }
  out.gemm_output = out.gemm_outputs.front();
  KernelSpec& s = out.spec;
  s.name = gemm_spec.name.empty() ? std::string() : gemm_spec.name + "_epilogue";
  s.mainloop = Mainloop{};  // elementwise
  s.precision = gemm_spec.precision;
  const std::vector<Value> map = copy_nodes(gemm_spec.graph, s.graph, [&](Graph& to, const Node& n) {
    return to.input(out.gemm_outputs.at(static_cast<std::size_t>(n.accumulator)), gemm_dtype, Broadcast::full);
  }, false);
  for (const Output& o : gemm_spec.graph.outputs()) s.graph.output(o.name, map[o.value.id], o.dtype);
  return out;
}

bool chain_is_plain_gemm(const KernelSpec& gemm_spec, DType gemm_dtype) {
  const Graph& g = gemm_spec.graph;
  for (const Node& n : g.nodes())
    if (n.kind != NodeKind::accumulator) return false;
  return std::all_of(g.outputs().begin(), g.outputs().end(), [&](const Output& o) {
    return g.node(o.value).kind == NodeKind::accumulator && o.dtype == gemm_dtype;
  });
}

std::optional<std::vector<KernelSpec>> one_kernel_per_op(const KernelSpec& spec, DType gemm_dtype) {
  const Graph& g = spec.graph;
  const DType inter = g.outputs().front().dtype;
  std::vector<KernelSpec> out;
  for (const Node& n : g.nodes()) {
    if (n.kind != NodeKind::op) continue;
    if (n.broadcast != Broadcast::full) return std::nullopt;  // an op on vectors only: no [M,N] kernel
    KernelSpec s;
    s.precision = spec.precision;
    std::vector<Value> args;
    for (std::size_t a = 0; a < n.args.size(); ++a) {
      const Node& arg = g.node(n.args[a]);
      const DType dt = arg.kind == NodeKind::input         ? arg.dtype
                       : arg.kind == NodeKind::accumulator ? gemm_dtype
                                                           : inter;
      const Broadcast b = arg.kind == NodeKind::input ? arg.broadcast : Broadcast::full;
      args.push_back(s.graph.input(fmt::format("a{}", a), dt, b));
    }
    Value v;
    switch (n.op) {
      case OpKind::scale: v = s.graph.scale(args[0], n.alpha); break;
      case OpKind::add_scalar: v = s.graph.add_scalar(args[0], n.alpha); break;
      case OpKind::dropout: v = s.graph.dropout(args[0], n.p, n.rng); break;
      case OpKind::cast: v = s.graph.cast(args[0], n.dtype); break;
      default:
        v = op_info(n.op).arity == 2 ? s.graph.binary(n.op, args[0], args[1]) : s.graph.unary(n.op, args[0]);
    }
    // An op whose operands are all vectors cannot run as an [M,N] elementwise kernel alone.
    bool has_full = false;
    for (Value a : args) has_full |= s.graph.node(a).broadcast == Broadcast::full;
    if (!has_full) return std::nullopt;
    s.graph.output("y", v, inter);
    out.push_back(std::move(s));
  }
  return out;
}

std::string_view lt_epilogue_name(LtEpilogueKind k) {
  switch (k) {
    case LtEpilogueKind::relu_bias: return "CUBLASLT_EPILOGUE_RELU_BIAS";
    case LtEpilogueKind::gelu_bias: return "CUBLASLT_EPILOGUE_GELU_BIAS";
    case LtEpilogueKind::dgelu_bgrad: return "CUBLASLT_EPILOGUE_DGELU_BGRAD";
    case LtEpilogueKind::drelu_bgrad: return "CUBLASLT_EPILOGUE_DRELU_BGRAD";
    case LtEpilogueKind::relu_aux: return "CUBLASLT_EPILOGUE_RELU_AUX";
  }
  return {};
}

std::optional<LtEpilogueMatch> match_lt_epilogue(const KernelSpec& gemm_spec) {
  if (gemm_spec.mainloop.kind != MainloopKind::gemm) return std::nullopt;
  const Graph& g = gemm_spec.graph;
  const auto& nodes = g.nodes();
  const auto acc = std::find_if(nodes.begin(), nodes.end(), [](const Node& n) {
    return n.kind == NodeKind::accumulator && n.accumulator == 0;
  });
  if (acc == nodes.end()) return std::nullopt;
  const Uses uses = uses_of(g);

  // acc + bias, the bias a row-broadcast input.
  std::uint32_t add_index = 0, act_index = 0;
  const Node* add = only_user(g, uses, static_cast<std::uint32_t>(acc - nodes.begin()), &add_index);
  if (!add || add->op != OpKind::add) return std::nullopt;
  const Node& bias = g.node(g.node(add->args[0]).kind == NodeKind::accumulator ? add->args[1] : add->args[0]);
  if (bias.kind != NodeKind::input || bias.broadcast != Broadcast::row) return std::nullopt;

  // act(acc + bias)
  const Node* act = only_user(g, uses, add_index, &act_index);
  if (!act || (act->op != OpKind::relu && act->op != OpKind::gelu_tanh)) return std::nullopt;

  LtEpilogueMatch m;
  m.kind = act->op == OpKind::relu ? LtEpilogueKind::relu_bias : LtEpilogueKind::gelu_bias;
  m.bias = bias.name;
  m.bias_dtype = bias.dtype;
  std::size_t ops = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].kind != NodeKind::op) continue;
    ++ops;
    if (i == add_index || i == act_index) continue;
    const std::string name(op_info(nodes[i].op).name);
    if (std::find(m.not_covered.begin(), m.not_covered.end(), name) == m.not_covered.end())
      m.not_covered.push_back(name);
  }
  // Follow the activation through dropouts to the one output.
  std::uint32_t last = act_index, next = 0;
  std::size_t dropouts = 0;
  for (const Node* u = only_user(g, uses, last, &next); u && u->op == OpKind::dropout;
       u = only_user(g, uses, last, &next)) {
    last = next;
    ++dropouts;
  }
  m.output_is_activation =
      g.outputs().size() == 1 && g.outputs().front().value.id == last && ops == 2 + dropouts;
  return m;
}

std::optional<LtDgradMatch> match_lt_dgrad(const KernelSpec& gemm_spec) {
  if (gemm_spec.mainloop.kind != MainloopKind::gemm) return std::nullopt;
  const Graph& g = gemm_spec.graph;
  const auto is_op = [&](Value v, OpKind op) { return g.node(v).kind == NodeKind::op && g.node(v).op == op; };
  if (g.outputs().size() != 2) return std::nullopt;
  LtDgradMatch m;
  const Node* mul = nullptr;
  for (const Output& o : g.outputs()) {
    if (is_op(o.value, OpKind::col_sum)) {
      m.db = o.name;
    } else if (is_op(o.value, OpKind::mul)) {
      m.dz = o.name;
      mul = &g.node(o.value);
    }
  }
  if (m.db.empty() || !mul) return std::nullopt;
  const Output& db = *std::find_if(g.outputs().begin(), g.outputs().end(), [&](const Output& o) { return o.name == m.db; });
  const Output& dz = *std::find_if(g.outputs().begin(), g.outputs().end(), [&](const Output& o) { return o.name == m.dz; });
  if (g.node(db.value).args.at(0).id != dz.value.id) return std::nullopt;
  // acc · gelu_tanh_deriv(saved) or acc · relu_deriv(saved), either order.
  Value acc = mul->args.at(0), deriv = mul->args.at(1);
  if (g.node(acc).kind != NodeKind::accumulator) std::swap(acc, deriv);
  if (g.node(acc).kind != NodeKind::accumulator || g.node(acc).accumulator != 0 ||
      !(is_op(deriv, OpKind::gelu_tanh_deriv) || is_op(deriv, OpKind::relu_deriv)))
    return std::nullopt;
  m.kind = is_op(deriv, OpKind::relu_deriv) ? LtEpilogueKind::drelu_bgrad : LtEpilogueKind::dgelu_bgrad;
  const Node& saved = g.node(g.node(deriv).args.at(0));
  if (saved.kind != NodeKind::input || saved.broadcast != Broadcast::full) return std::nullopt;
  const auto ops = std::count_if(g.nodes().begin(), g.nodes().end(), [](const Node& n) { return n.kind == NodeKind::op; });
  if (ops != 3) return std::nullopt;
  m.saved = saved.name;
  return m;
}

}  // namespace epifuse
