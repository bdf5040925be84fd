// GPU tier for the row family (docs/row-reductions.md): softmax, the
// attention pattern with dropout, RMSNorm after a residual add and LayerNorm
// against the reference evaluator on random non-zero data, every dtype and
// N from 1 to 262144 (rows in registers and streamed), every tile
// candidate, the persistent grid against one block per row (identical bits;
// the sweep is two cases, rows up to 20000 and longer, so that racecheck can
// take the first), misaligned pointers (the general path), rows of extreme
// values, and `bench --variant` on a row kernel. The backward specs are
// test_row_backward.cpp's. Without a GPU the suite prints one visible line
// and passes.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "bench/bench.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/compare.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/reference.hpp"
#include "gpu_jit.hpp"
#include "row_backward_specs.hpp"

using namespace epifuse;

namespace {

using testing::gpu_jit;

KernelSpec softmax_spec(DType dt) {
  KernelSpec s;
  s.graph.output("y", s.graph.softmax(s.graph.input("x", dt)), dt);
  return s;
}

// dropout(softmax(x * scale + mask)): the attention pattern.
KernelSpec attention_spec(DType dt, double p) {
  KernelSpec s;
  Graph& g = s.graph;
  const Value z = g.add(g.scale(g.input("x", dt), 0.125), g.input("mask", dt));
  g.output("y", g.dropout(g.softmax(z), p), dt);
  return s;
}

// rmsnorm(x + residual, weight), the sum also an output.
KernelSpec add_rmsnorm_spec(DType dt) {
  KernelSpec s;
  Graph& g = s.graph;
  const Value h = g.add(g.input("x", dt), g.input("residual", dt));
  g.output("h", h, dt);
  g.output("y", g.rmsnorm(h, g.input("weight", dt, Broadcast::row), 1e-6), dt);
  return s;
}

KernelSpec layernorm_spec(DType dt) {
  KernelSpec s;
  Graph& g = s.graph;
  g.output("y",
           g.layernorm(g.input("x", dt), g.input("weight", dt, Broadcast::row), g.input("bias", dt, Broadcast::row), 1e-5),
           dt);
  return s;
}

void check(Jit& jit, const KernelSpec& spec, const Shape& shape, std::uint64_t seed,
           std::optional<TileConfig> tile = std::nullopt, std::size_t misalign = 0, TensorMap given = {}) {
  const TensorMap inputs = make_inputs(spec, shape, seed, std::move(given));
  const TensorMap want = evaluate(spec, shape, inputs, {});
  const TensorMap got = run_on_device(jit, spec, shape, inputs, {}, tile, misalign);
  for (const Output& o : spec.graph.outputs()) {
    const Comparison c = compare(got.at(o.name), want.at(o.name), tolerance_for(o.dtype, spec.precision));
    INFO("output " << o.name << " " << to_string(o.dtype) << " shape " << shape.m << "x" << shape.n << " tile "
                   << (tile ? to_string(*tile) : "default") << " misalign " << misalign);
    CHECK_MESSAGE(c.ok, c.message);
  }
}

using testing::same_bits;

// Every tile candidate at row length n, and the persistent grid, streaming,
// clusters and rings against one block per row, bit for bit.
void tile_sweep(Jit& jit, std::int64_t n, std::uint64_t& seed) {
  const KernelSpec spec = attention_spec(DType::bf16, 0.1);
  // 41 rows: the last block of a group tile has idle groups.
  const Shape shape{n > 20000 ? 13 : 41, n, 0};
  for (const TileConfig& t : tile_candidates(spec, shape, jit.target())) check(jit, spec, shape, ++seed, t);
  const TensorMap inputs = make_inputs(spec, shape, ++seed);
  auto y = [&](RowTile t) { return run_on_device(jit, spec, shape, inputs, {}, t).at("y"); };
  const HostTensor a = y(RowTile{256, 0, -1, 1});
  CHECK(same_bits(a, y(RowTile{256, 0, -1, 0})));
  CHECK(same_bits(a, y(RowTile{256, 0, 0, 1})));  // streaming reduces in the same order as registers
  if (n <= 4096) {
    const HostTensor g = y(RowTile{256, 0, -1, 1, 32, 1});
    CHECK(same_bits(g, y(RowTile{256, 0, -1, 0, 32, 1})));
  }
  if (jit.target().starts_with("sm_9") || jit.target().starts_with("sm_1")) {
    const int c = n > 20000 ? 8 : 2;
    const HostTensor cl = y(RowTile{512, 0, -1, 1, 0, c});
    CHECK(same_bits(cl, y(RowTile{512, 0, -1, 0, 0, c})));
    CHECK(same_bits(cl, y(RowTile{512, 0, 0, 1, 0, c})));  // a streaming cluster too
  }
  if (jit.target().starts_with("sm_9") && n <= 20000) {
    // A shared-memory ring: three rows deep, each block a contiguous part of the row
    // (N = 1000 does not split into whole vectors for two blocks: one block then).
    const RowTile ring{256, 0, -1, 1, 0, n % 16 == 0 ? 2 : 1, 3};
    check(jit, spec, shape, ++seed, ring);
    const HostTensor rg = y(ring);
    RowTile ring_per_row = ring;
    ring_per_row.persistent = 0;
    CHECK(same_bits(rg, y(ring_per_row)));
  }
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("row family: softmax matches the reference for every dtype and row length") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 7000;
    for (DType dt : {DType::f32, DType::bf16, DType::f16})
      for (std::int64_t n : {1, 7, 128, 1000, 4096, 65536, 262144}) {
        const std::int64_t m = n >= 65536 ? 3 : 37;
        const KernelSpec spec = softmax_spec(dt);
        check(*jit, spec, {m, n, 0}, ++seed);
        // At large N each value (~1/N) is below the comparison's absolute
        // tolerance; every row summing to 1 catches a reduction that missed
        // part of the row.
        const Shape shape{m, n, 0};
        const TensorMap y = run_on_device(*jit, spec, shape, make_inputs(spec, shape, seed), {});
        for (std::int64_t r = 0; r < m; ++r) {
          double sum = 0;
          for (std::int64_t c = 0; c < n; ++c) sum += y.at("y").get(r * n + c);
          INFO(to_string(dt) << " N " << n << " row " << r);
          CHECK(std::abs(sum - 1.0) < 0.02);
        }
      }
  }

