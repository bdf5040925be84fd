// grad(spec): the backward spec it builds, checked against central
// differences of the forward in double (gradient_check), the state it saves,
// dropout masks regenerated, and its errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>

#include "epifuse/autodiff.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/gradient_check.hpp"
#include <nlohmann/json.hpp>

#include "epifuse/json.hpp"
#include "epifuse/reference.hpp"
#include "ir/op_table.hpp"

using namespace epifuse;

namespace {

constexpr double k_bar = 1e-6;  // norm-wise relative error, in double

// `nonzero`: every gradient must have a non-zero element (one all zero would check nothing).
void check_gradients(const KernelSpec& spec, const Shape& shape, const GradCheckOptions& options = {},
                     bool nonzero = true) {
  const GradCheckReport rep = gradient_check(spec, shape, options);
  REQUIRE(!rep.entries.empty());
  for (const auto& e : rep.entries) {
    CAPTURE(e.wrt);
    CAPTURE(e.max_abs_error);
    CAPTURE(e.max_abs_numeric);
    if (nonzero) CHECK(e.max_abs_numeric > 0);
    CHECK((e.max_abs_numeric == 0 ? e.max_abs_error == 0 : e.relative_error() <= k_bar));
  }
}

// x (full f32), y (full f32), r ([N]), c ([M]) and the op under test.
KernelSpec one_op(const std::function<Value(Graph&, Value x, Value y, Value r, Value c)>& body) {
  KernelSpec s;
  Graph& g = s.graph;
  const Value x = g.input("x", DType::f32), y = g.input("y", DType::f32);
  const Value r = g.input("r", DType::f32, Broadcast::row), c = g.input("c", DType::f32, Broadcast::col);
  // Every input reaches the output, so each has a gradient to check.
  const Value v = body(g, x, y, r, c);
  g.output("out", g.add(g.add(v, g.mul(y, r)), g.mul(x, c)), DType::f32);
  return s;
}

Value positive(Graph& g, Value v) { return g.add_scalar(g.mul(v, v), 0.5); }

}  // namespace

TEST_CASE("every op's derivative rule agrees with central differences in double") {
  using Body = std::function<Value(Graph&, Value, Value, Value, Value)>;
  const Shape shape{3, 5, 0};
  std::map<OpKind, std::vector<Body>> cases;
  auto bin = [&](OpKind op) {
    cases[op] = {[op](Graph& g, Value x, Value y, Value, Value) { return g.binary(op, x, y); },
                 [op](Graph& g, Value x, Value, Value r, Value) { return g.binary(op, x, r); },
                 [op](Graph& g, Value x, Value, Value, Value c) { return g.binary(op, c, x); }};
  };
  for (OpKind op : {OpKind::add, OpKind::sub, OpKind::mul, OpKind::max, OpKind::min}) bin(op);
  cases[OpKind::div] = {[](Graph& g, Value x, Value y, Value, Value) { return g.div(x, positive(g, y)); },
                        [](Graph& g, Value x, Value, Value r, Value) { return g.div(r, positive(g, x)); }};
  cases[OpKind::scale] = {[](Graph& g, Value x, Value, Value, Value) { return g.scale(x, -1.75); }};
  cases[OpKind::add_scalar] = {[](Graph& g, Value x, Value, Value, Value) { return g.mul(g.add_scalar(x, 0.3), x); }};
  for (OpKind op : {OpKind::relu, OpKind::gelu_tanh, OpKind::gelu_erf, OpKind::sigmoid, OpKind::silu, OpKind::tanh,
                    OpKind::exp, OpKind::gelu_tanh_deriv, OpKind::gelu_erf_deriv, OpKind::sigmoid_deriv,
                    OpKind::silu_deriv, OpKind::tanh_deriv})
    cases[op] = {[op](Graph& g, Value x, Value, Value, Value) { return g.unary(op, x); },
                 [op](Graph& g, Value x, Value, Value r, Value) { return g.mul(g.unary(op, r), x); }};
  cases[OpKind::log] = {[](Graph& g, Value x, Value, Value, Value) { return g.log(positive(g, x)); }};
  cases[OpKind::rsqrt] = {[](Graph& g, Value x, Value, Value, Value) { return g.rsqrt(positive(g, x)); }};
  cases[OpKind::dropout] = {[](Graph& g, Value x, Value y, Value, Value) { return g.dropout(g.mul(x, y), 0.3); },
                            [](Graph& g, Value x, Value, Value, Value) {
                              return g.dropout(g.dropout(x, 0.5, RngMode::triton), 0.2, RngMode::philox4, 7);
                            }};
  cases[OpKind::cast] = {[](Graph& g, Value x, Value y, Value, Value) { return g.mul(g.cast(x, DType::bf16), y); }};
  cases[OpKind::row_max] = {[](Graph& g, Value x, Value y, Value, Value) { return g.mul(g.row_max(x), y); }};
  cases[OpKind::row_sum] = {[](Graph& g, Value x, Value y, Value, Value) { return g.mul(g.row_sum(g.mul(x, x)), y); }};
  cases[OpKind::row_mean] = {[](Graph& g, Value x, Value y, Value, Value) { return g.mul(g.row_mean(x), y); }};
  cases[OpKind::col_sum] = {[](Graph& g, Value x, Value y, Value, Value) { return g.mul(g.col_sum(g.mul(x, y)), x); }};
  cases[OpKind::expand] = {[](Graph& g, Value, Value, Value r, Value c) { return g.mul(g.expand(r), g.expand(c)); }};
  cases[OpKind::div_n] = {[](Graph& g, Value x, Value, Value, Value) { return g.mul(g.div_n(g.row_sum(x)), x); }};
  // Their derivative is 0: the gradient flows through the other operand only.
  cases[OpKind::step] = {[](Graph& g, Value x, Value y, Value, Value) { return g.mul(x, g.add(y, g.step(y))); }};
  cases[OpKind::relu_deriv] = {[](Graph& g, Value x, Value y, Value, Value) { return g.mul(x, g.add(y, g.relu_deriv(y))); }};

  for (const OpInfo& info : op_table()) {
    CAPTURE(info.name);
    REQUIRE_MESSAGE(cases.count(info.kind), "no gradient check for op " << info.name);
    for (const auto& body : cases[info.kind]) check_gradients(one_op(body), shape);
  }
}

