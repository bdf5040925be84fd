// IR builder validation, canonical printer and signature.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "epifuse/errors.hpp"
#include "epifuse/spec.hpp"
#include "ir/limits.hpp"

using namespace epifuse;

namespace {
KernelSpec bias_gelu(std::string x, std::string bias, double p = 0.1) {
  KernelSpec s;
  Value vx = s.graph.input(x, DType::f32);
  Value vb = s.graph.input(bias, DType::f32, Broadcast::row);
  Value z = s.graph.add(vx, vb);
  Value d = s.graph.dropout(s.graph.gelu_tanh(z), p);
  s.graph.output("y", d, DType::f32);
  return s;
}
}  // namespace

TEST_CASE("signature ignores names but not structure, dtypes or attributes") {
  auto a = bias_gelu("x", "bias");
  auto b = bias_gelu("input", "b");
  CHECK(signature(a) == signature(b));
  CHECK(print(a) != print(b));
  CHECK(signature(a) != signature(bias_gelu("x", "bias", 0.2)));

  KernelSpec c = bias_gelu("x", "bias");
  c.graph.output("pre", c.graph.find("x"), DType::bf16);
  CHECK(signature(a) != signature(c));
}

TEST_CASE("builder validates operands where they are made") {
  Graph g;
  Value x = g.input("x", DType::f32);
  CHECK_THROWS_AS(g.input("x", DType::f16), UserError);
  CHECK_THROWS_AS(g.input("9bad", DType::f16), UserError);
  CHECK_THROWS_AS(g.dropout(x, 1.5), UserError);
  CHECK_THROWS_AS(g.dropout(x, -0.1), UserError);
  CHECK_THROWS_AS(g.relu(Value{42}), UserError);
  Value b = g.input("b", DType::f32, Broadcast::row);
  CHECK(g.node(g.add(x, b)).broadcast == Broadcast::full);
  Value c = g.input("c", DType::f32, Broadcast::col);
  CHECK(g.node(g.mul(b, c)).broadcast == Broadcast::full);
  Value s = g.input("s", DType::f32, Broadcast::scalar);
  CHECK_THROWS_WITH_AS(g.output("y", g.relu(s), DType::f32),
                       doctest::Contains("is a scalar value; outputs are full [M,N], row [N]"), UserError);
  // [N] and [M] outputs: a column sum and a row reduction.
  g.output("db", g.col_sum(x), DType::f32);
  g.output("m", g.row_max(x), DType::f32);
  CHECK(g.node(g.outputs()[0].value).broadcast == Broadcast::row);
  CHECK(g.node(g.outputs()[1].value).broadcast == Broadcast::col);
  CHECK_THROWS_WITH_AS(g.col_sum(b), doctest::Contains("col_sum reduces a full [M,N] value"), UserError);
}

TEST_CASE("explicit dropout streams: kept, checked, and the next default follows the largest") {
  Graph g;
  Value x = g.input("x", DType::f32);
  CHECK(g.node(g.dropout(x, 0.1, RngMode::philox4, 5)).stream == 5);
  CHECK(g.node(g.dropout(x, 0.1)).stream == 6);
  CHECK(g.node(g.dropout(x, 0.1, RngMode::philox4, 2)).stream == 2);
  CHECK(g.node(g.dropout(x, 0.1)).stream == 7);
  CHECK_THROWS_WITH_AS(g.dropout(x, 0.1, RngMode::philox4, 256), doctest::Contains("stream must be in [0, 256)"),
                       UserError);
  CHECK_THROWS_WITH_AS(g.dropout(x, 0.1, RngMode::philox4, -1), doctest::Contains("stream must be in [0, 256)"),
                       UserError);
  // copy_op keeps the stream.
  Graph h;
  Value y = h.input("x", DType::f32);
  const Value args[] = {y};
  CHECK(h.node(h.copy_op(g.node(Value{1}), args)).stream == 5);
}

TEST_CASE("dropout streams count dropout nodes in build order") {
  Graph g;
  Value x = g.input("x", DType::f32);
  Value d0 = g.dropout(x, 0.1);
  Value d1 = g.dropout(g.relu(d0), 0.2, RngMode::triton);
  CHECK(g.node(d0).stream == 0);
  CHECK(g.node(d1).stream == 1);
  CHECK(g.dropout_count() == 2);
}

