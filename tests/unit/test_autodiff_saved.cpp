// grad(spec): the state the forward saves for the backward (saved_state.cpp,
// docs/autodiff.md): GEMM pre-activations and minimum cuts, per-row statistics,
// a ReLU's derivative read from an output, a softmax's result saved or recomputed.
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