TEST_CASE("composites: softmax, log_softmax, rmsnorm and layernorm, with rows of length 1, constant rows and -inf") {
  auto composite = [](int which) {
    KernelSpec s;
    Graph& g = s.graph;
    const Value x = g.input("x", DType::f32);
    const Value w = g.input("w", DType::f32, Broadcast::row), b = g.input("b", DType::f32, Broadcast::row);
    Value y;
    switch (which) {
      case 0: y = g.mul(g.softmax(x), g.add(w, b)); break;
      case 1: y = g.mul(g.log_softmax(x), g.add(w, b)); break;
      case 2: y = g.add(g.rmsnorm(x, w, 1e-5), b); break;
      default: y = g.layernorm(x, w, b, 1e-5); break;
    }
    g.output("y", y, DType::f32);
    return s;
  };
  for (int which = 0; which < 4; ++which) {
    CAPTURE(which);
    check_gradients(composite(which), {4, 7, 0});
    // Rows of length 1: softmax is 1, log_softmax 0 and a norm's centred x 0
    // there, so most of these gradients are exactly 0, and must be.
    check_gradients(composite(which), {3, 1, 0}, {}, false);
    GradCheckOptions constant;
    constant.given["x"] = std::vector<double>(12, 0.75);
    if (which < 2) check_gradients(composite(which), {3, 4, 0}, constant);  // a norm of a constant row is flat in x
  }
  // -inf entries in softmax rows: their gradient is a number (0), the others'
  // as without them. (log_softmax is -inf there: no finite loss to difference.)
  GradCheckOptions masked;
  masked.given["x"] = {0.5, -std::numeric_limits<double>::infinity(), 1.25, -0.5, -std::numeric_limits<double>::infinity(),
                       0.75, 0.25, -1.0, 2.0, -std::numeric_limits<double>::infinity(), 0.1, 0.2};
  check_gradients(composite(0), {3, 4, 0}, masked);
}

TEST_CASE("a centered row sums to zero: layernorm's backward takes the two row sums it needs") {
  // Note [Centered rows sum to zero]: the chain rule through the mean reaches
  // row_sum(x - row_mean(x)) times the variance's gradient; grad leaves it out.
  auto row_reductions = [](const Graph& g) {
    return std::count_if(g.nodes().begin(), g.nodes().end(),
                         [](const Node& n) { return n.kind == NodeKind::op && is_row_reduction(n.op); });
  };
  KernelSpec ln;
  {
    Graph& g = ln.graph;
    const Value x = g.input("x", DType::f32);
    g.output("y", g.layernorm(x, g.input("w", DType::f32, Broadcast::row), g.input("b", DType::f32, Broadcast::row),
                              1e-5),
             DType::f32);
  }
  const GradResult r = grad(ln);
  CHECK(row_reductions(r.backward.graph) == 2);  // row sums of dy w and of dy w x̂
  check_gradients(ln, {5, 9, 0});
  // Centering written out by hand, with a second use of the centered row: a
  // per-row scale k of it, whose gradient row_sum(dy xc) is no centered sum
  // (dy varies along the row) and must stay.
  KernelSpec hand;
  {
    Graph& g = hand.graph;
    const Value x = g.input("x", DType::f32), k = g.input("k", DType::f32, Broadcast::col);
    const Value xc = g.sub(x, g.row_mean(x));
    const Value var = g.row_mean(g.mul(xc, xc));
    g.output("y", g.add(g.mul(xc, g.rsqrt(g.add_scalar(var, 1e-3))), g.mul(k, xc)), DType::f32);
  }
  check_gradients(hand, {4, 6, 0});
  const GradResult h = grad(hand);
  CHECK(std::find(h.wrt.begin(), h.wrt.end(), "k") != h.wrt.end());
}

