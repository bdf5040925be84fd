// GPU tier for generated elementwise kernels (docs/design.md §8): every op, dtype and
// broadcast kind against the reference evaluator on random non-zero data,
// shapes that break assumptions, misaligned pointers, poisoned outputs (set
// by run_on_device), and dropout masks equal bit for bit in both RNG modes.
// Without a GPU the suite prints one visible line and passes.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <memory>

#include "codegen/elementwise/elementwise.hpp"
#include "epifuse/codegen.hpp"
#include "ir/op_table.hpp"
#include "epifuse/compare.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/reference.hpp"
#include "column_sum_checks.hpp"
#include "test_specs.hpp"
#include "gpu_jit.hpp"

using namespace epifuse;

namespace {

using testing::gpu_jit;

// Runs spec on the GPU and the reference; checks every output.
void check_against_reference(Jit& jit, const KernelSpec& spec, const Shape& shape, std::uint64_t data_seed,
                             LaunchArgs args = {}, std::optional<TileConfig> tile = std::nullopt,
                             std::size_t misalign = 0) {
  const TensorMap inputs = make_inputs(spec, shape, data_seed);
  const TensorMap want = evaluate(spec, shape, inputs, args);
  const TensorMap got = run_on_device(jit, spec, shape, inputs, args, tile, misalign);
  for (const Output& o : spec.graph.outputs()) {
    const Comparison c = compare(got.at(o.name), want.at(o.name), tolerance_for(o.dtype, spec.precision));
    INFO("output " << o.name << " shape " << shape.m << "x" << shape.n << " tile " << (tile ? to_string(*tile) : "default")
                   << " misalign " << misalign);
    CHECK_MESSAGE(c.ok, c.message);
  }
}

// A single dropout of x, so a zero output means exactly "dropped".
KernelSpec dropout_only(DType dt, double p, RngMode rng, int extra_streams = 0) {
  KernelSpec s;
  Value x = s.graph.input("x", dt);
  Value v = x;
  for (int i = 0; i < extra_streams; ++i) s.graph.output("d" + std::to_string(i), s.graph.dropout(x, 0.5, rng), dt);
  v = s.graph.dropout(v, p, rng);
  s.graph.output("y", v, dt);
  return s;
}

// dx = dropout(dy, p, stream 0) * gelu_tanh_deriv(h), dbias = col_sum(dx),
// dres = dy: the backward of bias + GELU-tanh + dropout + residual.
KernelSpec bias_gelu_dropout_add_backward(DType dt, DType dbias_dt, double p = 0.1) {
  KernelSpec s;
  Graph& g = s.graph;
  Value dy = g.input("dy", dt);
  Value h = g.input("h", dt);
  Value dact = g.mul(g.dropout(dy, p, RngMode::philox4, 0), g.unary(OpKind::gelu_tanh_deriv, h));
  g.output("dx", dact, dt);
  g.output("dbias", g.col_sum(dact), dbias_dt);
  g.output("dres", dy, dt);
  return s;
}

using testing::check_column_sum;
using testing::column_terms;
using testing::is_column_sum;

// Runs a spec with column sums on the GPU and the reference. Full outputs as
// check_against_reference does; an [N] output within check_column_sum's
// bound (column_sum_checks.hpp), a term's error that of an f32 output.
// Returns what the GPU wrote.
TensorMap check_column_sums(Jit& jit, const KernelSpec& spec, const Shape& shape, std::uint64_t data_seed,
                            LaunchArgs args = {}, std::optional<TileConfig> tile = std::nullopt,
                            std::size_t misalign = 0) {
  const TensorMap inputs = make_inputs(spec, shape, data_seed);
  const TensorMap want = evaluate(spec, shape, inputs, args);
  TensorMap got = run_on_device(jit, spec, shape, inputs, args, tile, misalign);
  const KernelSpec terms_spec = column_terms(spec);
  const TensorMap terms = evaluate(terms_spec, shape, inputs, args);
  for (const Output& o : spec.graph.outputs()) {
    INFO("output " << o.name << " shape " << shape.m << "x" << shape.n << " tile "
                   << (tile ? to_string(*tile) : "default") << " misalign " << misalign);
    const HostTensor& g = got.at(o.name);
    const HostTensor& w = want.at(o.name);
    if (!is_column_sum(spec.graph, o.value)) {
      const Comparison c = compare(g, w, tolerance_for(o.dtype, spec.precision));
      CHECK_MESSAGE(c.ok, c.message);
      continue;
    }
    // Each term is as exact as an f32 output (its absolute part, for terms
    // near a zero of their function: gelu_tanh_deriv's cancels near -0.75).
    check_column_sum(g, w, terms.at(o.name), o.dtype, shape, tolerance_for(DType::f32, spec.precision).atol);
  }
  return got;
}

using testing::same_bits;

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("every op, dtype and broadcast kind matches the reference") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 1;
    for (const auto& [name, spec] : test_specs::coverage()) {
      INFO(name);
      for (const Shape& shape : {Shape{37, 129, 0}, Shape{64, 256, 0}}) check_against_reference(*jit, spec, shape, ++seed);
    }
  }

  TEST_CASE("the derivatives' fast forms: the tails, the zero crossing and the specials, against the reference") {
    // A 16-bit output takes sigmoid', silu', tanh' and gelu_tanh''s ex2/rcp
    // forms (plan_precision); an f32 input holds the exact special values.
    Jit* jit = gpu_jit();
    if (!jit) return;
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> xs = {0.0f,   -0.0f,  1e-30f, -1e-30f, 0.5f,    -0.5f,  -0.7518f, -0.75f, 1.0f,
                                   -1.0f,  2.0f,   -2.0f,  -4.0f,   -9.0f,   9.0f,   -17.0f,   17.0f,  -40.0f,
                                   40.0f,  -90.0f, 90.0f,  -1e4f,   1e4f,    -1e5f,  1e5f,     -3e38f, 3e38f,
                                   inf,    -inf,   std::numeric_limits<float>::quiet_NaN()};
    const Shape shape{1, static_cast<std::int64_t>(xs.size()), 0};
    HostTensor x = HostTensor::zeros(DType::f32, {shape.m, shape.n});
    for (std::size_t i = 0; i < xs.size(); ++i) x.set(static_cast<std::int64_t>(i), xs[i]);
    for (OpKind op : {OpKind::gelu_tanh_deriv, OpKind::sigmoid_deriv, OpKind::silu_deriv, OpKind::tanh_deriv})
      for (DType out : {DType::f16, DType::bf16}) {
        KernelSpec spec;
        spec.graph.output("y", spec.graph.unary(op, spec.graph.input("x", DType::f32)), out);
        CHECK(emit_kernel(spec, shape, std::nullopt, KernelPath::fastest, jit->target()).text.find("_deriv_fast(") !=
              std::string::npos);
        TensorMap given;
        given.emplace("x", x);
        const TensorMap want = evaluate(spec, shape, given, {});
        const TensorMap got = run_on_device(*jit, spec, shape, given, {});
        const Comparison c = compare(got.at("y"), want.at("y"), tolerance_for(out, spec.precision));
        INFO(op_info(op).name << " -> " << to_string(out));
        CHECK_MESSAGE(c.ok, c.message);
      }
  }

  TEST_CASE("shapes that break assumptions") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    // M = 1, N = 1, N below and not a multiple of the vector width, a tensor
    // just over one block's worth of vectors, and odd sizes everywhere.
    const Shape shapes[] = {{1, 1, 0},   {1, 7, 0},    {7, 1, 0},    {1, 1025, 0}, {3, 5, 0},
                            {256, 4, 0}, {1, 2049, 0}, {33, 67, 0},  {2, 8193, 0}};
    std::uint64_t seed = 100;
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (const Shape& shape : shapes) {
        INFO("dtype " << to_string(dt));
        check_against_reference(*jit, test_specs::bias_gelu_dropout_add(dt), shape, ++seed, {7, 3});
        check_against_reference(*jit, test_specs::add_mul(dt), shape, ++seed);
      }
  }

  TEST_CASE("the 64-bit index path matches the reference") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    force_index64_for_tests(true);
    std::uint64_t seed = 150;
    for (DType dt : {DType::f32, DType::bf16})
      for (const Shape& shape : {Shape{1, 7, 0}, Shape{33, 67, 0}, Shape{64, 256, 0}}) {
        check_against_reference(*jit, test_specs::bias_gelu_dropout_add(dt), shape, ++seed, {9, 1});
        auto kernel = jit->compile(test_specs::bias_gelu_dropout_add(dt), shape);
        CHECK(kernel->key().shape_class.find("/i64") != std::string::npos);
      }
    force_index64_for_tests(false);
  }

  TEST_CASE("misaligned base pointers take the scalar path and stay correct") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 200;
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (std::size_t misalign : {1u, 2u, 3u}) {
        check_against_reference(*jit, test_specs::bias_gelu_dropout_add(dt), {19, 64, 0}, ++seed, {5, 0}, {},
                                misalign);
        check_against_reference(*jit, test_specs::add_mul(dt), {1, 1001, 0}, ++seed, {}, {}, misalign);
      }
  }

  TEST_CASE("a misaligned launch of a vector-only kernel compiles the general kernel once") {
    if (!gpu_jit()) return;
    Jit jit;  // a cache of its own, so the counts are exact
    const KernelSpec spec = test_specs::bias_gelu_dropout_add(DType::bf16);
    const Shape shape{8, 256, 0};
    auto kernel = jit.compile(spec, shape);
    CHECK(kernel->source().requires_alignment);
    CHECK(jit.stats().compiles == 1);
    check_against_reference(jit, spec, shape, 300, {3, 0}, {}, 0);  // aligned: no new kernel
    CHECK(jit.stats().compiles == 1);
    check_against_reference(jit, spec, shape, 301, {3, 0}, {}, 1);  // the general kernel, compiled now
    CHECK(jit.stats().compiles == 2);
    check_against_reference(jit, spec, shape, 302, {3, 0}, {}, 3);  // and found in the cache
    CHECK(jit.stats().compiles == 2);
    int vector = 0, general = 0;
    for (const CacheKey& k : jit.cached_keys()) (k.path == KernelPath::fastest ? vector : general)++;
    CHECK(vector == 1);
    CHECK(general == 1);
  }

  TEST_CASE("every tile candidate computes the same result") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const KernelSpec spec = test_specs::bias_gelu_dropout_add(DType::bf16);
    const Shape shape{96, 1000, 0};
    for (const TileConfig& tile : tile_candidates(spec, shape, jit->target())) check_against_reference(*jit, spec, shape, 300, {11, 4}, tile);
  }

  TEST_CASE("the default tile of a 16-bit dropout chain gives one 16-byte vector's bits on any GPU") {
    // Note [Two vectors a thread]: from 4 blocks of 256 x 16 elements an SM
    // on GPUs that feed each SM 16 bytes a clock or more (an H200), the default
    // tile moves two 16-byte vectors a thread; elementwise results do not
    // depend on the width, so its outputs must equal t256v8g0's bit for bit.
    Jit* jit = gpu_jit();
    if (!jit) return;
    for (DType dt : {DType::bf16, DType::f16}) {
      const KernelSpec spec = test_specs::bias_gelu_dropout_add(dt);
      for (const Shape& shape : {Shape{4096, 2112, 0}, Shape{16384, 1024, 0}}) {
        INFO("dtype " << to_string(dt) << " shape " << shape.m << "x" << shape.n << " default tile "
                      << to_string(jit->compile(spec, shape)->source().tile));
        const TensorMap inputs = make_inputs(spec, shape, 350);
        const LaunchArgs args{0x5eed, 17};
        const TensorMap want = evaluate(spec, shape, inputs, args);
        const TensorMap got = run_on_device(*jit, spec, shape, inputs, args);
        const TensorMap one = run_on_device(*jit, spec, shape, inputs, args, ElementwiseTile{256, 8, 0});
        const Comparison c = compare(got.at("y"), want.at("y"), tolerance_for(dt, spec.precision));
        CHECK_MESSAGE(c.ok, c.message);
        std::int64_t differ = 0;
        for (std::int64_t i = 0; i < one.at("y").numel(); ++i) differ += got.at("y").get(i) != one.at("y").get(i);
        CHECK(differ == 0);
      }
    }
  }

  TEST_CASE("dropout masks equal the reference bit for bit in both RNG modes") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const LaunchArgs launches[] = {{0, 0}, {0x123456789abcdefULL, 42}, {7, (1ULL << 32) - 5}};
    for (RngMode rng : {RngMode::philox4, RngMode::triton})
      for (DType dt : {DType::f32, DType::f16, DType::bf16})
        for (double p : {0.0, 0.1, 0.5, 0.9, 1.0})
          for (const LaunchArgs& args : launches)
            for (const Shape& shape : {Shape{13, 77, 0}, Shape{128, 512, 0}}) {
              INFO("rng " << to_string(rng) << " dtype " << to_string(dt) << " p " << p << " seed " << args.seed
                          << " offset " << args.offset);
              const KernelSpec spec = dropout_only(dt, p, rng, p == 0.1 ? 2 : 0);  // streams 0..2
              const TensorMap inputs = make_inputs(spec, shape, 400);
              const TensorMap want = evaluate(spec, shape, inputs, args);
              const TensorMap got = run_on_device(*jit, spec, shape, inputs, args);
              for (const auto& [name, w] : want) {
                const HostTensor& g = got.at(name);
                std::int64_t differ = 0, kept = 0;
                for (std::int64_t i = 0; i < w.numel(); ++i) {
                  // Bit for bit: the same mask and the same kept value.
                  differ += g.get(i) != w.get(i);
                  kept += w.get(i) != 0.0f;
                }
                CHECK_MESSAGE(differ == 0, name << ": " << differ << " elements differ");
                if (p == 0.0) CHECK(kept == w.numel());
                if (p == 1.0) CHECK(kept == 0);
              }
            }
  }

  TEST_CASE("dropout at the ends of the probability range: the GPU mask equals the reference exactly") {
    // p within 2^-25 of 1 made thr = 2^24, whose `<< 8` wrapped to 0 in the
    // kernel: every element kept and scaled by 1e8 where the reference drops all.
    Jit* jit = gpu_jit();
    if (!jit) return;
    const Shape shape{64, 1024, 0};
    for (RngMode rng : {RngMode::philox4, RngMode::triton})
      for (DType dt : {DType::f32, DType::bf16})
        for (double p : {0x1p-33, 1e-7, 0x1p-24, 1 - 0x1p-24, 1 - 0x1p-25, 0.99999999}) {
          INFO("rng " << to_string(rng) << " dtype " << to_string(dt) << " p " << p);
          const KernelSpec spec = dropout_only(dt, p, rng);
          const TensorMap inputs = make_inputs(spec, shape, 500);
          const LaunchArgs args{0xFEEDull, 77};
          const HostTensor want = evaluate(spec, shape, inputs, args).at("y");
          const HostTensor got = run_on_device(*jit, spec, shape, inputs, args).at("y");
          std::int64_t differ = 0, kept = 0;
          for (std::int64_t i = 0; i < want.numel(); ++i) {
            differ += got.get(i) != want.get(i);
            kept += want.get(i) != 0.0f;
          }
          CHECK_MESSAGE(differ == 0, differ << " elements differ (reference keeps " << kept << ")");
        }
  }

  TEST_CASE("dropout multiplies by its mask: dropped NaN and inf give NaN on the GPU as in the reference") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY, -2.5f};
    const Shape shape{16, 256, 0};
    for (RngMode rng : {RngMode::philox4, RngMode::triton})
      for (DType dt : {DType::f32, DType::f16, DType::bf16})
        for (double p : {0.5, 1.0}) {  // masked, and drop_all (no draws)
          const KernelSpec spec = dropout_only(dt, p, rng);
          HostTensor x = HostTensor::zeros(dt, {shape.m, shape.n});
          for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, specials[i % std::size(specials)]);
          const TensorMap inputs{{"x", x}};
          const LaunchArgs args{0xD20Full, 5};
          const HostTensor want = evaluate(spec, shape, inputs, args).at("y");
          const HostTensor got = run_on_device(*jit, spec, shape, inputs, args).at("y");
          std::int64_t differ = 0, nan_dropped = 0;
          for (std::int64_t i = 0; i < want.numel(); ++i) {
            const float w = want.get(i), g = got.get(i);
            const bool same = std::isnan(w) ? std::isnan(g) : (w == g && std::signbit(w) == std::signbit(g));
            differ += !same;
            nan_dropped += std::isnan(w) && !std::isnan(x.get(i));  // a dropped inf
          }
          INFO("rng " << to_string(rng) << " dtype " << to_string(dt) << " p " << p);
          CHECK_MESSAGE(differ == 0, differ << " elements differ");
          CHECK(nan_dropped > 0);
        }
  }

  TEST_CASE("NaN and infinities flow through activations as in the reference") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY, -3.0f, -1.0f,
                              0.0f, 0.5f, 1.0f, 3.0f, -10.0f, 10.0f, 1e-3f};
    for (OpKind op : {OpKind::relu, OpKind::gelu_tanh, OpKind::gelu_erf, OpKind::sigmoid, OpKind::silu,
                      OpKind::tanh, OpKind::exp, OpKind::log, OpKind::rsqrt})
      for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
        KernelSpec spec;
        spec.graph.output("y", spec.graph.unary(op, spec.graph.input("x", dt)), dt);
        const Shape shape{1, static_cast<std::int64_t>(std::size(specials)), 0};
        TensorMap inputs;
        HostTensor x = HostTensor::zeros(dt, {shape.m, shape.n});
        for (std::size_t i = 0; i < std::size(specials); ++i) x.set(static_cast<std::int64_t>(i), specials[i]);
        inputs.emplace("x", x);
        const auto want = evaluate(spec, shape, inputs, {});
        const auto got = run_on_device(*jit, spec, shape, inputs, {});
        const Comparison c = compare(got.at("y"), want.at("y"), tolerance_for(dt, spec.precision));
        INFO("op " << static_cast<int>(op) << " dtype " << to_string(dt));
        CHECK_MESSAGE(c.ok, c.message);
      }
  }

  TEST_CASE("the cache hands out one kernel per key; kernels use no local memory") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const KernelSpec spec = test_specs::add_mul(DType::f32, 0.25);
    const auto before = jit->stats();
    auto a = jit->compile(spec, {64, 64, 0});
    auto b = jit->compile(spec, {128, 64, 0});
    CHECK(a.get() == b.get());
    CHECK(jit->stats().hits >= before.hits + 1);
    MESSAGE("registers per thread: " << a->registers() << ", local bytes: " << a->local_bytes());
    CHECK(a->local_bytes() == 0);
  }

  TEST_CASE("column sums: the bias+GELU+dropout+residual backward matches the reference") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 700;
    const std::pair<DType, DType> dtypes[] = {{DType::f32, DType::f32}, {DType::bf16, DType::f32},
                                              {DType::bf16, DType::bf16}, {DType::f16, DType::f16}};
    for (const auto& [dt, dbias] : dtypes)
      // 6000 x 520: several steps a thread, so rows loaded a step ahead, and a ragged last column tile.
      for (const Shape& shape :
           {Shape{64, 1024, 0}, Shape{37, 129, 0}, Shape{1000, 768, 0}, Shape{3000, 40, 0}, Shape{6000, 520, 0}}) {
        INFO("dtype " << to_string(dt) << " dbias " << to_string(dbias));
        check_column_sums(*jit, bias_gelu_dropout_add_backward(dt, dbias), shape, ++seed, {0x5EEDull, 12});
      }
  }

  TEST_CASE("column sums: shapes that break assumptions") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    // M = 1, N = 1, N not a multiple of the vector width or of a tile, M*N
    // a multiple of nothing, many rows over few columns (many row slices).
    const Shape shapes[] = {{1, 1, 0},  {1, 7, 0},    {7, 1, 0},     {3, 5, 0},   {1, 1025, 0},
                            {33, 67, 0}, {2, 8193, 0}, {517, 3, 0},  {4099, 13, 0}, {1, 4096, 0}};
    std::uint64_t seed = 800;
    for (DType dt : {DType::f32, DType::bf16})
      for (const Shape& shape : shapes) {
        INFO("dtype " << to_string(dt));
        check_column_sums(*jit, bias_gelu_dropout_add_backward(dt, DType::f32), shape, ++seed, {3, 1});
      }
    force_index64_for_tests(true);
    for (const Shape& shape : {Shape{33, 67, 0}, Shape{64, 256, 0}}) {
      check_column_sums(*jit, bias_gelu_dropout_add_backward(DType::bf16, DType::f32), shape, ++seed, {3, 1});
      CHECK(jit->compile(bias_gelu_dropout_add_backward(DType::bf16, DType::f32), shape)->key().shape_class.find(
                "/i64") != std::string::npos);
    }
    force_index64_for_tests(false);
  }

  TEST_CASE("column sums: an [N] output in f16, with row, col and scalar inputs") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    KernelSpec spec;
    Graph& g = spec.graph;
    Value x = g.input("x", DType::f16);
    Value b = g.input("b", DType::f16, Broadcast::row);
    Value s = g.input("s", DType::f16, Broadcast::col);
    Value k = g.input("k", DType::f16, Broadcast::scalar);
    Value t = g.mul(g.mul(g.add(x, b), s), k);
    g.output("y", g.silu(t), DType::f16);
    g.output("sum", g.col_sum(g.unary(OpKind::silu_deriv, t)), DType::f16);
    std::uint64_t seed = 900;
    for (const Shape& shape : {Shape{64, 256, 0}, Shape{129, 77, 0}, Shape{1, 9, 0}, Shape{2048, 24, 0}})
      check_column_sums(*jit, spec, shape, ++seed);
  }

  TEST_CASE("column sums: two col_sum outputs in one kernel") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    for (DType dt : {DType::f32, DType::bf16}) {
      KernelSpec spec;
      Graph& g = spec.graph;
      Value dy = g.input("dy", dt);
      Value h = g.input("h", dt);
      Value dact = g.mul(g.dropout(dy, 0.25, RngMode::philox4, 1), g.unary(OpKind::relu_deriv, h));
      g.output("dbias_out", g.col_sum(dy), DType::f32);
      g.output("dx", dact, dt);
      g.output("dbias", g.col_sum(dact), dt);
      std::uint64_t seed = 1000;
      for (const Shape& shape : {Shape{256, 512, 0}, Shape{45, 99, 0}, Shape{1, 1, 0}}) {
        INFO("dtype " << to_string(dt));
        check_column_sums(*jit, spec, shape, ++seed, {21, 0});
      }
    }
  }

  TEST_CASE("column sums: two launches of one kernel give the same bits") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    for (DType dt : {DType::f32, DType::bf16})
      for (const Shape& shape : {Shape{4096, 1000, 0}, Shape{20000, 64, 0}}) {
        const KernelSpec spec = bias_gelu_dropout_add_backward(dt, DType::f32);
        const TensorMap inputs = make_inputs(spec, shape, 1100);
        const TensorMap a = run_on_device(*jit, spec, shape, inputs, {9, 9});
        const TensorMap b = run_on_device(*jit, spec, shape, inputs, {9, 9});
        INFO("dtype " << to_string(dt) << " shape " << shape.m << "x" << shape.n);
        for (const Output& o : spec.graph.outputs()) CHECK_MESSAGE(same_bits(a.at(o.name), b.at(o.name)), o.name);
        double magnitude = 0;
        const HostTensor& dbias = a.at("dbias");
        for (std::int64_t c = 0; c < dbias.numel(); ++c) magnitude += std::fabs(dbias.get(c));
        CHECK(magnitude > 0);  // the sums are not all zero
      }
  }

  TEST_CASE("column sums: a backward's dropout regenerates its forward's mask") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    for (const Shape& shape : {Shape{64, 256, 0}, Shape{33, 67, 0}, Shape{5, 1023, 0}}) {
      // Forward: three dropouts, the one of stream 2 output alone.
      KernelSpec fwd;
      Value x = fwd.graph.input("x", DType::f32);
      fwd.graph.output("a", fwd.graph.dropout(x, 0.5), DType::f32);
      fwd.graph.output("b", fwd.graph.dropout(x, 0.5), DType::f32);
      fwd.graph.output("y", fwd.graph.dropout(x, 0.3), DType::f32);  // stream 2
      KernelSpec bwd;
      Value dy = bwd.graph.input("dy", DType::f32);
      Value dx = bwd.graph.dropout(dy, 0.3, RngMode::philox4, 2);
      bwd.graph.output("dx", dx, DType::f32);
      bwd.graph.output("db", bwd.graph.col_sum(dx), DType::f32);
      const LaunchArgs args{0xABCDEFull, 17};
      const HostTensor y = run_on_device(*jit, fwd, shape, make_inputs(fwd, shape, 1200), args).at("y");
      const HostTensor g = run_on_device(*jit, bwd, shape, make_inputs(bwd, shape, 1201), args).at("dx");
      std::int64_t differ = 0, dropped = 0;
      for (std::int64_t i = 0; i < y.numel(); ++i) {
        differ += (y.get(i) == 0.0f) != (g.get(i) == 0.0f);
        dropped += g.get(i) == 0.0f;
      }
      INFO("shape " << shape.m << "x" << shape.n);
      CHECK_MESSAGE(differ == 0, differ << " elements dropped in one pass only");
      CHECK(dropped > 0);
      CHECK(dropped < y.numel());
      check_column_sums(*jit, bwd, shape, 1202, args);
    }
  }

  TEST_CASE("column sums: loads staged through shared memory give the register loop's bits") {
    // Note [Staged column loads]: whichever the GPU's default, a tile's stages
    // change where a row's bytes wait, not the arithmetic or its order.
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 1250;
    const std::pair<ElementwiseTile, ElementwiseTile> pairs[] = {
        {ElementwiseTile{256, 8, 0}, ElementwiseTile{256, 8, 0, 3}},  // three rows of slots
        {ElementwiseTile{512, 8, 0}, ElementwiseTile{512, 8, 0, 2}},  // two: three would pass 32 KB
        {ElementwiseTile{128, 8, 8}, ElementwiseTile{128, 8, 8, 4}},  // four; 8 blocks an SM
    };
    for (DType dt : {DType::bf16, DType::f16})
      // Several rows a thread (the slots wrap), fewer rows than slots, one row.
      for (const Shape& shape : {Shape{6000, 520, 0}, Shape{4096, 1024, 0}, Shape{2, 4096, 0}, Shape{1, 8, 0}})
        for (const auto& [in_registers, staged] : pairs) {
          const KernelSpec spec = bias_gelu_dropout_add_backward(dt, DType::f32);
          INFO("dtype " << to_string(dt) << " shape " << shape.m << "x" << shape.n << " tile " << staged.str());
          const std::uint64_t data = ++seed;
          const TensorMap a = check_column_sums(*jit, spec, shape, data, {77, 3}, in_registers);
          const TensorMap b = check_column_sums(*jit, spec, shape, data, {77, 3}, staged);
          CHECK(jit->compile(spec, shape, TileConfig{staged})->key().tile == TileConfig{staged});
          for (const Output& o : spec.graph.outputs()) CHECK_MESSAGE(same_bits(a.at(o.name), b.at(o.name)), o.name);
        }
  }

  TEST_CASE("column sums: a bias gradient alone on its default tile and on every threads-an-SM tile") {
    // Note [Threads an SM for a sum alone]: 256 to 2048 threads an SM in
    // blocks of up to 1024, against the reference and the same bits twice.
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 1250;
    for (const auto& [in, vec] : {std::pair{DType::bf16, 8}, std::pair{DType::f32, 4}})
      for (DType out : {DType::f32, in}) {
        KernelSpec spec;
        spec.graph.output("db", spec.graph.col_sum(spec.graph.input("dy", in)), out);
        for (const Shape& shape : {Shape{4096, 2048, 0}, Shape{3000, 1000, 0}, Shape{40, 520, 0}})
          for (const std::optional<TileConfig>& tile :
               {std::optional<TileConfig>{}, std::optional<TileConfig>{ElementwiseTile{1024, vec, 2}},
                std::optional<TileConfig>{ElementwiseTile{1024, vec, 1}},
                std::optional<TileConfig>{ElementwiseTile{512, vec, 1}},
                std::optional<TileConfig>{ElementwiseTile{256, vec, 1}}}) {
            INFO("dy " << to_string(in) << " db " << to_string(out));
            const TensorMap a = check_column_sums(*jit, spec, shape, ++seed, {}, tile);
            const TensorMap b = run_on_device(*jit, spec, shape, make_inputs(spec, shape, seed), {}, tile);
            CHECK(same_bits(a.at("db"), b.at("db")));
          }
      }
  }

  TEST_CASE("column sums: misaligned pointers and every tile candidate") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 1300;
    for (DType dt : {DType::f32, DType::bf16})
      for (std::size_t misalign : {1u, 3u})
        check_column_sums(*jit, bias_gelu_dropout_add_backward(dt, DType::f32), {19, 64, 0}, ++seed, {5, 0}, {},
                          misalign);
    const KernelSpec spec = bias_gelu_dropout_add_backward(DType::bf16, DType::f32);
    const Shape shape{96, 1000, 0};
    for (const TileConfig& tile : tile_candidates(spec, shape, jit->target()))
      check_column_sums(*jit, spec, shape, ++seed, {11, 4}, tile);
  }
}