TEST_CASE("signature_bytes are equal exactly when signatures are") {
  const KernelSpec specs[] = {bias_gelu("x", "bias"), bias_gelu("input", "b"), bias_gelu("x", "bias", 0.2),
                              bias_gelu("x", "bias", 0.1000000001)};
  for (const auto& a : specs)
    for (const auto& b : specs) CHECK((signature(a) == signature(b)) == (signature_bytes(a) == signature_bytes(b)));
  KernelSpec c = bias_gelu("x", "bias");
  c.precision = Precision::fast;
  CHECK(signature_bytes(c) != signature_bytes(specs[0]));
  KernelSpec d = bias_gelu("x", "bias");
  d.graph.output("pre", d.graph.find("x"), DType::bf16);
  CHECK(signature_bytes(d) != signature_bytes(specs[0]));
}

// --- limits (src/ir/limits.hpp, docs/limits.md): at the limit, and one past ---

TEST_CASE("a graph holds at most k_max_ops ops, and the message names the limit") {
  Graph g;
  Value v = g.input("x", DType::f32);
  for (std::size_t i = 0; i < limits::k_max_ops; ++i) v = g.relu(v);
  CHECK_THROWS_WITH_AS(g.relu(v), doctest::Contains("more than the limit of 1024 ops"), UserError);
  // Every kind of op counts against the same limit.
  CHECK_THROWS_AS(g.add(v, v), UserError);
  CHECK_THROWS_AS(g.scale(v, 2.0), UserError);
  CHECK_THROWS_AS(g.dropout(v, 0.5), UserError);
  CHECK_THROWS_AS(g.cast(v, DType::f16), UserError);
  CHECK(g.nodes().size() == 1 + limits::k_max_ops);
}

TEST_CASE("a graph holds at most k_max_inputs inputs") {
  Graph g;
  for (std::size_t i = 0; i < limits::k_max_inputs; ++i) g.input(fmt::format("in{}", i), DType::f32);
  CHECK_THROWS_WITH_AS(g.input("one_more", DType::f32), doctest::Contains("more than the limit of 128 inputs"),
                       UserError);
  CHECK(g.inputs().size() == limits::k_max_inputs);
}

TEST_CASE("a graph holds at most k_max_outputs outputs") {
  Graph g;
  Value x = g.input("x", DType::f32);
  for (std::size_t i = 0; i < limits::k_max_outputs; ++i) g.output(fmt::format("o{}", i), x, DType::f32);
  CHECK_THROWS_WITH_AS(g.output("one_more", x, DType::f32), doctest::Contains("more than the limit of 32 outputs"),
                       UserError);
}

TEST_CASE("a graph holds at most k_max_scale_ops scale ops and k_max_dropouts dropouts") {
  Graph g;
  Value v = g.input("x", DType::f32);
  for (std::size_t i = 0; i < limits::k_max_scale_ops; ++i) v = g.scale(v, 1.0);
  CHECK_THROWS_WITH_AS(g.scale(v, 1.0), doctest::Contains("more than the limit of 256 scale ops"), UserError);
  for (std::size_t i = 0; i < limits::k_max_dropouts; ++i) v = g.dropout(v, 0.0);
  CHECK_THROWS_WITH_AS(g.dropout(v, 0.0), doctest::Contains("more than the limit of 256 dropout ops"), UserError);
  CHECK(g.dropout_count() == static_cast<int>(limits::k_max_dropouts));
  CHECK(g.node(v).stream == static_cast<int>(limits::k_max_dropouts) - 1);
}

TEST_CASE("names are identifiers of at most k_max_name_length characters") {
  Graph g;
  const std::string at_limit(limits::k_max_name_length, 'n');
  const std::string past = at_limit + "n";
  Value x = g.input(at_limit, DType::f32);
  CHECK_THROWS_WITH_AS(g.input(past, DType::f32), doctest::Contains("65 characters, more than the limit of 64"),
                       UserError);
  Value r = g.relu(x);
  CHECK_THROWS_WITH_AS(g.set_name(r, past), doctest::Contains("value name"), UserError);
  CHECK_THROWS_WITH_AS(g.output(past, r, DType::f32), doctest::Contains("output name"), UserError);
  g.set_name(r, "r" + std::string(limits::k_max_name_length - 1, 'x'));
  g.output(at_limit.substr(1) + "o", r, DType::f32);
  // A name no limit could show in full is cut in the message.
  try {
    g.input(std::string(100000, 'z'), DType::f32);
    FAIL("a 100000-character name was accepted");
  } catch (const UserError& e) {
    CHECK(std::string_view(e.what()).size() < 400);
  }
}