TEST_CASE("every example chain's gradients agree with central differences") {
  const auto dir = std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples" / "chains";
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    CAPTURE(entry.path().filename().string());
    const KernelSpec spec = load_spec(entry.path());
    check_gradients(spec, {4, 6, 5});
    ++checked;
  }
  CHECK(checked >= 14);
}

TEST_CASE("what the forward saves: GEMM pre-activations, per-row statistics, nothing an input gives again") {
  const auto dir = std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples" / "chains";
  // bias + GELU + dropout + residual on an input: recomputed from x and bias.
  const GradResult ew = grad(load_spec(dir / "bias_gelu_dropout_add.json"));
  CHECK(ew.saved.empty());
  CHECK(ew.forward.graph.outputs().size() == load_spec(dir / "bias_gelu_dropout_add.json").graph.outputs().size());
  // On a GEMM accumulator: the pre-activation, in the output's dtype.
  KernelSpec gemm;
  gemm.mainloop.kind = MainloopKind::gemm;
  {
    Graph& g = gemm.graph;
    const Value acc = g.accumulator(0);
    const Value z = g.add(acc, g.input("bias", DType::f16, Broadcast::row));
    g.output("y", g.dropout(g.gelu_tanh(z), 0.1), DType::f16);
  }
  const GradResult gr = grad(gemm);
  REQUIRE(gr.saved.size() == 1);
  CHECK(gr.saved[0].kind == "pre-activation");
  const Output& aux = gr.forward.graph.outputs().back();
  CHECK(aux.name == gr.saved[0].name);
  CHECK(aux.dtype == gemm.graph.outputs().front().dtype);
  CHECK(gr.wrt.front() == "acc");
  // Softmax: its output, read back (y (dy - row_sum(dy y))): nothing extra is written.
  const KernelSpec softmax = load_spec(dir / "softmax.json");
  const GradResult sm = grad(softmax);
  REQUIRE(sm.saved.size() == 1);
  CHECK(sm.saved[0].kind == "output");
  CHECK(sm.saved[0].name == softmax.graph.outputs().front().name);
  CHECK(sm.forward.graph.outputs().size() == softmax.graph.outputs().size());
  // A norm: its mean and variance, [M] in f32.
  const GradResult ln = grad(load_spec(dir / "layernorm.json"));
  REQUIRE(ln.saved.size() == 2);
  for (const auto& s : ln.saved) {
    CHECK(s.kind == "row statistic");
    const Output& o = *std::find_if(ln.forward.graph.outputs().begin(), ln.forward.graph.outputs().end(),
                                    [&](const Output& x) { return x.name == s.name; });
    CHECK(o.dtype == DType::f32);
    CHECK(ln.forward.graph.node(o.value).broadcast == Broadcast::col);
  }
  // The backward is an ordinary spec: it round-trips through JSON.
  CHECK(signature(spec_from_json(spec_to_json(gr.backward))) == signature(gr.backward));
}

namespace {

std::vector<std::string> saved_names(const GradResult& r) {
  std::vector<std::string> names;
  for (const auto& s : r.saved) names.push_back(s.name);
  std::sort(names.begin(), names.end());
  return names;
}

// A GEMM chain on acc with an f16 [N] bias and one f16 output y.
KernelSpec gemm_chain(const std::function<Value(Graph&, Value acc, Value bias)>& body) {
  KernelSpec s;
  s.mainloop.kind = MainloopKind::gemm;
  Graph& g = s.graph;
  const Value acc = g.accumulator(0), bias = g.input("bias", DType::f16, Broadcast::row);
  g.output("y", body(g, acc, bias), DType::f16);
  return s;
}

// Whether the backward recomputes `op` on the input `saved`.
bool recomputes(const GradResult& r, OpKind op, const std::string& saved) {
  const Graph& b = r.backward.graph;
  return std::any_of(b.nodes().begin(), b.nodes().end(), [&](const Node& n) {
    return n.kind == NodeKind::op && n.op == op && b.node(n.args[0]).name == saved;
  });
}

}  // namespace

