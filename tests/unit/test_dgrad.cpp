// as_gemm_epilogue (docs/gemm-backward.md §1) on the CPU reference: the dgrad
// chain of every example's backward computes, bit for bit, what the backward
// computes with dy := A·B, on integer-valued operands whose products and sums
// are exact in every dtype (so the fp32 accumulator and the stored dy agree);
// dropout masks included. And the inputs it refuses, with the reason.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "epifuse/autodiff.hpp"
#include "epifuse/dgrad.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/json.hpp"
#include "epifuse/reference.hpp"

using namespace epifuse;

namespace {

// Values in {-2, ..., 2}, never all zero, from a small LCG: exact in bf16.
HostTensor small_integers(DType dt, std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  HostTensor t = HostTensor::zeros(dt, {rows, cols});
  std::uint32_t s = seed * 2654435761u + 1u;
  for (std::int64_t i = 0; i < rows * cols; ++i) {
    s = s * 1664525u + 1013904223u;
    t.set(i, static_cast<float>(static_cast<int>((s >> 16) % 5u) - 2));
  }
  t.set(0, 1.0f);
  return t;
}

// a [M,K] times b [K,N], row-major, stored in `dt` (exact for small integers).
HostTensor product(const HostTensor& a, const HostTensor& b, DType dt, const Shape& shape) {
  HostTensor c = HostTensor::zeros(dt, {shape.m, shape.n});
  for (std::int64_t r = 0; r < shape.m; ++r)
    for (std::int64_t j = 0; j < shape.n; ++j) {
      float acc = 0.0f;
      for (std::int64_t k = 0; k < shape.k; ++k) acc += a.get(r * shape.k + k) * b.get(k * shape.n + j);
      c.set(r * shape.n + j, acc);
    }
  return c;
}

Mainloop row_major_gemm(DType dt) {
  Mainloop m;
  m.kind = MainloopKind::gemm;
  m.a = m.b = dt;
  return m;
}

}  // namespace

TEST_CASE("the dgrad chain of every example's backward equals the backward with dy := A·B, bit for bit") {
  const auto dir = std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples" / "chains";
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const KernelSpec spec = load_spec(entry.path());
    if (spec.mainloop.kind == MainloopKind::dual_gemm) continue;  // two accumulators' gradients: §4
    const GradResult g = grad(spec);
    const std::string up = "d" + spec.graph.outputs().front().name;
    const Node& dy = g.backward.graph.node(g.backward.graph.find(up));
    INFO(entry.path().filename().string());
    KernelSpec dgrad;
    try {
      dgrad = as_gemm_epilogue(g.backward, up, row_major_gemm(dy.dtype));
    } catch (const UserError& e) {
      // A backward input named like a GEMM operand cannot become a GEMM chain's.
      MESSAGE("not a dgrad chain: " << e.what());
      continue;
    }
    CHECK(dgrad.name == g.backward.name + "_dgrad");
    CHECK(dgrad.graph.outputs().size() == g.backward.graph.outputs().size());
    for (const Shape shape : {Shape{5, 12, 3}, Shape{1, 7, 4}}) {
      TensorMap inputs = make_inputs(dgrad, shape, 17);
      inputs.at("a") = small_integers(dy.dtype, shape.m, shape.k, 1);
      inputs.at("b") = small_integers(dy.dtype, shape.k, shape.n, 2);
      TensorMap back = inputs;
      back.erase("a");
      back.erase("b");
      back.emplace(up, product(inputs.at("a"), inputs.at("b"), dy.dtype, shape));
      const LaunchArgs args{0x5eedULL, 3};
      const TensorMap got = evaluate(dgrad, shape, inputs, args);
      const TensorMap want = evaluate(g.backward, Shape{shape.m, shape.n, 0}, back, args);
      for (const Output& o : g.backward.graph.outputs()) {
        INFO("output " << o.name << " at " << shape.m << "x" << shape.n << "x" << shape.k);
        CHECK(got.at(o.name).bytes == want.at(o.name).bytes);
      }
    }
    ++checked;
  }
  CHECK(checked >= 8);
}

TEST_CASE("as_gemm_epilogue refuses what cannot be a GEMM's epilogue, saying why") {
  const auto dir = std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples" / "chains";
  const GradResult g = grad(load_spec(dir / "bias_gelu_dropout_add.json"));
  const Mainloop gemm = row_major_gemm(DType::f32);
  CHECK_THROWS_WITH_AS(as_gemm_epilogue(g.backward, "nope", gemm), doctest::Contains("'nope' is not an input"),
                       UserError);
  CHECK_THROWS_WITH_AS(as_gemm_epilogue(g.backward, "bias", gemm), doctest::Contains("is a row input"), UserError);
  Mainloop dual = gemm;
  dual.kind = MainloopKind::dual_gemm;
  CHECK_THROWS_WITH_AS(as_gemm_epilogue(g.backward, "dy", dual), doctest::Contains("a single GEMM"), UserError);
  const KernelSpec once = as_gemm_epilogue(g.backward, "dy", gemm);
  CHECK_THROWS_WITH_AS(as_gemm_epilogue(once, "x", gemm), doctest::Contains("already has a gemm mainloop"),
                       UserError);
  // Dropout keeps its stream: the dgrad chain draws the forward's masks.
  int dropouts = 0;
  for (const Node& n : once.graph.nodes())
    if (n.kind == NodeKind::op && n.op == OpKind::dropout) ++dropouts;
  CHECK(dropouts == 1);
}