TEST_CASE("a value name is unique, and renaming frees the old name") {
  Graph g;
  Value x = g.input("x", DType::f32);
  Value r = g.relu(x);
  Value s = g.sigmoid(r);
  g.set_name(r, "first");
  g.set_name(r, "second");
  CHECK(!g.find("first").valid());
  CHECK(g.find("second") == r);
  g.set_name(s, "first");
  CHECK(g.find("first") == s);
  CHECK_THROWS_WITH_AS(g.set_name(s, "x"), doctest::Contains("duplicate value name 'x'"), UserError);
  CHECK_THROWS_WITH_AS(g.set_name(s, "acc0"), doctest::Contains("reserved"), UserError);
  g.set_name(s, "first");  // its own name again is no duplicate
}

TEST_CASE("accumulators are made once, whatever the graph's size") {
  Graph g;
  Value acc = g.accumulator(0);
  Value x = g.input("x", DType::f32);
  for (int i = 0; i < 100; ++i) x = g.relu(x);
  CHECK(g.accumulator(0) == acc);
  Value acc1 = g.accumulator(1);
  CHECK(g.accumulator(1) == acc1);
  CHECK(acc1 != acc);
}

TEST_CASE("scale's alpha must be finite in float32") {
  Graph g;
  Value x = g.input("x", DType::f32);
  const double flt_max = std::numeric_limits<float>::max();
  g.scale(x, flt_max);
  g.scale(x, -flt_max);
  // Doubles just above FLT_MAX still round to it; the midpoint to 2^128 rounds to inf.
  g.scale(x, std::nextafter(limits::k_float32_overflow, 0.0));
  CHECK(std::isfinite(static_cast<float>(std::nextafter(limits::k_float32_overflow, 0.0))));
  CHECK_THROWS_WITH_AS(g.scale(x, limits::k_float32_overflow), doctest::Contains("not finite in float32"), UserError);
  CHECK_THROWS_WITH_AS(g.scale(x, 1e39), doctest::Contains("scale: alpha 1e+39 is not finite in float32"), UserError);
  CHECK_THROWS_AS(g.scale(x, -1e39), UserError);
  CHECK_THROWS_AS(g.scale(x, std::numeric_limits<double>::infinity()), UserError);
  CHECK_THROWS_AS(g.scale(x, std::nan("")), UserError);
  CHECK_THROWS_AS(g.dropout(x, std::nan("")), UserError);
}

TEST_CASE("add_scalar: c is in the signature (it is a literal of the code) and must be finite in float32") {
  const auto plus = [](double c) {
    KernelSpec s;
    s.graph.output("y", s.graph.add_scalar(s.graph.input("x", DType::f32), c), DType::f32);
    return s;
  };
  // Two graphs that differ only in c are two kernels: the signature and the
  // cache key's bytes tell them apart; the same c gives the same kernel.
  CHECK(signature(plus(1e-6)) != signature(plus(1e-5)));
  CHECK(signature_bytes(plus(1e-6)) != signature_bytes(plus(1e-5)));
  CHECK(signature_bytes(plus(1e-6)) != signature_bytes(plus(1e-6 * (1 + 1e-15))));
  CHECK(signature_bytes(plus(1e-6)) == signature_bytes(plus(1e-6)));
  CHECK(signature(plus(0.5)).find("add_scalar(in0) c=0.5 : full") != std::string::npos);
  // Not the scale of the same number either.
  KernelSpec scaled;
  scaled.graph.output("y", scaled.graph.scale(scaled.graph.input("x", DType::f32), 0.5), DType::f32);
  CHECK(signature_bytes(scaled) != signature_bytes(plus(0.5)));

  Graph g;
  Value x = g.input("x", DType::f32);
  const Value col = g.row_mean(x);
  CHECK(g.node(g.add_scalar(col, -2.0)).broadcast == Broadcast::col);
  CHECK(g.node(g.add_scalar(x, std::numeric_limits<float>::max())).alpha == std::numeric_limits<float>::max());
  CHECK_THROWS_WITH_AS(g.add_scalar(x, 1e39), doctest::Contains("add_scalar: c 1e+39 is not finite in float32"),
                       UserError);
  CHECK_THROWS_AS(g.add_scalar(x, -std::numeric_limits<double>::infinity()), UserError);
  CHECK_THROWS_AS(g.add_scalar(x, std::nan("")), UserError);
  CHECK_THROWS_WITH_AS(g.unary(OpKind::add_scalar, x), doctest::Contains("add_scalar takes an attribute"), UserError);
}

