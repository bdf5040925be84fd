// IR builder validation, canonical printer and signature.
#include <doctest/doctest.h>

#include "epifuse/errors.hpp"
#include "epifuse/spec.hpp"

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
  CHECK_THROWS_WITH_AS(g.output("y", g.relu(b), DType::f32),
                       doctest::Contains("outputs must be full"), UserError);
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