TEST_CASE("GEMM chains save a minimum cut between the accumulators and the values the rules read") {
  const auto dir = std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples" / "chains";
  const Shape shape{4, 6, 5};
  // SwiGLU and GEGLU: the rules read act(acc0), acc1 and acc0; the activation
  // is recomputed from the saved acc0.
  for (const auto& [file, act] : {std::pair{"swiglu.json", OpKind::silu}, std::pair{"geglu.json", OpKind::gelu_tanh}}) {
    CAPTURE(file);
    const KernelSpec spec = load_spec(dir / file);
    const GradResult r = grad(spec);
    CHECK(saved_names(r) == std::vector<std::string>{"saved_acc0", "saved_acc1"});
    for (const auto& s : r.saved) CHECK(s.kind == "pre-activation");
    CHECK(r.forward.graph.outputs().size() == spec.graph.outputs().size() + 2);
    CHECK(recomputes(r, act, "saved_acc0"));
    check_gradients(spec, shape);
    // Differentiated for acc1 only, the rule reads act(acc0) alone: saving it
    // or acc0 costs one tensor each, and the value read is kept.
    const GradResult only1 = grad(spec, {{"acc1"}});
    REQUIRE(only1.saved.size() == 1);
    CHECK(only1.saved[0].of == spec.graph.node(spec.graph.node(spec.graph.outputs()[0].value).args[0]).name);
  }
  // Gating, sigmoid(acc0 + bias1) * (acc1 + bias2): h1 and h2, the values read
  // (acc0 and acc1 would do as well); the gate is sigmoid(saved h1) again.
  const GradResult gating = grad(load_spec(dir / "gating.json"));
  CHECK(saved_names(gating) == std::vector<std::string>{"saved_h1", "saved_h2"});
  CHECK(recomputes(gating, OpKind::sigmoid, "saved_h1"));
  // bias + activation: acc + bias, the value the rule reads (cuBLASLt's aux), not acc.
  const KernelSpec bias_gelu = gemm_chain([](Graph& g, Value acc, Value bias) {
    const Value z = g.add(acc, bias);
    g.set_name(z, "z");
    return g.gelu_tanh(z);
  });
  CHECK(saved_names(grad(bias_gelu)) == std::vector<std::string>{"saved_z"});
  check_gradients(bias_gelu, shape);
  // An [M,N] output the rule reads is read back: nothing is saved.
  const KernelSpec tf32 = load_spec(dir / "gemm_tf32_bias_gelu.json");
  const GradResult rt = grad(tf32);
  REQUIRE(rt.saved.size() == 1);
  CHECK(rt.saved[0].kind == "output");
  CHECK(rt.forward.graph.outputs().size() == tf32.graph.outputs().size());
  // A dropout the rules read is regenerated, never saved: h = acc + bias
  // gives dropout(h) and sigmoid(h) again.
  const KernelSpec dropped = gemm_chain([](Graph& g, Value acc, Value bias) {
    const Value h = g.add(acc, bias);
    g.set_name(h, "h");
    return g.mul(g.dropout(h, 0.25), g.sigmoid(h));
  });
  const GradResult rd = grad(dropped);
  CHECK(saved_names(rd) == std::vector<std::string>{"saved_h"});
  CHECK(recomputes(rd, OpKind::dropout, "saved_h"));
  check_gradients(dropped, shape);
  // A norm of acc + bias: the centred value ([M,N]) and its rsqrt ([M]), read
  // by the rules; the normalised value is their product again.
  const KernelSpec norm = gemm_chain([](Graph& g, Value acc, Value bias) {
    return g.layernorm(g.add(acc, bias), bias, bias, 1e-5);
  });
  const GradResult rn = grad(norm);
  REQUIRE(rn.saved.size() == 2);
  int full = 0;
  for (const auto& s : rn.saved) {
    const auto& outs = rn.forward.graph.outputs();
    const Output& o = *std::find_if(outs.begin(), outs.end(), [&](const Output& x) { return x.name == s.name; });
    full += rn.forward.graph.node(o.value).broadcast == Broadcast::full;
  }
  CHECK(full == 1);
  check_gradients(norm, shape);
  // The same chain gives the same specs.
  const GradResult again = grad(load_spec(dir / "gating.json"));
  CHECK(signature(again.backward) == signature(gating.backward));
  CHECK(signature(again.forward) == signature(gating.forward));
}