TEST_CASE("rmsnorm and layernorm desugar into primitives and check eps, weight, bias and x") {
  const auto ops_of = [](const Graph& g) {
    std::vector<OpKind> ops;
    for (const Node& n : g.nodes())
      if (n.kind == NodeKind::op) ops.push_back(n.op);
    return ops;
  };
  KernelSpec rms;
  {
    Graph& g = rms.graph;
    const Value x = g.input("x", DType::bf16);
    const Value w = g.input("w", DType::bf16, Broadcast::row);
    const Value y = g.rmsnorm(x, w, 1e-6);
    g.output("y", y, DType::bf16);
    CHECK(ops_of(g) == std::vector<OpKind>{OpKind::mul, OpKind::row_mean, OpKind::add_scalar, OpKind::rsqrt,
                                           OpKind::mul, OpKind::mul});
    CHECK(g.node(y).broadcast == Broadcast::full);
  }
  // The same ops written one by one are the same kernel.
  KernelSpec by_hand;
  {
    Graph& g = by_hand.graph;
    const Value x = g.input("x", DType::bf16);
    const Value w = g.input("w", DType::bf16, Broadcast::row);
    g.output("y", g.mul(g.mul(x, g.rsqrt(g.add_scalar(g.row_mean(g.mul(x, x)), 1e-6))), w), DType::bf16);
  }
  CHECK(signature(rms) == signature(by_hand));

  // layernorm: the mean and the centered value are one node each.
  Graph g;
  const Value x = g.input("x", DType::f32);
  const Value w = g.input("w", DType::f32, Broadcast::row);
  const Value b = g.input("b", DType::f32, Broadcast::row);
  const Value y = g.layernorm(x, w, b, 1e-5);
  CHECK(ops_of(g) == std::vector<OpKind>{OpKind::row_mean, OpKind::sub, OpKind::mul, OpKind::row_mean,
                                         OpKind::add_scalar, OpKind::rsqrt, OpKind::mul, OpKind::mul, OpKind::add});
  const Node& centered = g.nodes()[4];
  CHECK(centered.op == OpKind::sub);
  CHECK(g.nodes()[5].args == std::vector<Value>{Value{4}, Value{4}});  // (x - m) * (x - m)
  CHECK(g.node(y).args[0] == Value{10});
  CHECK(g.nodes()[7].alpha == 1e-5);

  // eps > 0 and finite, also once rounded to float; the message names eps and its value.
  const std::size_t before = g.nodes().size();
  CHECK_THROWS_WITH_AS(g.rmsnorm(x, w, 0.0),
                       "rmsnorm: eps must be a positive number finite in float32 (added in fp32), got 0", UserError);
  CHECK_THROWS_WITH_AS(g.layernorm(x, w, b, -1e-5), doctest::Contains("layernorm: eps must be a positive number"),
                       UserError);
  CHECK_THROWS_WITH_AS(g.layernorm(x, w, b, -1e-5), doctest::Contains("got -1e-05"), UserError);
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), 1e39, 1e-50, -0.0}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(g.rmsnorm(x, w, bad), doctest::Contains("eps must be"), UserError);
    CHECK_THROWS_WITH_AS(g.layernorm(x, w, b, bad), doctest::Contains("eps must be"), UserError);
  }
  CHECK_NOTHROW(g.rmsnorm(x, w, 1e-44));  // a float denormal is still > 0
  const std::size_t after_ok = g.nodes().size();
  CHECK(after_ok == before + 6);  // the failed calls made no nodes
  // weight and bias are row vectors, x is full.
  const Value col = g.input("c", DType::f32, Broadcast::col);
  CHECK_THROWS_WITH_AS(g.rmsnorm(x, x, 1e-6),
                       "rmsnorm: weight must be a row vector ([N], broadcast row), got a full value", UserError);
  CHECK_THROWS_WITH_AS(g.layernorm(x, w, col, 1e-6), doctest::Contains("layernorm: bias must be a row vector"),
                       UserError);
  CHECK_THROWS_WITH_AS(g.layernorm(w, w, b, 1e-6), doctest::Contains("layernorm: x must be a full [M,N] value"),
                       UserError);
  CHECK_THROWS_WITH_AS(g.rmsnorm(x, Value{999}, 1e-6), doctest::Contains("rmsnorm weight"), UserError);
  CHECK(g.nodes().size() == after_ok + 1);  // the input c only
}
