// GPU tier for the GEMM family (mma.sync): every operand dtype and layout, odd
// shapes, every tile candidate, misaligned operands, multiple outputs and
// column-broadcast inputs against the reference evaluator on random non-zero
// data; dropout masks compared position by position. Skips without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "bench/bench.hpp"
#include "epifuse/compare.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/reference.hpp"
#include "gemm_checks.hpp"
#include "gpu_jit.hpp"

using namespace epifuse;

namespace {

using testing::gpu_jit;

// Tolerance and checks: tests/gemm_checks.hpp.
using testing::check;
using testing::gemm_spec;
using testing::gemm_tolerance;

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("gemm: f16, bf16, exact f32 and tf32, all four layouts, odd shapes") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const Shape shapes[] = {{1, 1, 1},     {7, 63, 65},   {65, 1000, 7},  {1023, 65, 63},
                            {63, 7, 1000}, {128, 128, 128}, {64, 256, 128}, {200, 136, 96}};
    std::uint64_t seed = 1000;
    for (DType dt : {DType::f16, DType::bf16, DType::f32})
      for (Layout a : {Layout::row, Layout::col})
        for (Layout b : {Layout::row, Layout::col})
          for (const Shape& s : shapes) check(*jit, gemm_spec(dt, a, b), s, ++seed);
    // tf32: the reference rounds the operands as the tensor cores' cvt.rna does,
    // so the bound is the same fp32-accumulation bound as f16's.
    for (Layout a : {Layout::row, Layout::col})
      for (Layout b : {Layout::row, Layout::col})
        for (const Shape& s : shapes)
          check(*jit, gemm_spec(DType::f32, a, b, 0.0, RngMode::philox4, Broadcast::row, GemmMath::tf32), s, ++seed);
  }

  TEST_CASE("gemm: tf32 differs from exact f32 as tf32 rounding predicts") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    // With the reference's tf32 rounding switched off (exact math), a tf32
    // kernel's result must miss the tight bound: the test above could not pass
    // with an exact f32 kernel by accident.
    const KernelSpec tf = gemm_spec(DType::f32, Layout::row, Layout::row, 0.0, RngMode::philox4, Broadcast::row,
                                    GemmMath::tf32);
    KernelSpec exact = tf;
    exact.mainloop.math = GemmMath::exact;
    const Shape shape{64, 64, 256};
    const TensorMap inputs = make_inputs(tf, shape, 1500);
    const HostTensor got = run_on_device(*jit, tf, shape, inputs, {}).at("y");
    const HostTensor want_exact = evaluate(exact, shape, inputs, {}).at("y");
    Tolerance tight = tolerance_for(DType::f32, Precision::accurate);
    tight.atol = 1e-5;
    tight.rtol = 1e-6;
    CHECK_FALSE(compare(got, want_exact, tight).ok);
    CHECK(compare(got, evaluate(tf, shape, inputs, {}).at("y"), gemm_tolerance(DType::f32, shape)).ok);
  }

  TEST_CASE("gemm: every tile candidate, on the 16-byte path and the element path") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 2000;
    for (const GemmMath math : {GemmMath::exact, GemmMath::tf32})
    for (DType dt : {DType::f16, DType::f32}) {
      if (math == GemmMath::tf32 && dt != DType::f32) continue;
      const KernelSpec spec = gemm_spec(dt, Layout::row, Layout::row, 0.0, RngMode::philox4, Broadcast::row, math);
      for (const Shape& s : {Shape{300, 264, 96}, Shape{130, 70, 33}, Shape{256, 256, 1024}})  // the last: split-K too
        for (const TileConfig& tile : tile_candidates(spec, s, jit->target())) check(*jit, spec, s, ++seed, tile);
    }
  }

  TEST_CASE("gemm: split-K sums its slices in order, runs the epilogue once and resets its flags") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 2500;
    // K = 40 with BK 32 and 4 splits leaves two splits with no K at all.
    for (Layout a : {Layout::row, Layout::col})
      for (Layout b : {Layout::row, Layout::col})
        for (int split : {2, 3, 4})
          for (const Shape& s : {Shape{130, 264, 1000}, Shape{64, 64, 40}, Shape{1, 8, 517}, Shape{65, 63, 129}}) {
            GemmTile t{64, 64, 32, 2, 2, 4, 8};
            t.split_k = split;
            check(*jit, gemm_spec(DType::bf16, a, b), s, ++seed, t);
          }
    // Dropout after a split-K sum: the mask is the reference's, and a second
    // launch (the flags reset by the first) gives the same bytes.
    const KernelSpec spec = gemm_spec(DType::f16, Layout::row, Layout::row, 0.3);
    const Shape shape{192, 256, 768};
    const GemmTile t{128, 128, 32, 2, 2, 4, 8, 4};
    const LaunchArgs args{5, 9};
    const TensorMap inputs = make_inputs(spec, shape, 2600);
    const HostTensor want = evaluate(spec, shape, inputs, args).at("y");
    const HostTensor first = run_on_device(*jit, spec, shape, inputs, args, t).at("y");
    const HostTensor again = run_on_device(*jit, spec, shape, inputs, args, t).at("y");
    std::int64_t differ = 0;
    for (std::int64_t i = 0; i < want.numel(); ++i) differ += (want.get(i) == 0.0f) != (first.get(i) == 0.0f);
    CHECK(differ == 0);
    CHECK(first.bytes == again.bytes);
    const Comparison c = compare(first, want, gemm_tolerance(DType::f16, shape));
    CHECK_MESSAGE(c.ok, c.message);
  }

  TEST_CASE("gemm: misaligned operands take element loads and stay correct") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 3000;
    for (DType dt : {DType::bf16, DType::f32})
      for (Layout a : {Layout::row, Layout::col})
        for (std::size_t mis : {1u, 3u})
          check(*jit, gemm_spec(dt, a, Layout::col), {96, 128, 64}, ++seed, std::nullopt, mis);
  }

  TEST_CASE("gemm: several outputs, a column-broadcast input, scale and a cast") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    KernelSpec s;
    s.mainloop = {MainloopKind::gemm, DType::f16, DType::f16, Layout::row, Layout::col};
    Graph& g = s.graph;
    const Value z = g.add(g.accumulator(0), g.input("rowbias", DType::f16, Broadcast::col));
    const Value r = g.add(g.scale(g.gelu_tanh(z), 0.5), g.input("residual", DType::f32));
    g.output("pre", z, DType::f32);
    g.output("y", r, DType::f16);
    g.output("y16", g.cast(r, DType::bf16), DType::bf16);
    check(*jit, s, {77, 96, 40}, 4000);
    check(*jit, s, {77, 96, 40}, 4002, GemmTile{64, 64, 32, 2, 4, 4, 8});  // inputs loaded early (Note [Early loads])
    check(*jit, s, {256, 256, 256}, 4001);
  }

  TEST_CASE("gemm: dropout masks equal the reference's, element by element") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const LaunchArgs launches[] = {{0, 0}, {0x123456789abcdefULL, 42}};
    for (DType dt : {DType::f16, DType::f32})
    for (RngMode rng : {RngMode::philox4, RngMode::triton})
      for (const Shape& shape : {Shape{128, 256, 64}, Shape{65, 130, 33}, Shape{33, 131, 16}})  // n4 and n1
        for (const LaunchArgs& args : launches) {
          const KernelSpec spec = gemm_spec(dt, Layout::row, Layout::row, 0.3, rng);
          const TensorMap inputs = make_inputs(spec, shape, 5000);
          const HostTensor want = evaluate(spec, shape, inputs, args).at("y");
          const HostTensor got = run_on_device(*jit, spec, shape, inputs, args).at("y");
          // relu zeros are zeros in both; a dropped element is zero in both.
          std::int64_t differ = 0, dropped = 0;
          for (std::int64_t i = 0; i < want.numel(); ++i) {
            differ += (want.get(i) == 0.0f) != (got.get(i) == 0.0f);
            dropped += want.get(i) == 0.0f;
          }
          INFO("rng " << to_string(rng) << " shape " << shape.m << "x" << shape.n << "x" << shape.k);
          CHECK_MESSAGE(differ == 0, differ << " of " << want.numel() << " zero positions differ");
          CHECK(dropped > 0);
          const Comparison c = compare(got, want, gemm_tolerance(dt, shape));
          CHECK_MESSAGE(c.ok, c.message);
        }
  }

  TEST_CASE("gemm: a dropped NaN or inf is NaN, as in the reference") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    for (DType dt : {DType::f16, DType::f32})
      for (RngMode rng : {RngMode::philox4, RngMode::triton}) {
        testing::check_dropout_specials(*jit, dt, {65, 130, 33}, std::nullopt, rng);
        if (dt != DType::f32)  // f32 exact runs the SIMT tile; this one is mma.sync's
          testing::check_dropout_specials(*jit, dt, {128, 256, 64}, GemmTile{64, 64, 32, 2, 4, 4, 8}, rng);
      }
  }

  TEST_CASE("gemm: the dropout mask is the elementwise kernel's for the same seed, offset and stream") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const Shape shape{64, 128, 32};
    // GEMM then dropout alone (no bias): the mask of y equals the mask of an
    // elementwise dropout of a tensor of ones.
    KernelSpec gs;
    gs.mainloop = {MainloopKind::gemm, DType::f16, DType::f16, Layout::row, Layout::row};
    gs.graph.output("y", gs.graph.dropout(gs.graph.accumulator(0), 0.5), DType::f32);
    KernelSpec es;
    es.graph.output("y", es.graph.dropout(es.graph.input("x", DType::f32), 0.5), DType::f32);
    TensorMap ones{{"x", HostTensor::zeros(DType::f32, {shape.m, shape.n})}};
    for (std::int64_t i = 0; i < shape.m * shape.n; ++i) ones.at("x").set(i, 1.0f);
    const LaunchArgs args{99, 7};
    const HostTensor gy = run_on_device(*jit, gs, shape, make_inputs(gs, shape, 6000), args).at("y");
    const HostTensor ey = run_on_device(*jit, es, {shape.m, shape.n, 0}, ones, args).at("y");
    std::int64_t differ = 0;
    for (std::int64_t i = 0; i < gy.numel(); ++i) differ += (gy.get(i) == 0.0f) != (ey.get(i) == 0.0f);
    CHECK(differ == 0);
  }

  TEST_CASE("gemm: bad tiles are user errors") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const KernelSpec spec = gemm_spec(DType::f16, Layout::row, Layout::row);
    CHECK_THROWS_AS(jit->compile(spec, {64, 64, 64}, GemmTile{96, 128, 32, 2, 2, 4, 8}), UserError);
    CHECK_THROWS_AS(jit->compile(spec, {64, 64, 64}, GemmTile{256, 256, 64, 2, 4, 8, 8}), UserError);  // shared memory
    CHECK_THROWS_AS(jit->compile(spec, {64, 64, 64}, ElementwiseTile{}), UserError);
    CHECK_THROWS_AS(jit->compile(spec, {64, 64, 64}, GemmTile{64, 64, 32, 2, 2, 4, 8, 17}), UserError);  // split-K
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("gemm: 4096^3 checked on sampled rows against the reference") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    // A row of C = relu(A B + bias) needs only its row of A: the reference
    // evaluates [1, N, K] problems for a few rows (the whole product would
    // take the CPU minutes). No dropout here: its draws depend on the global
    // position, and masks are compared exactly in the tests above.
    const Shape shape{4096, 4096, 4096};
    const std::pair<DType, std::pair<Layout, Layout>> cases[] = {{DType::f16, {Layout::row, Layout::col}},
                                                                 {DType::bf16, {Layout::col, Layout::row}}};
    for (const auto& [dt, layouts] : cases) {
      const KernelSpec spec = gemm_spec(dt, layouts.first, layouts.second);
      const TensorMap inputs = make_inputs(spec, shape, 8000 + static_cast<int>(dt));
      const HostTensor y = run_on_device(*jit, spec, shape, inputs, {}).at("y");
      for (const std::int64_t r : {0LL, 1LL, 127LL, 128LL, 1237LL, 2048LL, 3333LL, 4095LL}) {
        TensorMap row = inputs;
        HostTensor a = HostTensor::zeros(dt, {1, shape.k});
        for (std::int64_t k = 0; k < shape.k; ++k) a.set(k, inputs.at("a").get(r * shape.k + k));
        row.insert_or_assign("a", std::move(a));
        const Shape one{1, shape.n, shape.k};
        const HostTensor want = evaluate(spec, one, row, {}).at("y");
        HostTensor got = HostTensor::zeros(dt, {1, shape.n});
        for (std::int64_t c = 0; c < shape.n; ++c) got.set(c, y.get(r * shape.n + c));
        INFO(to_string(dt) << " row " << r);
        const Comparison cmp = compare(got, want, gemm_tolerance(dt, one));
        CHECK_MESSAGE(cmp.ok, cmp.message);
      }
    }
  }

  TEST_CASE("gemm: K = 0 runs the epilogue on a zero accumulator, as PyTorch does") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const KernelSpec spec = gemm_spec(DType::f16, Layout::row, Layout::row);
    check(*jit, spec, {33, 70, 0}, 7000);
    const TensorMap inputs = make_inputs(spec, {33, 70, 0}, 7001);
    const HostTensor y = run_on_device(*jit, spec, {33, 70, 0}, inputs, {}).at("y");
    for (std::int64_t i = 0; i < y.numel(); ++i)  // relu(0 + bias)
      CHECK(y.get(i) == std::max(0.0f, inputs.at("bias").get(i % 70)));
  }

  TEST_CASE("gemm: M or N of 0 gives empty outputs and launches nothing") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const KernelSpec spec = gemm_spec(DType::f16, Layout::row, Layout::row);
    for (const Shape& s : {Shape{0, 64, 32}, Shape{64, 0, 32}}) {
      const HostTensor y = run_on_device(*jit, spec, s, make_inputs(spec, s, 7100), {}).at("y");
      CHECK(y.numel() == 0);
      // The API too: a compiled kernel launched on an empty shape returns at once.
      auto kernel = jit->compile(spec, s);
      DeviceBindings none;
      none.inputs.assign(kernel->source().inputs.size(), 0);
      none.outputs.assign(kernel->source().outputs.size(), 0);
      CHECK_NOTHROW(jit->launch(*kernel, none, s, {}));
    }
  }

  TEST_CASE("gemm: bench --variant times another source of the fused kernel and checks its output") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const KernelSpec spec = gemm_spec(DType::f16, Layout::row, Layout::row, 0.25);
    const Shape shape{256, 384, 192};
    BenchOptions bo;
    bo.repeats = 3;
    bo.tune = bo.unfused = bo.sweep = bo.cublas = false;
    // The same kernel with a comment in front: its own compile and row, the same output.
    bo.variants.push_back({"same.cu", "// a variant\n" + jit->compile(spec, shape)->source().text});
    const BenchReport r = bench(*jit, spec, shape, bo);
    REQUIRE(r.gemm.has_value());
    const auto& rows = r.gemm->rows;
    const auto row = std::find_if(rows.begin(), rows.end(), [](const GemmRow& g) { return g.key == "variant:same.cu"; });
    REQUIRE(row != rows.end());
    CHECK(row->ms > 0);
    const auto check = std::find_if(r.gemm->checks.begin(), r.gemm->checks.end(),
                                    [](const GemmCheck& c) { return c.what == "variant same.cu vs fused"; });
    REQUIRE(check != r.gemm->checks.end());
    CHECK(check->ok);
    CHECK(check->max_abs_diff == 0.0);  // the same code on the same inputs, dropout included
    CHECK(check->max_abs > 0);
    // A variant that stores nothing fails its check: the output is poisoned
    // before its first run, not left holding the fused kernel's result.
    std::string idle = jit->compile(spec, shape)->source().text;
    const std::size_t body = idle.find(") {\n", idle.find("extern \"C\" __global__"));
    REQUIRE(body != std::string::npos);
    idle.insert(body + 4, "  return;\n");
    bo.variants = {{"idle.cu", idle}};
    const BenchReport r1 = bench(*jit, spec, shape, bo);
    REQUIRE(r1.gemm.has_value());
    const auto idle_check = std::find_if(r1.gemm->checks.begin(), r1.gemm->checks.end(),
                                         [](const GemmCheck& c) { return c.what == "variant idle.cu vs fused"; });
    REQUIRE(idle_check != r1.gemm->checks.end());
    CHECK_FALSE(idle_check->ok);
    // A source of another kernel is a skipped row with the reason, not a fault.
    bo.variants = {{"other.cu", "extern \"C\" __global__ void other() {}"}};
    const BenchReport r2 = bench(*jit, spec, shape, bo);
    REQUIRE(r2.gemm.has_value());
    CHECK(std::none_of(r2.gemm->rows.begin(), r2.gemm->rows.end(), [](const GemmRow& g) { return g.key.starts_with("variant"); }));
    CHECK(std::any_of(r2.gemm->skipped.begin(), r2.gemm->skipped.end(),
                      [](const std::string& line) { return line.find("defines no kernel") != std::string::npos; }));
  }
}