TEST_CASE("the backward regenerates the forward's dropout masks position by position") {
  const auto dir = std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples" / "chains";
  const KernelSpec spec = load_spec(dir / "scaled_masked_softmax_dropout.json");
  const GradResult r = grad(spec);
  // The dropout streams of the backward are the forward's.
  std::vector<int> fwd, bwd;
  for (const Node& n : spec.graph.nodes())
    if (n.kind == NodeKind::op && n.op == OpKind::dropout) fwd.push_back(n.stream);
  for (const Node& n : r.backward.graph.nodes())
    if (n.kind == NodeKind::op && n.op == OpKind::dropout) bwd.push_back(n.stream);
  CHECK(!bwd.empty());
  CHECK(bwd == fwd);
  // bias + GELU + dropout + residual: dx = dropout(dy) * gelu'(h) is 0
  // exactly where the forward dropped an element (gelu' is not 0 on these data).
  const KernelSpec bgda = load_spec(dir / "bias_gelu_dropout_add.json");
  const GradResult rb = grad(bgda);
  const Shape shape{16, 64, 0};
  const LaunchArgs args{1234, 56};
  TensorMap in = make_inputs(bgda, shape, 3);
  // The forward without the residual shows the mask: y - residual is 0 where dropped.
  const TensorMap y = evaluate(bgda, shape, in, args);
  TensorMap back_in;
  for (Value v : rb.backward.graph.inputs()) {
    const std::string& name = rb.backward.graph.node(v).name;
    back_in[name] = name[0] == 'd' && !in.count(name) ? random_tensor(rb.backward.graph.node(v).dtype, {shape.m, shape.n}, 9)
                                                       : in.at(name);
  }
  const TensorMap dx = evaluate(rb.backward, shape, back_in, args);
  int dropped = 0;
  const std::string out = bgda.graph.outputs().front().name, res = "residual";
  REQUIRE(in.count(res));
  for (std::int64_t i = 0; i < shape.m * shape.n; ++i) {
    const bool fwd_dropped = y.at(out).get(i) == in.at(res).get(i);
    CHECK((dx.at("dx").get(i) == 0.0f) == fwd_dropped);
    dropped += fwd_dropped;
  }
  CHECK(dropped > 0);
  CHECK(dropped < shape.m * shape.n / 2);
}

TEST_CASE("grad refuses what it cannot differentiate, with the reason") {
  const auto dir = std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples" / "chains";
  const KernelSpec masked = load_spec(dir / "scaled_masked_softmax_dropout.json");
  CHECK_THROWS_WITH_AS(grad(masked, {{"mask"}}), doctest::Contains("input 'mask' is marked not differentiable"),
                       UserError);
  CHECK_THROWS_WITH_AS(grad(masked, {{"seed"}}), doctest::Contains("is the dropout RNG's seed, not an input"), UserError);
  CHECK_THROWS_WITH_AS(grad(masked, {{"nope"}}), doctest::Contains("'nope' is not an input of the chain (inputs: x, mask)"),
                       UserError);
  CHECK_THROWS_WITH_AS(grad(masked, {{"x", "x"}}), doctest::Contains("named twice"), UserError);
  const KernelSpec gemm = load_spec(dir / "gemm_bias_relu.json");
  CHECK_THROWS_WITH_AS(grad(gemm, {{"a"}}), doctest::Contains("is a GEMM operand"), UserError);
  // Zero everywhere: through step only, or reaching no output.
  KernelSpec s;
  const Value x = s.graph.input("x", DType::f32), z = s.graph.input("z", DType::f32);
  s.graph.output("y", s.graph.mul(x, s.graph.step(z)), DType::f32);
  CHECK_THROWS_WITH_AS(grad(s, {{"z"}}), doctest::Contains("only through step or relu_deriv"), UserError);
  CHECK_NOTHROW(grad(s, {{"x"}}));
  // A gradient name taken by an input.
  KernelSpec t;
  const Value a = t.graph.input("a", DType::f32), da = t.graph.input("da", DType::f32);
  t.graph.output("y", t.graph.mul(a, da), DType::f32);
  CHECK_THROWS_WITH_AS(grad(t), doctest::Contains("would be named 'da', which the chain already uses"), UserError);
}

