// Code generation: the template engine's strictness, determinism of emitted
// text, that no user text reaches the source, and the per-output precision
// policy. Golden text lives in tests/golden (test_golden_source.cpp).
#include <algorithm>
#include <doctest/doctest.h>

#include "codegen/kernel_plan.hpp"
#include "codegen/template_engine.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"

using namespace epifuse;

namespace {
KernelSpec bias_gelu_dropout_add(DType dt, std::string bias_name = "bias") {
  KernelSpec s;
  Graph& g = s.graph;
  Value x = g.input("x", dt);
  Value b = g.input(bias_name, dt, Broadcast::row);
  Value r = g.input("residual", dt);
  Value y = g.add(g.dropout(g.gelu_tanh(g.add(x, b)), 0.1), r);
  g.output("y", y, dt);
  return s;
}
}  // namespace

TEST_CASE("template engine fails on a missing or unused key") {
  CHECK(render_template("a ${x} b ${y}", {{"x", "1"}, {"y", "2"}}) == "a 1 b 2");
  CHECK_THROWS_AS(render_template("a ${x} b ${y}", {{"x", "1"}}), InternalError);
  CHECK_THROWS_AS(render_template("a ${x}", {{"x", "1"}, {"z", "2"}}), InternalError);
  CHECK_THROWS_AS(render_template("a ${x", {{"x", "1"}}), InternalError);
}

TEST_CASE("emitted source is deterministic and free of user names") {
  const Shape shape{64, 96, 0};
  const auto a = emit_kernel(bias_gelu_dropout_add(DType::f32), shape);
  const auto b = emit_kernel(bias_gelu_dropout_add(DType::f32, "my_secret_bias"), shape);
  CHECK(a.text == b.text);
  CHECK(a.text.find("bias") == std::string::npos);
  CHECK(b.text.find("my_secret_bias") == std::string::npos);
  CHECK(b.inputs == std::vector<std::string>{"x", "my_secret_bias", "residual"});
  CHECK(a.tile.vec == 4);
  CHECK(emit_kernel(bias_gelu_dropout_add(DType::bf16), shape).tile.vec == 8);
}

TEST_CASE("precision policy: approximate tanh only where every output is bf16 or precision is fast") {
  const Shape shape{8, 8, 0};
  CHECK(emit_kernel(bias_gelu_dropout_add(DType::f32), shape).text.find("ef_gelu_tanh_fast") ==
        std::string::npos);
  CHECK(emit_kernel(bias_gelu_dropout_add(DType::f16), shape).text.find("ef_gelu_tanh_fast") ==
        std::string::npos);
  CHECK(emit_kernel(bias_gelu_dropout_add(DType::bf16), shape).text.find("ef_gelu_tanh_fast") !=
        std::string::npos);
  auto fast = bias_gelu_dropout_add(DType::f32);
  fast.precision = Precision::fast;
  CHECK(emit_kernel(fast, shape).text.find("ef_gelu_tanh_fast") != std::string::npos);
  // A node that also feeds an f32 output stays accurate.
  auto mixed = bias_gelu_dropout_add(DType::bf16);
  mixed.graph.output("pre", mixed.graph.gelu_tanh(mixed.graph.find("x")), DType::f32);
  const auto text = emit_kernel(mixed, shape).text;
  CHECK(text.find("ef_gelu_tanh_fast") != std::string::npos);
  CHECK(text.find("ef_gelu_tanh(") != std::string::npos);
}

TEST_CASE("float literals read back exactly") {
  CHECK(float_literal(1.0f) == "1.0f");
  CHECK(float_literal(0.1f) == "0.1f");
  CHECK(float_literal(1.1111112f) == "1.1111112f");
  CHECK(float_literal(1e-30f) == "1e-30f");
}

TEST_CASE("row-vector alignment is part of the shape class") {
  const auto aligned = emit_kernel(bias_gelu_dropout_add(DType::f32), {4, 64, 0});
  const auto unaligned = emit_kernel(bias_gelu_dropout_add(DType::f32), {4, 65, 0});
  CHECK(aligned.name != unaligned.name);
  CHECK(aligned.input_alignment[1] == 16);
  CHECK(unaligned.input_alignment[1] == 0);
}

TEST_CASE("a kernel carries the scalar path only where the shape or the caller needs it") {
  const KernelSpec spec = bias_gelu_dropout_add(DType::f32);
  const auto fast = emit_kernel(spec, {4, 64, 0});         // M*N % 4 == 0: vector path alone
  const auto ragged = emit_kernel(spec, {3, 65, 0});       // 195 elements: a partial last vector
  const auto wrapped = emit_kernel(spec, {4, 65, 0});      // rows unaligned, M*N % 4 == 0
  const auto general = emit_kernel(spec, {4, 64, 0}, {}, KernelPath::general);
  CHECK(fast.vector_only);
  CHECK(fast.text.find("p.vectorized") == std::string::npos);
  CHECK(fast.text.find("e0 + j < total") == std::string::npos);
  CHECK_FALSE(ragged.vector_only);
  CHECK(ragged.text.find("p.vectorized") != std::string::npos);
  CHECK(wrapped.vector_only);
  CHECK(wrapped.text.find("ef_element_coords") != std::string::npos);  // the bias is gathered
  CHECK_FALSE(general.vector_only);
  CHECK(general.text.find("e0 + j < total") != std::string::npos);
  CHECK(general.name != fast.name);
  CHECK(ragged.name != wrapped.name);
  // Only general kernels take the flag that picks the path at launch.
  auto has_flag = [](const KernelSource& ks) {
    return std::any_of(ks.params.begin(), ks.params.end(),
                       [](const ParamField& f) { return f.kind == ParamField::Kind::flag; });
  };
  CHECK_FALSE(has_flag(fast));
  CHECK(has_flag(general));
}

#include "common/philox.cuh"

TEST_CASE("the kernels' scaled keep test equals the contract's (draw >> 8) >= thr for p < 1") {
  for (std::uint32_t thr : {0u, 1u, 1677722u, 8388608u, (1u << 24) - 1}) {
    for (std::uint32_t d : {0u, 255u, 256u, thr * 256u - 1u, thr * 256u, thr * 256u + 1u, 0xFFFFFFFFu})
      CHECK(ef_dropout_keep_scaled(d, thr << 8) == ef_dropout_keep(d, thr));
    std::uint32_t x = 12345u + thr;
    for (int i = 0; i < 10000; ++i) {
      x = x * 1664525u + 1013904223u;
      CHECK(ef_dropout_keep_scaled(x, thr << 8) == ef_dropout_keep(x, thr));
    }
  }
}
