// Code generation: the template engine's strictness, determinism of emitted
// text, that no user text reaches the source, and the per-output precision
// policy. Golden text lives in tests/golden (test_golden_source.cpp).
#include <algorithm>
#include <map>
#include <doctest/doctest.h>

#include "codegen/epilogue.hpp"
#include "codegen/family.hpp"
#include "codegen/param_layout.hpp"
#include "codegen/template_engine.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "ir/dropout.hpp"
#include "ir/op_table.hpp"

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
// Two inputs, two scales: scalar parameters bound by index.
KernelSpec test_add_mul_two_scales() {
  KernelSpec s;
  Graph& g = s.graph;
  const Value v = g.scale(g.add(g.input("x", DType::f32), g.input("y", DType::f32)), 0.5);
  g.output("z", g.scale(v, -3.0), DType::f32);
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
  CHECK(std::get<ElementwiseTile>(a.tile).vec == 4);
  CHECK(std::get<ElementwiseTile>(emit_kernel(bias_gelu_dropout_add(DType::bf16), shape).tile).vec == 8);
}

TEST_CASE("precision policy: a fast form only where its error is below half an ulp of every output") {
  const Shape shape{8, 8, 0};
  CHECK(emit_kernel(bias_gelu_dropout_add(DType::f32), shape).text.find("ef_gelu_tanh_fast") ==
        std::string::npos);
  // f16 (half ulp 2^-12): GELU's ex2/rcp form (~2^-20) qualifies, tanh.approx (2^-11) does not.
  CHECK(emit_kernel(bias_gelu_dropout_add(DType::f16), shape).text.find("ef_gelu_tanh_fast") !=
        std::string::npos);
  for (const auto& [op, fast16] : {std::pair{"tanh", false}, {"log", false}, {"sigmoid", true}, {"silu", true},
                                   {"exp", true}, {"rsqrt", true}, {"gelu_tanh", true}}) {
    CAPTURE(op);
    for (DType d : {DType::f32, DType::f16, DType::bf16}) {
      CAPTURE(d);
      KernelSpec s;
      s.name = "one_op";
      const Value x = s.graph.input("x", d);
      s.graph.output("y", s.graph.unary(find_op(op)->kind, x), d);
      const bool fast = emit_kernel(s, shape).text.find(fmt::format("ef_{}_fast(", op)) != std::string::npos;
      CHECK(fast == (d == DType::bf16 || (d == DType::f16 && fast16)));
    }
  }
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

TEST_CASE("add_scalar's c is a float literal of the kernel, rounded to float, not a parameter") {
  const auto text_of = [](double c) {
    KernelSpec s;
    s.graph.output("y", s.graph.add_scalar(s.graph.input("x", DType::f32), c), DType::f32);
    return emit_kernel(s, {4, 64, 0}).text;
  };
  CHECK(text_of(1e-6).find("const float v1 = (v0 + 1e-06f);") != std::string::npos);
  CHECK(text_of(-2.5).find("const float v1 = (v0 + -2.5f);") != std::string::npos);
  CHECK(text_of(0.1).find("(v0 + 0.1f)") != std::string::npos);  // float(0.1), shortest
  CHECK(text_of(-0.0).find("(v0 + -0.0f)") != std::string::npos);
  CHECK(text_of(1e-6).find("alpha0") == std::string::npos);
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
  const auto general = emit_kernel(spec, {4, 64, 0}, std::nullopt, KernelPath::general);
  CHECK(fast.requires_alignment);
  CHECK(fast.text.find("p.vectorized") == std::string::npos);
  CHECK(fast.text.find("e0 + j < total") == std::string::npos);
  CHECK_FALSE(ragged.requires_alignment);
  CHECK(ragged.path == KernelPath::general);
  CHECK(ragged.text.find("p.vectorized") != std::string::npos);
  CHECK(wrapped.requires_alignment);
  CHECK(wrapped.text.find("ef_element_coords") != std::string::npos);  // the bias is gathered
  CHECK_FALSE(general.requires_alignment);
  CHECK(general.text.find("e0 + j < total") != std::string::npos);
  CHECK(general.name != fast.name);
  CHECK(ragged.name != wrapped.name);
  // Only general kernels take the flag that picks the path at launch.
  auto has_flag = [](const KernelSource& ks) {
    return std::any_of(ks.params.begin(), ks.params.end(),
                       [](const ParamField& f) { return f.role == ParamRole::vector_flag; });
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

namespace {

// The arguments of the first call of `<kernel>_epilogue(` after the function's definition.
std::vector<std::string> call_arguments(const std::string& text, const std::string& kernel) {
  const std::string head = kernel + "_epilogue(p, ";
  const auto def = text.find(kernel + "_epilogue(const");
  const auto at = text.find(head, def + 1);
  REQUIRE(at != std::string::npos);
  const auto end = text.find(')', at);
  std::vector<std::string> args;
  std::string list = text.substr(at + head.size(), end - at - head.size());
  for (std::size_t pos = 0;;) {
    const auto comma = list.find(", ", pos);
    args.push_back(list.substr(pos, comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 2;
  }
  return args;
}

}  // namespace

TEST_CASE("one epilogue contract: the signature and every call take the same arguments in one order") {
  // A dual GEMM chain whose inputs are declared before its accumulators are
  // read, so node order, input order and accumulator order all differ.
  KernelSpec spec;
  spec.mainloop.kind = MainloopKind::dual_gemm;
  Graph& g = spec.graph;
  const Value b1 = g.input("b1_bias", DType::f16, Broadcast::row);
  const Value b0 = g.input("b0_bias", DType::f16, Broadcast::row);
  const Value acc1 = g.accumulator(1);
  const Value acc0 = g.accumulator(0);
  const Value gate = g.sigmoid(g.add(acc0, b0));
  g.output("y", g.dropout(g.mul(gate, g.add(acc1, b1)), 0.1), DType::f16);
  g.output("pre", gate, DType::f32);
  KernelPlan plan = plan_operands(spec, {64, 64, 64}, KernelPath::fastest);
  plan.kernel_name = "k";
  plan_precision(plan);
  REQUIRE(plan.accumulators.size() == 2);  // filled (they were never, before the contract)
  const EpilogueContract c = epilogue_contract(plan);
  // The provider names every argument by what it is; the body reads it as its parameter.
  const std::string call = epilogue_call(plan, c, [&](const EpilogueArg& a) {
    switch (a.kind) {
      case EpilogueArg::Kind::accumulator: return fmt::format("ACC{}", a.index);
      case EpilogueArg::Kind::input: return fmt::format("IN_{}", plan.inputs[a.index].binding);
      case EpilogueArg::Kind::draw: return fmt::format("DRAW{}", a.index);
      case EpilogueArg::Kind::output: return fmt::format("OUT_{}", plan.outputs[a.index].binding);
    }
    return std::string();
  });
  const std::string sig = epilogue_signature(plan, c);
  // Pair the k-th parameter with the k-th argument: each must be the same value.
  std::map<std::string, std::string> bound;
  std::size_t s_pos = sig.find(", "), a_pos = call.find(", ");
  while (s_pos != std::string::npos) {
    const auto s_end = sig.find(", ", s_pos + 2), a_end = call.find_first_of(",)", a_pos + 2);
    const std::string param = sig.substr(s_pos + 2, s_end - s_pos - 2);
    bound[param.substr(param.rfind(' ') + 1)] = call.substr(a_pos + 2, a_end - a_pos - 2);
    s_pos = s_end;
    a_pos = a_end == std::string::npos || call[a_end] == ')' ? std::string::npos : a_end;
  }
  CHECK(bound.at(fmt::format("v{}", acc0.id)) == "ACC0");
  CHECK(bound.at(fmt::format("v{}", acc1.id)) == "ACC1");
  CHECK(bound.at(fmt::format("v{}", b0.id)) == "IN_b0_bias");
  CHECK(bound.at(fmt::format("v{}", b1.id)) == "IN_b1_bias");
  CHECK(bound.at("d0") == "DRAW0");
  CHECK(bound.at("o0") == "OUT_y");
  CHECK(bound.at("o1") == "OUT_pre");
  CHECK(bound.size() == 7);
}

TEST_CASE("the elementwise kernel's call matches its epilogue's signature") {
  const KernelSource ks = emit_kernel(bias_gelu_dropout_add(DType::bf16), {64, 256, 0});
  const auto args = call_arguments(ks.text, ks.name);
  CHECK(args == std::vector<std::string>{"in0_v[j]", "in1_v[j]", "in2_v[j]", "d0[j]", "out0_v[j]"});
  const auto sig_at = ks.text.find(ks.name + "_epilogue(const");
  const std::string sig = ks.text.substr(sig_at, ks.text.find(')', sig_at) - sig_at);
  CHECK(sig.find("float v0, float v1, float v2, unsigned d0, float& o0") != std::string::npos);
}

TEST_CASE("dropout thresholds over the whole range: no draws where the effect is decided, no wrap at 2^24") {
  // thr = llround(p * 2^24): 0 below 2^-25, 2^24 from 1 - 2^-25 on, where
  // `thr << 8` wraps to 0 in 32 bits and would keep every element.
  struct Case {
    double p;
    DropoutEffect philox4;
  };
  const Case cases[] = {
      {0x1p-33, DropoutEffect::keep_all},      {1e-7, DropoutEffect::masked},  // thr 2
      {0x1p-24, DropoutEffect::masked},        {0.5, DropoutEffect::masked},
      {1 - 0x1p-24, DropoutEffect::masked},    {1 - 0x1p-25, DropoutEffect::drop_all},
      {0.99999999, DropoutEffect::drop_all},   {1.0, DropoutEffect::drop_all},
      {0.0, DropoutEffect::keep_all},          {4.9e-324, DropoutEffect::keep_all},
  };
  for (const auto& c : cases) {
    CAPTURE(c.p);
    CHECK(dropout_effect(c.p, RngMode::philox4) == c.philox4);
    KernelSpec spec;
    spec.graph.output("y", spec.graph.dropout(spec.graph.input("x", DType::f32), c.p), DType::f32);
    const std::string text = emit_kernel(spec, {4, 64, 0}).text;
    CHECK((text.find("ef_dropout_factor(") != std::string::npos) == (c.philox4 == DropoutEffect::masked));
    if (c.philox4 == DropoutEffect::drop_all) CHECK(text.find("const float v1 = v0 * 0.0f;") != std::string::npos);  // NaN stays NaN
    if (c.philox4 == DropoutEffect::keep_all) CHECK(text.find("const float v1 = v0;") != std::string::npos);
    if (c.philox4 == DropoutEffect::masked) CHECK(text.find("ef_dropout_factor(d0, 0u,") == std::string::npos);  // never a wrapped 0
  }
  CHECK(dropout_effect(0.99999999, RngMode::triton) == DropoutEffect::drop_all);  // float(p) == 1
  CHECK(dropout_effect(1 - 0x1p-24, RngMode::triton) == DropoutEffect::masked);
  CHECK(dropout_effect(1e-44, RngMode::triton) == DropoutEffect::masked);    // float(p) > 0: r == 0 drops
  CHECK(dropout_effect(1e-50, RngMode::triton) == DropoutEffect::keep_all);  // float(p) == 0
}

TEST_CASE("parameters: the launch binds by role, fields are aligned, opaque blobs sit on 64 bytes") {
  const KernelSource ks = emit_kernel(test_add_mul_two_scales(), {64, 256, 0});
  int inputs = 0, outputs = 0, scalars = 0;
  for (const ParamField& f : ks.params) {
    CHECK(f.offset % f.align == 0);
    CHECK(f.offset + f.size <= ks.params_size);
    inputs += f.role == ParamRole::input;
    outputs += f.role == ParamRole::output;
    if (f.role == ParamRole::scalar) CHECK(ks.scalars.at(f.index) == (f.index == 0 ? 0.5f : -3.0f));
    scalars += f.role == ParamRole::scalar;
  }
  CHECK(inputs == 2);
  CHECK(outputs == 1);
  CHECK(scalars == 2);
  ParamLayout layout;
  layout.add(ParamRole::dim_m, 0, "m", "long long m", 8, 8);
  layout.add(ParamRole::scalar, 0, "alpha0", "float alpha0", 4, 4);
  layout.add(ParamRole::opaque, 0, "tmap_a", "unsigned char tmap_a[128]", 128, 64);
  KernelSource laid;
  CHECK(layout.fields_text().find("alignas(64) unsigned char tmap_a[128];") != std::string::npos);
  layout.finish(laid);
  CHECK(laid.params.back().offset == 64);
  CHECK(laid.params_size == 192);
}

TEST_CASE("kernel families: one per mainloop kind, tiles of another family are refused") {
  CHECK(family_for(MainloopKind::elementwise).kind() == MainloopKind::elementwise);
  CHECK(family_for(MainloopKind::gemm).kind() == MainloopKind::gemm);
  CHECK(family_for(MainloopKind::dual_gemm).kind() == MainloopKind::dual_gemm);
  const KernelSpec spec = bias_gelu_dropout_add(DType::f32);
  CHECK_THROWS_WITH_AS(emit_kernel(spec, {4, 64, 0}, ElementwiseTile{48, 0, 0}),
                       doctest::Contains("multiple of 32 in [32, 1024], got 48"), UserError);
  // The key of a tile holds its resolved form: an explicit default equals no tile.
  const TileConfig resolved = family_for(MainloopKind::elementwise).resolve_tile(spec, {4, 64, 0}, std::nullopt, "");
  CHECK(resolved == family_for(MainloopKind::elementwise).resolve_tile(spec, {4, 64, 0}, ElementwiseTile{256, 4, 0}, ""));
  CHECK(tile_hash(resolved) != tile_hash(ElementwiseTile{256, 8, 0}));
  CHECK(to_string(resolved) == "t256v4g0");
}

TEST_CASE("wgmma tiles: text form, sm_90a only, f16/bf16 only, the default for large problems there") {
  const WgmmaTile t{256, 128, 64, 4, 16};
  CHECK(t.str() == "h256x128x64s4g16");
  CHECK(std::get<WgmmaTile>(parse_tile(t.str())) == t);
  CHECK(std::get<GemmTile>(parse_tile("64x64x64w2x2s3g8k4")) == GemmTile{64, 64, 64, 2, 2, 3, 8, 4});
  for (const WgmmaTile w : {WgmmaTile{128, 256, 64, 4, 8, 2}, WgmmaTile{128, 128, 64, 6, 8, 1, 1},
                            WgmmaTile{128, 128, 64, 5, 8, 2, 1}})
    CHECK(std::get<WgmmaTile>(parse_tile(w.str())) == w);
  CHECK(WgmmaTile{128, 128, 64, 5, 8, 2, 1}.str() == "h128x128x64s5g8c2p");
  for (const char* bad : {"h", "h128x256x64s4", "h128x256x64s4g8x", "h128x256x64w2x2s4g8", "h128x256x64s4g8pc2",
                          "h128x256x64s4g8c", "h128x256x64s4g8pp"})
    CHECK_THROWS_WITH_AS(parse_tile(bad), doctest::Contains("expected hBMxBNxBKsSTAGESgGROUP"), UserError);
  CHECK(tile_hash(t) != tile_hash(WgmmaTile{256, 128, 64, 4, 8}));
  KernelSpec spec;
  spec.mainloop = {MainloopKind::gemm, DType::bf16, DType::bf16, Layout::row, Layout::row};
  spec.graph.output("y", spec.graph.relu(spec.graph.accumulator(0)), DType::bf16);
  const Shape big{4096, 4096, 4096};
  // The default: wgmma on sm_90a, mma.sync elsewhere, and for small or unaligned-stride problems.
  CHECK(std::holds_alternative<WgmmaTile>(emit_kernel(spec, big, std::nullopt, KernelPath::fastest, "sm_90a").tile));
  CHECK(std::holds_alternative<GemmTile>(emit_kernel(spec, big, std::nullopt, KernelPath::fastest, "sm_90").tile));
  CHECK(std::holds_alternative<GemmTile>(emit_kernel(spec, big).tile));
  CHECK(std::holds_alternative<GemmTile>(emit_kernel(spec, {64, 256, 128}, std::nullopt, KernelPath::fastest, "sm_90a").tile));
  CHECK(std::holds_alternative<GemmTile>(emit_kernel(spec, {4096, 4096, 4095}, std::nullopt, KernelPath::fastest, "sm_90a").tile));
  const auto candidates = tile_candidates(spec, big, "sm_90a");
  CHECK(std::holds_alternative<WgmmaTile>(candidates.front()));
  // Large problems compile only wgmma candidates; mid-size ones both kinds.
  CHECK(std::all_of(candidates.begin(), candidates.end(), [](const TileConfig& c) { return std::holds_alternative<WgmmaTile>(c); }));
  const auto mid = tile_candidates(spec, {1024, 1024, 1024}, "sm_90a");
  CHECK(std::any_of(mid.begin(), mid.end(), [](const TileConfig& c) { return std::holds_alternative<GemmTile>(c); }));
  CHECK(std::any_of(mid.begin(), mid.end(), [](const TileConfig& c) { return std::holds_alternative<WgmmaTile>(c); }));
  const auto ampere = tile_candidates(spec, big, "sm_80");
  CHECK(std::none_of(ampere.begin(), ampere.end(), [](const TileConfig& c) { return std::holds_alternative<WgmmaTile>(c); }));
  // The kernel: wgmma on both operands' descriptors, TMA maps as opaque parameters.
  const KernelSource ks = emit_kernel(spec, big, t, KernelPath::fastest, "sm_90a");
  CHECK(ks.text.find("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16") != std::string::npos);
  CHECK(std::count_if(ks.params.begin(), ks.params.end(), [](const ParamField& f) { return f.role == ParamRole::opaque; }) == 2);
  CHECK(ks.requires_alignment);
  // Its general path is the mma.sync kernel under the same key's tile.
  const KernelSource general = emit_kernel(spec, big, t, KernelPath::general, "sm_90a");
  CHECK(general.tile == TileConfig{t});
  CHECK(general.text.find("wgmma") == std::string::npos);
  CHECK(family_for(MainloopKind::gemm).geometry(general, big, 132).block[0] == 256);
  CHECK(family_for(MainloopKind::gemm).geometry(ks, big, 132).grid[0] == 132);
  // Refused: another target, f32 operands, tiles out of range.
  CHECK_THROWS_WITH_AS(emit_kernel(spec, big, t, KernelPath::fastest, "sm_80"), doctest::Contains("sm_90a only"), UserError);
  CHECK_THROWS_AS(emit_kernel(spec, big, WgmmaTile{64, 128, 64, 4, 8}), UserError);
  CHECK_THROWS_AS(emit_kernel(spec, big, WgmmaTile{256, 256, 64, 4, 8}), UserError);
  CHECK_THROWS_AS(emit_kernel(spec, big, WgmmaTile{128, 256, 64, 8, 8}), UserError);
  CHECK_THROWS_AS(emit_kernel(spec, big, WgmmaTile{128, 256, 64, 4, 8, 1, 1}), UserError);  // ping-pong: 256 accumulators
  CHECK_THROWS_AS(emit_kernel(spec, big, WgmmaTile{128, 64, 64, 4, 8, 4}), UserError);     // clusters of 1 or 2
  CHECK_NOTHROW(emit_kernel(spec, big, WgmmaTile{128, 64, 64, 4, 8, 2}));  // BN 64: the k rows of B are split
  CHECK(emit_kernel(spec, big, WgmmaTile{128, 128, 64, 6, 8, 1, 1}).text.find("PINGPONG = true") != std::string::npos);
  KernelSpec f32 = spec;
  f32.mainloop.a = f32.mainloop.b = DType::f32;
  CHECK_THROWS_WITH_AS(emit_kernel(f32, big, t), doctest::Contains("f16 or bf16"), UserError);
  // tf32: wgmma where both operands are K-major (A row-major, B col-major),
  // BK 32 (128 bytes of K); the copy engine rounds (a TFLOAT32 tensor map).
  KernelSpec tf32 = f32;
  tf32.mainloop.math = GemmMath::tf32;
  CHECK(std::holds_alternative<GemmTile>(emit_kernel(tf32, big, std::nullopt, KernelPath::fastest, "sm_90a").tile));
  CHECK_THROWS_WITH_AS(emit_kernel(tf32, big, WgmmaTile{128, 256, 32, 4, 8}), doctest::Contains("col-major"), UserError);
  tf32.mainloop.b_layout = Layout::col;
  const TileConfig tf32_default = emit_kernel(tf32, big, std::nullopt, KernelPath::fastest, "sm_90a").tile;
  // Note [Default GEMM tile]: from K = 4096 the cooperative 128x256, below it ping-pong.
  CHECK(tf32_default == TileConfig{WgmmaTile{128, 256, 32, 4, 8}});
  CHECK(emit_kernel(tf32, {4096, 4096, 2048}, std::nullopt, KernelPath::fastest, "sm_90a").tile ==
        TileConfig{WgmmaTile{128, 128, 32, 6, 8, 1, 1}});
  const auto tf32_candidates = tile_candidates(tf32, big, "sm_90a");
  CHECK(std::all_of(tf32_candidates.begin(), tf32_candidates.end(),
                    [](const TileConfig& c) { return std::get<WgmmaTile>(c).bk == 32; }));
  const KernelSource tks = emit_kernel(tf32, big, WgmmaTile{128, 256, 32, 4, 8}, KernelPath::fastest, "sm_90a");
  CHECK(tks.text.find("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32") != std::string::npos);
  CHECK_THROWS_WITH_AS(emit_kernel(tf32, big, t), doctest::Contains("BK 32"), UserError);
  KernelSpec dual_tf32 = tf32;  // a dual GEMM too: the dual tiles with BK 32
  dual_tf32.mainloop.kind = MainloopKind::dual_gemm;
  dual_tf32.graph = Graph();
  dual_tf32.graph.output("y", dual_tf32.graph.mul(dual_tf32.graph.accumulator(0), dual_tf32.graph.accumulator(1)), DType::f32);
  // The default dual tile for large shapes: the ping-pong 128x64 one, BK 32
  // for tf32 and 64 for 16-bit operands (docs/hopper.md).
  CHECK(emit_kernel(dual_tf32, big, std::nullopt, KernelPath::fastest, "sm_90a").tile ==
        TileConfig{WgmmaTile{128, 64, 32, 6, 8, 1, 1}});
  KernelSpec dual_f16 = dual_tf32;
  dual_f16.mainloop.a = dual_f16.mainloop.b = DType::f16;
  dual_f16.mainloop.math = GemmMath::exact;
  CHECK(emit_kernel(dual_f16, big, std::nullopt, KernelPath::fastest, "sm_90a").tile ==
        TileConfig{WgmmaTile{128, 64, 64, 6, 8, 1, 1}});
  // Both products in one wgmma of twice BN's columns (Note [One wgmma for two products]).
  CHECK(emit_kernel(dual_tf32, big, WgmmaTile{128, 64, 32, 6, 8, 1, 1}, KernelPath::fastest, "sm_90a")
            .text.find("m64n128k8.f32.tf32.tf32") != std::string::npos);
  // BM 64 is a ping-pong tile (each warpgroup all 64 rows); cooperative, a warpgroup would have 32.
  CHECK_NOTHROW(emit_kernel(dual_tf32, big, WgmmaTile{64, 128, 32, 5, 8, 1, 1}, KernelPath::fastest, "sm_90a"));
  CHECK_THROWS_WITH_AS(emit_kernel(dual_tf32, big, WgmmaTile{64, 128, 32, 5, 8}, KernelPath::fastest, "sm_90a"),
                       doctest::Contains("or 64 ping-pong"), UserError);
}

TEST_CASE("wgmma epilogue: one or two 16-bit outputs and no dropout run on the fragments; the rest stage fp32 (Note [Fragment epilogue])") {
  const Shape big{4096, 4096, 4096};
  const WgmmaTile t{128, 256, 64, 4, 8};
  auto fragment = [&](const KernelSpec& s, const Shape& shape) {
    const std::string text = emit_kernel(s, shape, t, KernelPath::fastest, "sm_90a").text;
    const bool on = text.find("FRAGMENT_EPILOGUE = true") != std::string::npos;
    CHECK((on || text.find("FRAGMENT_EPILOGUE = false") != std::string::npos));
    return on;
  };
  KernelSpec spec;
  // B col-major: its contiguous dimension is K, so N need not be a multiple of 8 for wgmma.
  spec.mainloop = {MainloopKind::gemm, DType::f16, DType::f16, Layout::row, Layout::col};
  const Value z = spec.graph.add(spec.graph.accumulator(0), spec.graph.input("bias", DType::f16, Broadcast::row));
  spec.graph.output("y", spec.graph.relu(z), DType::f16);
  CHECK(fragment(spec, big));
  CHECK(fragment(spec, {4096, 4100, 4096}));   // N % 8 == 4: 8-byte halves at run time
  CHECK_FALSE(fragment(spec, {4096, 4098, 4096}));  // N % 4 != 0: element stores
  KernelSpec bf = spec;
  bf.mainloop.a = bf.mainloop.b = DType::bf16;
  CHECK(fragment(bf, big));
  KernelSpec f32_out = spec;
  f32_out.graph = Graph();
  f32_out.graph.output("y", f32_out.graph.relu(f32_out.graph.accumulator(0)), DType::f32);
  CHECK_FALSE(fragment(f32_out, big));
  KernelSpec two = spec;
  two.graph.output("z", z, DType::f16);
  CHECK(fragment(two, big));  // the second output's pairs wait in registers
  KernelSpec three = two;
  three.graph.output("z2", three.graph.add(z, z), DType::f16);
  CHECK_FALSE(fragment(three, big));
  KernelSpec mixed = spec;
  mixed.graph.output("z", z, DType::f32);
  CHECK_FALSE(fragment(mixed, big));
  KernelSpec drop = spec;
  drop.graph = Graph();
  drop.graph.output("y", drop.graph.dropout(drop.graph.accumulator(0), 0.1, RngMode::philox4), DType::f16);
  // Dropout keeps the staged quads: a lane pair sharing each Philox call on the
  // fragments was slower (docs/perf/gemm.md, "Tried and rejected").
  CHECK_FALSE(fragment(drop, big));
}

TEST_CASE("gemm tiles: the text form reads back, split-K included; malformed text is a user error") {
  for (const GemmTile t : {GemmTile{128, 256, 32, 2, 4, 4, 8}, GemmTile{64, 64, 64, 2, 2, 3, 8, 4}}) {
    CHECK(parse_gemm_tile(t.str()) == t);
  }
  CHECK(GemmTile{64, 64, 64, 2, 2, 3, 8, 4}.str() == "64x64x64w2x2s3g8k4");
  CHECK(tile_hash(GemmTile{64, 64, 64, 2, 2, 3, 8, 4}) != tile_hash(GemmTile{64, 64, 64, 2, 2, 3, 8, 2}));
  for (const char* bad : {"", "128x128", "128x128x32w2x2s4g8k", "128x128x32w2x2s4g8x", "128x128x32w2x2s4g8k2z"})
    CHECK_THROWS_WITH_AS(parse_gemm_tile(bad), doctest::Contains("expected BMxBNxBKwWMxWNsSTAGESgGROUP"), UserError);
  // Elementwise tiles read back from what bench and compile print.
  for (const ElementwiseTile t : {ElementwiseTile{256, 8, 0}, ElementwiseTile{1024, 16, 4}, ElementwiseTile{128, 0, 2}})
    CHECK(std::get<ElementwiseTile>(parse_tile(t.str())) == t);
  for (const char* bad : {"t256", "t256v8", "t256v8g0x", "tile"})
    CHECK_THROWS_WITH_AS(parse_tile(bad), doctest::Contains("expected tTHREADSvVECgBLOCKS"), UserError);
  // Split-K tiles carry the flag and partial-sum workspace; others do not.
  KernelSpec spec;
  spec.mainloop = {MainloopKind::gemm, DType::f16, DType::f16, Layout::row, Layout::row};
  spec.graph.output("y", spec.graph.accumulator(0), DType::f16);
  const KernelSource split = emit_kernel(spec, {256, 256, 1024}, GemmTile{64, 64, 32, 2, 2, 4, 8, 4});
  const WorkspaceNeeds need = family_for(MainloopKind::gemm).workspace(split, {256, 256, 1024});
  CHECK(need.zeroed == 16 * 4);
  CHECK(need.scratch == 16 * 64 * 64 * 4);
  CHECK(std::count_if(split.params.begin(), split.params.end(),
                      [](const ParamField& f) { return f.role == ParamRole::workspace; }) == 2);
  const KernelSource whole = emit_kernel(spec, {256, 256, 1024}, GemmTile{64, 64, 32, 2, 2, 4, 8});
  CHECK(family_for(MainloopKind::gemm).workspace(whole, {256, 256, 1024}).scratch == 0);
  CHECK_THROWS_AS(emit_kernel(spec, {256, 256, 1024}, GemmTile{128, 128, 8, 2, 4, 2, 8, 2}), UserError);
}

namespace {

// sigmoid(acc0 + b0) * (acc1 + b1), with a dropout when p > 0: the gating layer.
KernelSpec gating_spec(DType dt, double p = 0.0) {
  KernelSpec spec;
  spec.mainloop = {MainloopKind::dual_gemm, dt, dt, Layout::row, Layout::row};
  Graph& g = spec.graph;
  const Value gate = g.sigmoid(g.add(g.accumulator(0), g.input("bias0", dt, Broadcast::row)));
  Value y = g.mul(gate, g.add(g.accumulator(1), g.input("bias1", dt, Broadcast::row)));
  if (p > 0) y = g.dropout(y, p);
  g.output("y", y, dt);
  return spec;
}

bool has(const std::string& text, std::string_view what) { return text.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("dual gemm: operands a, b0, b1; both accumulators reach the epilogue on every GEMM kernel") {
  const KernelSpec spec = gating_spec(DType::f16, 0.1);
  const Shape big{4096, 4096, 4096}, small{256, 256, 256};
  // mma.sync (register and staged epilogues), wgmma, and exact f32 (FFMA).
  KernelSpec f32 = spec;
  f32.mainloop.a = f32.mainloop.b = DType::f32;
  for (const KernelSource& ks : {emit_kernel(spec, small), emit_kernel(spec, big),
                                 emit_kernel(spec, big, std::nullopt, KernelPath::fastest, "sm_90a"),
                                 emit_kernel(f32, small)}) {
    INFO(ks.name << " " << to_string(ks.tile));
    CHECK(ks.inputs == std::vector<std::string>{"a", "b0", "b1", "bias0", "bias1"});
    CHECK(has(ks.text, "constexpr bool DUAL = true;"));
    CHECK(has(ks.text, "* b1;"));
    CHECK(has(ks.text, "dual_gemm f"));
    // The epilogue call passes acc (or its staged quad) first and acc1 second.
    CHECK((has(ks.text, "quad[e], quad1[e]") || has(ks.text, "acc[mi][ni][e], acc1[mi][ni][e]") ||
           has(ks.text, "acc[0][jg * 4 + e], acc1[0][jg * 4 + e]")));
  }
  const KernelSource hopper = emit_kernel(spec, big, std::nullopt, KernelPath::fastest, "sm_90a");
  CHECK(std::holds_alternative<WgmmaTile>(hopper.tile));
  CHECK(std::count_if(hopper.params.begin(), hopper.params.end(),
                      [](const ParamField& f) { return f.role == ParamRole::opaque; }) == 3);  // A, B0, B1 maps
  CHECK(has(hopper.text, "&p.tma_b1"));
  // A single GEMM keeps one B and no B1 map.
  KernelSpec single = gating_spec(DType::f16);
  single.mainloop.kind = MainloopKind::gemm;
  single.graph = Graph{};
  single.graph.output("y", single.graph.relu(single.graph.accumulator(0)), DType::f16);
  const KernelSource one = emit_kernel(single, big, std::nullopt, KernelPath::fastest, "sm_90a");
  CHECK(has(one.text, "constexpr bool DUAL = false;"));
  CHECK(!has(one.text, "&p.tma_b1"));
  CHECK(one.inputs == std::vector<std::string>{"a", "b"});
}

TEST_CASE("dual gemm: tiles hold two accumulators; larger ones and split-K are user errors") {
  const KernelSpec spec = gating_spec(DType::bf16);
  const Shape big{4096, 4096, 4096};
  // Every candidate fits its registers and shared memory (emit checks both).
  for (const char* target : {"sm_80", "sm_90a"})
    for (const TileConfig& t : tile_candidates(spec, {1024, 1024, 1024}, target)) {
      INFO(target << " " << to_string(t));
      CHECK_NOTHROW(emit_kernel(spec, {1024, 1024, 1024}, t, KernelPath::fastest, target));
    }
  const auto decode = tile_candidates(spec, {16, 11008, 4096}, "sm_90a");
  CHECK(std::any_of(decode.begin(), decode.end(), [](const TileConfig& c) {
    const auto* t = std::get_if<GemmTile>(&c);
    return t && t->bm == 16;
  }));
  CHECK_THROWS_WITH_AS(emit_kernel(spec, big, WgmmaTile{128, 256, 64, 4, 8}, KernelPath::fastest, "sm_90a"),
                       doctest::Contains("holds 256 accumulators a thread"), UserError);
  CHECK_THROWS_WITH_AS(emit_kernel(spec, big, GemmTile{128, 256, 32, 2, 4, 4, 8}),
                       doctest::Contains("dual_gemm tile 128x256x32w2x4s4g8: a warp tile of 64x64"), UserError);
  CHECK_THROWS_WITH_AS(emit_kernel(spec, big, GemmTile{64, 64, 64, 2, 2, 3, 8, 2}), doctest::Contains("no split-K"),
                       UserError);
  KernelSpec f32 = spec;
  f32.mainloop.a = f32.mainloop.b = DType::f32;
  CHECK_THROWS_WITH_AS(emit_kernel(f32, big, GemmTile{128, 128, 8, 2, 4, 2, 8}),
                       doctest::Contains("an f32 (FFMA) dual tile"), UserError);
  // The untuned tiles are valid dual tiles.
  for (const Shape& s : {Shape{64, 64, 64}, Shape{512, 512, 512}, big}) {
    CHECK_NOTHROW(emit_kernel(spec, s));
    CHECK_NOTHROW(emit_kernel(f32, s));
  }
}
