// grad(spec): the backward spec it builds, checked against central
// differences of the forward in double (gradient_check), dropout masks
// regenerated, and its errors. What the forward saves: test_autodiff_saved.cpp.
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
#include "autodiff_checks.hpp"

using namespace epifuse;
using namespace epifuse::testing;


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