TEST_CASE("a ReLU reads its derivative from an output of the same sign, and saves nothing for it") {
  const auto dir = std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples" / "chains";
  const Shape shape{4, 6, 5};
  // relu(acc + bias), and the same through a dropout: the output y is read back.
  for (const char* file : {"gemm_bias_relu.json", "gemm_bias_relu_dropout.json"}) {
    CAPTURE(file);
    const KernelSpec spec = load_spec(dir / file);
    const GradResult r = grad(spec);
    REQUIRE(r.saved.size() == 1);
    CHECK(r.saved[0].kind == "output");
    CHECK(r.saved[0].name == "y");
    CHECK(r.forward.graph.outputs().size() == spec.graph.outputs().size());
    CHECK(recomputes(r, OpKind::relu_deriv, "y"));
    check_gradients(spec, shape);
  }
  // Through ops that keep the sign: a positive scale, a cast, two dropouts.
  const KernelSpec kept = gemm_chain([](Graph& g, Value acc, Value bias) {
    const Value r = g.relu(g.add(acc, bias));
    return g.dropout(g.cast(g.scale(g.dropout(r, 0.25), 3.0), DType::bf16), 0.5);
  });
  const GradResult rk = grad(kept);
  REQUIRE(rk.saved.size() == 1);
  CHECK(rk.saved[0].kind == "output");
  check_gradients(kept, shape);
  // Where no output carries the sign, the pre-activation is saved as before:
  // a negative scale, a residual added, a second user of the ReLU.
  const KernelSpec negative = gemm_chain([](Graph& g, Value acc, Value bias) {
    const Value z = g.add(acc, bias);
    g.set_name(z, "z");
    return g.scale(g.relu(z), -2.0);
  });
  const KernelSpec residual = gemm_chain([](Graph& g, Value acc, Value bias) {
    const Value z = g.add(acc, bias);
    g.set_name(z, "z");
    return g.add(g.dropout(g.relu(z), 0.1), bias);
  });
  const KernelSpec twice = gemm_chain([](Graph& g, Value acc, Value bias) {
    const Value z = g.add(acc, bias);
    g.set_name(z, "z");
    const Value r = g.relu(z);
    return g.mul(g.dropout(r, 0.1), g.sigmoid(r));
  });
  for (const KernelSpec* spec : {&negative, &residual}) {
    const GradResult r = grad(*spec);
    CHECK(saved_names(r) == std::vector<std::string>{"saved_z"});
    CHECK(r.saved[0].kind == "pre-activation");
    check_gradients(*spec, shape);
  }
  const GradResult rt = grad(twice);
  REQUIRE(rt.saved.size() == 1);
  CHECK(rt.saved[0].kind == "pre-activation");
  check_gradients(twice, shape);
  // Where the backward reads the operand anyway, reading the output too would
  // move one more tensor: relu(z) and gelu(z) as two outputs save z (gelu's
  // rule reads it) and the ReLU reads z as well, not the first output.
  KernelSpec two = gemm_chain([](Graph& g, Value acc, Value bias) {
    const Value z = g.add(acc, bias);
    g.set_name(z, "z");
    return g.relu(z);
  });
  two.graph.output("g", two.graph.gelu_tanh(two.graph.find("z")), DType::f16);
  const GradResult r2 = grad(two);
  CHECK(saved_names(r2) == std::vector<std::string>{"saved_z"});
  CHECK_FALSE(r2.backward.graph.find("y").valid());
  check_gradients(two, shape);
  // The same without an accumulator: sigmoid(x) reads x, so relu(x) does too.
  KernelSpec ew;
  {
    Graph& g = ew.graph;
    const Value x = g.input("x", DType::f32);
    g.output("r", g.relu(x), DType::f32);
    g.output("s", g.sigmoid(x), DType::f32);
  }
  const GradResult re = grad(ew);
  CHECK(re.backward.graph.find("x").valid());
  CHECK_FALSE(re.backward.graph.find("r").valid());
  check_gradients(ew, shape);
  // A ReLU that is an output itself and also feeds another one: read back.
  KernelSpec both = gemm_chain([](Graph& g, Value acc, Value bias) { return g.relu(g.add(acc, bias)); });
  both.graph.output("y2", both.graph.scale(both.graph.outputs()[0].value, -1.0), DType::f16);
  const GradResult rb = grad(both);
  REQUIRE(rb.saved.size() == 1);
  CHECK(rb.saved[0].kind == "output");
  check_gradients(both, shape);
}