  // Two cases, so that compute-sanitizer's racecheck can take the short rows in one
  // process (tools/sanitize_suite.sh): the long ones run for minutes under it.
  TEST_CASE("row family: every tile candidate, the persistent grid bit-equal to one block per row (N <= 20000)") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 7100;
    for (std::int64_t n : {1000, 4096, 20000}) tile_sweep(*jit, n, seed);
  }

  TEST_CASE("row family: every tile candidate, the persistent grid bit-equal to one block per row (long rows)") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 7200;
    for (std::int64_t n : {65536, 262144}) tile_sweep(*jit, n, seed);
  }

  TEST_CASE("row family: attention softmax with dropout, masks equal the reference's") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 7200;
    for (DType dt : {DType::f32, DType::bf16})
      for (std::int64_t n : {7, 128, 1000, 4096, 65536}) {
        const KernelSpec spec = attention_spec(dt, 0.2);
        const Shape shape{n >= 65536 ? 3 : 19, n, 0};
        const TensorMap inputs = make_inputs(spec, shape, ++seed);
        const TensorMap want = evaluate(spec, shape, inputs, {});
        const TensorMap got = run_on_device(*jit, spec, shape, inputs, {});
        std::int64_t differ = 0;
        for (std::int64_t i = 0; i < got.at("y").numel(); ++i)
          differ += (got.at("y").get(i) == 0.0f) != (want.at("y").get(i) == 0.0f);
        INFO(to_string(dt) << " N " << n);
        CHECK(differ == 0);
        check(*jit, spec, shape, seed);
      }
  }

  TEST_CASE("row family: dropouts before and after the reduction on ring tiles, bits decided during the copy" * doctest::test_suite("gpu_sm90")) {
    // Note [Draws during the copy]: a ring tile decides philox4 keep bits before
    // it waits for the row; two streams, one in the first stage and one in the
    // last, and a triton-mode dropout (which draws in its stage) beside them.
    Jit* jit = gpu_jit();
    if (!jit || !jit->target().starts_with("sm_9")) return;
    std::uint64_t seed = 7250;
    for (RngMode last : {RngMode::philox4, RngMode::triton}) {
      KernelSpec spec;
      Graph& g = spec.graph;
      const Value z = g.add(g.dropout(g.input("x", DType::bf16), 0.2), g.input("mask", DType::bf16));
      g.output("y", g.dropout(g.softmax(z), 0.1, last), DType::bf16);
      const Shape shape{19, 4096, 0};
      for (const RowTile& t : {RowTile{256, 8, 2, 0, 0, 1, 1, 2}, RowTile{256, 8, 2, 0, 0, 1, 1, 1},
                               RowTile{128, 8, 2, 1, 0, 2, 2, 1}, RowTile{128, 8, 2, 1, 0, 2, 2, 2}}) {
        const TensorMap inputs = make_inputs(spec, shape, ++seed);
        const TensorMap want = evaluate(spec, shape, inputs, {});
        const TensorMap got = run_on_device(*jit, spec, shape, inputs, {}, t);
        std::int64_t differ = 0;
        for (std::int64_t i = 0; i < got.at("y").numel(); ++i)
          differ += (got.at("y").get(i) == 0.0f) != (want.at("y").get(i) == 0.0f);
        INFO("tile " << t.str() << " last dropout " << to_string(last));
        CHECK(differ == 0);
        check(*jit, spec, shape, seed, t);
      }
    }
  }

  TEST_CASE("row family: a dropped NaN or inf is NaN, as in the reference, with bits decided during the copy too") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    // h = dropout(x + residual) is an output beside rmsnorm(h): its dropped
    // NaN and inf positions are NaN (x * mask * scale), never 0.
    KernelSpec spec;
    Graph& g = spec.graph;
    const Value h = g.dropout(g.add(g.input("x", DType::bf16), g.input("residual", DType::bf16)), 0.3);
    g.output("h", h, DType::bf16);
    g.output("y", g.rmsnorm(h, g.input("weight", DType::bf16, Broadcast::row), 1e-6), DType::bf16);
    const Shape shape{19, 4096, 0};
    std::vector<std::optional<TileConfig>> tiles{std::nullopt};
    if (jit->target().starts_with("sm_9")) tiles.push_back(RowTile{256, 8, 2, 0, 0, 1, 1, 2});  // early draws
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY};
    for (const auto& t : tiles) {
      TensorMap inputs = make_inputs(spec, shape, 7290);
      HostTensor& x = inputs.at("x");
      for (std::int64_t i = 0; i < 4 * shape.n; i += 7) x.set(i, specials[(i / 7) % 3]);  // rows 0-3
      const LaunchArgs args{0x5EEDull, 11};
      const TensorMap want = evaluate(spec, shape, inputs, args);
      const TensorMap got = run_on_device(*jit, spec, shape, inputs, args, t);
      std::int64_t differ = 0, dropped_inf = 0;
      for (std::int64_t i = 0; i < want.at("h").numel(); ++i) {
        const float w = want.at("h").get(i), o = got.at("h").get(i);
        differ += std::isnan(w) != std::isnan(o) || (!std::isnan(w) && w != o);
        dropped_inf += std::isnan(w) && std::isinf(x.get(i));
      }
      INFO("tile " << (t ? to_string(*t) : "default"));
      CHECK_MESSAGE(differ == 0, differ << " elements of h differ");
      CHECK(dropped_inf > 0);
      const Comparison c = compare(got.at("y"), want.at("y"), tolerance_for(DType::bf16, spec.precision));
      CHECK_MESSAGE(c.ok, c.message);
    }
  }

  TEST_CASE("row family: rmsnorm after a residual add, and layernorm") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 7300;
    for (DType dt : {DType::f32, DType::bf16, DType::f16})
      for (std::int64_t n : {1, 7, 1000, 4096, 65536}) {
        const Shape shape{n >= 65536 ? 3 : 23, n, 0};
        check(*jit, add_rmsnorm_spec(dt), shape, ++seed);
        check(*jit, layernorm_spec(dt), shape, ++seed);
      }
  }

  TEST_CASE("row family: misaligned pointers take the general path") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    for (std::size_t mis : {1u, 3u}) {
      check(*jit, softmax_spec(DType::bf16), {9, 4096, 0}, 7400 + mis, std::nullopt, mis);
      check(*jit, add_rmsnorm_spec(DType::f16), {9, 1024, 0}, 7410 + mis, std::nullopt, mis);
      if (jit->target().starts_with("sm_9"))  // a ring tile's general path streams the row
        check(*jit, add_rmsnorm_spec(DType::bf16), {9, 4096, 0}, 7420 + mis, RowTile{256, 0, -1, 1, 0, 2, 2}, mis);
    }
  }

  TEST_CASE("row family: rows of large magnitudes, all -inf and NaN") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const KernelSpec spec = softmax_spec(DType::f32);
    const Shape shape{4, 1000, 0};
    HostTensor x = HostTensor::zeros(DType::f32, {shape.m, shape.n});
    const float inf = std::numeric_limits<float>::infinity();
    for (std::int64_t c = 0; c < shape.n; ++c) {
      x.set(c, c % 2 ? 1e4f : -1e4f);                                   // row 0: +-1e4
      x.set(shape.n + c, -inf);                                          // row 1: all -inf -> NaN
      x.set(2 * shape.n + c, c == 500 ? std::nanf("") : 0.001f * c);     // row 2: one NaN -> NaN
      x.set(3 * shape.n + c, c == 999 ? inf : 1.0f);                     // row 3: +inf -> NaN where inf - inf
    }
    TensorMap given;
    given.emplace("x", x);
    check(*jit, spec, shape, 7500, std::nullopt, 0, given);
  }

  TEST_CASE("row family: a quotient by a row sum, normal and below FLT_MIN") {
    // The kernel multiplies by the reciprocal of a per-row divisor; a divisor
    // whose reciprocal overflows (below FLT_MIN) must still divide.
    Jit* jit = gpu_jit();
    if (!jit) return;
    KernelSpec spec;
    const Value x = spec.graph.input("x", DType::f32);
    spec.graph.output("y", spec.graph.div(x, spec.graph.row_sum(x)), DType::f32);
    const Shape shape{3, 64, 0};
    HostTensor in = HostTensor::zeros(DType::f32, {shape.m, shape.n});
    for (std::int64_t c = 0; c < shape.n; ++c) {
      in.set(c, 1.0f + 0.01f * c);                           // row 0: normal
      in.set(shape.n + c, 1e-44f * (1 + c % 3));             // row 1: denormal sum (~1.3e-42)
      in.set(2 * shape.n + c, c % 2 ? 3e-39f : 1e-45f);      // row 2: sum ~1e-37, above FLT_MIN
    }
    TensorMap given;
    given.emplace("x", in);
    std::vector<RowTile> tiles{RowTile{64, 0, -1, 0}, RowTile{256, 0, -1, 1, 32, 1}, RowTile{64, 0, 0, 1}};
    if (jit->target().starts_with("sm_9")) tiles.push_back(RowTile{32, 0, -1, 1, 0, 2, 2});  // a ring over a cluster
    for (const RowTile& t : tiles) {
      check(*jit, spec, shape, 7600, t, 0, given);
      const TensorMap y = run_on_device(*jit, spec, shape, given, {}, t);
      for (std::int64_t r = 0; r < shape.m; ++r) {
        double sum = 0;
        for (std::int64_t c = 0; c < shape.n; ++c) sum += y.at("y").get(r * shape.n + c);
        INFO("row " << r << " tile " << t.str());
        CHECK(std::abs(sum - 1.0) < 1e-4);  // finite, and a quotient: each row sums to 1
      }
    }
  }

  TEST_CASE("row family: a quotient by a per-row input, normal and below FLT_MIN, with and without draws") {
    // The attention backward's softmax read back from the forward's sum: the
    // kernel multiplies by the input's reciprocal, and a divisor whose
    // reciprocal overflows must still divide; the row's choice is made once
    // a row where the stage draws dropout.
    Jit* jit = gpu_jit();
    if (!jit) return;
    const Shape shape{4, 64, 0};
    HostTensor x = HostTensor::zeros(DType::f32, {shape.m, shape.n});
    HostTensor dy = HostTensor::zeros(DType::f32, {shape.m, shape.n});
    HostTensor s = HostTensor::zeros(DType::f32, {shape.m});
    const float sums[] = {37.5f, 1.3e-42f, 1.1e-37f, 2.5e-38f};
    for (std::int64_t r = 0; r < shape.m; ++r) {
      s.set(r, sums[r]);
      for (std::int64_t c = 0; c < shape.n; ++c) {
        const float scale = sums[r] / shape.n;
        x.set(r * shape.n + c, c % 5 == 0 ? 0.0f : scale * (0.5f + 0.02f * c));  // zeros: masked entries
        dy.set(r * shape.n + c, 0.25f - 0.01f * c);
      }
    }
    for (const bool draws : {false, true}) {
      KernelSpec spec;
      Graph& g = spec.graph;
      const Value xi = g.input("x", DType::f32);
      const Value sum = g.input("saved_sum", DType::f32, Broadcast::col);
      const Value dyi = g.input("dy", DType::f32);
      const Value y = g.div(xi, sum);
      const Value d = draws ? g.dropout(dyi, 0.25) : dyi;
      g.output("dx", g.mul(y, g.sub(d, g.row_sum(g.mul(d, y)))), DType::f32);
      g.output("y", y, DType::f32);
      TensorMap given;
      given.emplace("x", x);
      given.emplace("dy", dy);
      given.emplace("saved_sum", s);
      std::vector<RowTile> tiles{RowTile{64, 0, -1, 0}, RowTile{256, 0, -1, 1, 32, 1}, RowTile{64, 0, 0, 1}};
      if (jit->target().starts_with("sm_9")) tiles.push_back(RowTile{32, 0, -1, 1, 0, 2, 2});
      for (const RowTile& t : tiles) {
        INFO("draws " << draws << " tile " << t.str());
        check(*jit, spec, shape, 7700, t, 0, given);
        const TensorMap out = run_on_device(*jit, spec, shape, given, {}, t);
        for (std::int64_t i = 0; i < shape.m * shape.n; ++i) {
          const float want = x.get(i) / s.get(i / shape.n);
          CHECK(std::abs(out.at("y").get(i) - want) <= 2e-7f * std::abs(want));  // within a rounding
        }
      }
    }
  }

  TEST_CASE("row family: bad row tiles and GEMM reductions are user errors") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const KernelSpec spec = softmax_spec(DType::bf16);
    CHECK_THROWS_AS(jit->compile(spec, {4, 128, 0}, ElementwiseTile{}), UserError);
    CHECK_THROWS_AS(jit->compile(spec, {4, 128, 0}, RowTile{100, 0, -1, 1}), UserError);
    CHECK_THROWS_AS(jit->compile(spec, {4, 128, 0}, RowTile{256, 3, -1, 1}), UserError);
    KernelSpec gemm;
    gemm.mainloop.kind = MainloopKind::gemm;
    gemm.graph.output("y", gemm.graph.softmax(gemm.graph.accumulator()), DType::f16);
    CHECK_THROWS_AS(jit->compile(gemm, {64, 64, 64}), UserError);
  }
  TEST_CASE("row family: bench --variant times another source of the kernel and checks every output") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const KernelSpec spec = testing::layernorm_backward_spec(DType::f32);  // dx, and the column sums dw and db
    const Shape shape{64, 4096, 0};
    BenchOptions bo;
    bo.repeats = 3;
    bo.tune = bo.unfused = bo.sweep = false;
    const std::string text = jit->compile(spec, shape)->source().text;
    // The same kernel with a comment in front, and asking for more shared
    // memory than it uses: its own compile and row, the same bits in every output.
    bo.variants.push_back({"same.cu", "// epifuse-variant: shared_bytes=65536\n" + text});
    std::string idle = text;  // stores nothing: the poisoned outputs fail its check
    const std::size_t body = idle.find(") {\n", idle.find("extern \"C\" __global__"));
    REQUIRE(body != std::string::npos);
    idle.insert(body + 4, "  return;\n");
    bo.variants.push_back({"idle.cu", idle});
    bo.variants.push_back({"other.cu", "extern \"C\" __global__ void other() {}"});
    const BenchReport r = bench(*jit, spec, shape, bo);
    REQUIRE(r.variants.size() == 3);
    const VariantRow& same = r.variants[0];
    CHECK(same.skipped.empty());
    CHECK(same.ms > 0);
    CHECK(same.fused_ms > 0);
    CHECK(same.of_copy > 0);
    CHECK(same.ok);
    CHECK(same.max_abs_diff == 0.0);
    CHECK(same.max_abs > 0);
    CHECK(r.variants[1].skipped.empty());
    CHECK_FALSE(r.variants[1].ok);
    CHECK(r.variants[2].skipped.find("defines no kernel") != std::string::npos);
  }
}