TEST_CASE("a ReLU's gradient read from the dropout's output equals the one read from its operand, NaN and inf too") {
  // The backward of relu then dropout on the CPU reference, on data with
  // dropped infinities, NaN and zeros: the same bits as the rule that reads z.
  KernelSpec spec;
  Graph& g = spec.graph;
  g.output("y", g.dropout(g.relu(g.input("x", DType::f32)), 0.5), DType::f32);
  const GradResult r = grad(spec);
  REQUIRE(r.saved.size() == 1);
  CHECK(r.saved[0].name == "y");
  KernelSpec old;
  {
    Graph& b = old.graph;
    const Value dy = b.input("dy", DType::f32), xo = b.input("x", DType::f32);
    b.output("dx", b.mul(b.dropout(dy, 0.5), b.relu_deriv(xo)), DType::f32);
  }
  const Shape shape{8, 16, 0};
  const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 1e-30f};
  HostTensor x = HostTensor::zeros(DType::f32, {shape.m, shape.n}), dy = x;
  for (std::int64_t i = 0; i < shape.m * shape.n; ++i) {
    x.set(i, specials[i % 8]);
    dy.set(i, specials[(i / 8 + i) % 8]);
  }
  const LaunchArgs args{1234, 56};
  const TensorMap y = evaluate(spec, shape, {{"x", x}}, args);
  const TensorMap got = evaluate(r.backward, shape, {{"dy", dy}, {"y", y.at("y")}}, args);
  const TensorMap want = evaluate(old, shape, {{"dy", dy}, {"x", x}}, args);
  REQUIRE(got.at("dx").bytes.size() == want.at("dx").bytes.size());
  int dropped = 0;
  for (std::int64_t i = 0; i < shape.m * shape.n; ++i) {
    CAPTURE(i);
    CHECK(std::memcmp(&got.at("dx").bytes[4 * i], &want.at("dx").bytes[4 * i], 4) == 0);
    dropped += y.at("y").get(i) == 0.0f && x.get(i) > 0.0f;
  }
  CHECK(dropped > 0);  // the data reach the case the note argues: a positive x dropped
}

namespace {

std::vector<std::string> input_names(const Graph& g) {
  std::vector<std::string> names;
  for (Value v : g.inputs()) names.push_back(g.node(v).name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("a softmax result no output stores is saved where recomputing it reads as many bytes") {
  const auto dir = std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples" / "chains";
  // Attention's softmax then dropout, with a full mask: the result written and
  // read once against x and the mask read again; the tie goes to the result.
  const KernelSpec attention = load_spec(dir / "scaled_masked_softmax_dropout.json");
  const GradResult ra = grad(attention);
  REQUIRE(ra.saved.size() == 1);
  CHECK(ra.saved[0].name == "saved_softmax");
  CHECK(ra.saved[0].kind == "softmax result");
  CHECK(ra.saved[0].of.starts_with("softmax#"));  // the composite, not its last op (a div)
  CHECK(input_names(ra.backward.graph) == std::vector<std::string>{"dy", "saved_softmax"});
  const Output& p = ra.forward.graph.outputs().back();
  CHECK(p.name == "saved_softmax");
  CHECK(p.dtype == attention.graph.outputs().front().dtype);
  CHECK(ra.forward.graph.outputs().size() == 2);  // y and the result: no row statistics
  check_gradients(attention, Shape{4, 6, 0});
  // In f32 the same bytes go to recomputing: the row max and sum are saved.
  KernelSpec attention32;
  {
    Graph& g = attention32.graph;
    const Value m = g.input("mask", DType::f32);
    g.set_differentiable(m, false);
    const Value z = g.add(g.scale(g.input("x", DType::f32), 0.125), m);
    g.output("y", g.dropout(g.softmax(z), 0.1), DType::f32);
  }
  const GradResult r32 = grad(attention32);
  REQUIRE(r32.saved.size() == 2);
  for (const auto& s : r32.saved) CHECK(s.kind == "row statistic");
  CHECK(input_names(r32.backward.graph) ==
        std::vector<std::string>{"dy", "mask", "saved_row_max", "saved_row_sum", "x"});
  check_gradients(attention32, Shape{4, 6, 0});

  // A row mask, or none: recomputing reads x alone, so the row max and sum are saved.
  for (const bool row_mask : {true, false}) {
    CAPTURE(row_mask);
    KernelSpec spec;
    Graph& g = spec.graph;
    Value z = g.input("x", DType::bf16);
    if (row_mask) {
      const Value m = g.input("mask", DType::f32, Broadcast::row);
      g.set_differentiable(m, false);
      z = g.add(z, m);
    }
    g.output("y", g.dropout(g.softmax(z), 0.2), DType::bf16);  // 16-bit: a tie would save the result
    const GradResult r = grad(spec);
    REQUIRE(r.saved.size() == 2);
    for (const auto& s : r.saved) CHECK(s.kind == "row statistic");
    CHECK(std::find(input_names(r.backward.graph).begin(), input_names(r.backward.graph).end(), "x") !=
          input_names(r.backward.graph).end());
    check_gradients(spec, Shape{4, 6, 0});
  }

  // log_softmax the same way: of x plus a full mask, then scaled to a bf16 output, its result is saved.
  KernelSpec ls;
  {
    Graph& g = ls.graph;
    const Value m = g.input("mask", DType::f32);
    g.set_differentiable(m, false);
    g.output("y", g.scale(g.log_softmax(g.add(g.input("x", DType::f32), m)), 2.0), DType::bf16);
  }
  const GradResult rl = grad(ls);
  CHECK(saved_names(rl) == std::vector<std::string>{"saved_log_softmax"});
  check_gradients(ls, Shape{4, 6, 0});

  // The saved result gives the recomputing backward's gradient (the examples'
  // hand-written pair, which reads x, the mask and the row statistics again),
  // within the bf16 rounding of the saved result; the forwards agree bit for bit.
  const auto bwd_dir = std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples" / "backward";
  const KernelSpec stats_fwd = load_spec(bwd_dir / "scaled_masked_softmax_dropout_forward_stats.json");
  const KernelSpec stats_bwd = load_spec(bwd_dir / "scaled_masked_softmax_dropout_backward.json");
  const Shape shape{16, 64, 0};
  const TensorMap ins = make_inputs(attention, shape, 7);
  const LaunchArgs args{99, 3};
  const TensorMap fwd = evaluate(ra.forward, shape, ins, args), old_fwd = evaluate(stats_fwd, shape, ins, args);
  REQUIRE(fwd.at("y").bytes == old_fwd.at("y").bytes);
  HostTensor dy = HostTensor::zeros(DType::bf16, {shape.m, shape.n});
  for (std::int64_t i = 0; i < shape.m * shape.n; ++i) dy.set(i, std::sin(0.37 * static_cast<double>(i)));
  const TensorMap got = evaluate(ra.backward, shape, {{"dy", dy}, {"saved_softmax", fwd.at("saved_softmax")}}, args);
  const TensorMap want = evaluate(stats_bwd, shape,
                                  {{"dy", dy}, {"x", ins.at("x")}, {"mask", ins.at("mask")},
                                   {"rmax", old_fwd.at("rmax")}, {"rsum", old_fwd.at("rsum")}},
                                  args);
  double worst = 0, scale = 0;
  for (std::int64_t i = 0; i < shape.m * shape.n; ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got.at("dx").get(i)) - want.at("dx").get(i)));
    scale = std::max(scale, std::abs(static_cast<double>(want.at("dx").get(i))));
  }
  CHECK(scale > 0);
  CHECK(worst <= scale / 64);  // p rounded to bf16 (2^-9) and dx's own rounding, through the row sum
}

TEST_CASE("row_max's gradient reaches every row when the backward rounds the row below the forward's saved max") {
  // A backward that recomputes the row (another kernel, a fast function the
  // forward's output dtype allowed, the CPU against a GPU) may land a rounding
  // under the max the forward saved. The rule takes the max again over the row
  // it has, so no row is left without a maximum (0/0: NaN in every element).
  KernelSpec spec;
  {
    Graph& g = spec.graph;
    const Value v = g.tanh(g.input("x", DType::f32));
    g.output("y", g.mul(v, g.row_max(v)), DType::f32);  // mul's rule reads the saved max
  }
  const GradResult r = grad(spec);
  const auto saved = std::find_if(r.saved.begin(), r.saved.end(), [](const SavedTensor& s) { return s.kind == "row statistic"; });
  REQUIRE(saved != r.saved.end());
  const Shape shape{6, 9, 0};
  const TensorMap fin = make_inputs(r.forward, shape, 77);
  const TensorMap fout = evaluate(r.forward, shape, fin, {});
  HostTensor above = fout.at(saved->name);  // the forward's max, a rounding higher
  for (std::int64_t i = 0; i < above.numel(); ++i)
    above.set(i, std::nextafter(above.get(i), std::numeric_limits<float>::infinity()));
  auto backward = [&](const HostTensor& max) {
    TensorMap given = {{"x", fin.at("x")}, {saved->name, max}};
    return evaluate(r.backward, shape, make_inputs(r.backward, shape, 78, given), {}).at("dx");
  };
  const HostTensor exact = backward(fout.at(saved->name)), lifted = backward(above);
  for (std::int64_t i = 0; i < exact.numel(); ++i) {
    CAPTURE(i);
    REQUIRE(std::isfinite(lifted.get(i)));
    CHECK(lifted.get(i) == doctest::Approx(exact.get(i)).epsilon(1e-5));
  }
  check_gradients(spec, {5, 7, 0});
}
