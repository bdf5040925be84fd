// GPU tier for the row family's backward specs (row_backward_specs.hpp,
// docs/autodiff.md): [M] outputs (a forward's saved statistics), [N] column
// sums (a norm's weight gradients), the dropout mask a backward regenerates,
// and a second launch bit-identical to the first, against the reference
// evaluator on random non-zero data, on default tiles, every tile candidate,
// clusters, rings and rings in pieces. Without a GPU the suite prints one
// visible line and passes.
#include <doctest/doctest.h>

#include <cmath>
#include <optional>
#include <utility>

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

using testing::same_bits;

// A spec with [M] and [N] outputs, and the graphs its tolerances come from
// (row_backward_specs.hpp): `terms` with each col_sum's operand an output,
// `magnitude` the magnitudes of the terms of each [M,N] output.
struct RowCase {
  KernelSpec spec;
  std::optional<KernelSpec> terms, magnitude;
};

// The inputs' magnitudes, the mask as it is (its -inf entries make terms zero).
TensorMap magnitudes(const TensorMap& inputs) {
  TensorMap out;
  for (const auto& [name, t] : inputs) {
    HostTensor a = t;
    if (name != "mask")
      for (std::int64_t i = 0; i < a.numel(); ++i) a.set(i, std::fabs(a.get(i)));
    out.emplace(name, std::move(a));
  }
  return out;
}

// Against the reference; run_on_device returns each output in its shape. An
// [M,N] or [M] output within the dtype's tolerance plus, for the [M,N] ones
// of a case with `magnitude`, 1e-6 of its terms' magnitude (a gradient
// cancels: an FMA's rounding or expf's last bit is relative to its terms, and
// a row sum of terms of mixed signs loses the digits they cancel); an [N]
// column sum within 1e-5 of the sum of its terms' magnitudes plus its dtype's
// rounding. Returns the outputs.
TensorMap check_sums(Jit& jit, const RowCase& rc, const Shape& shape, std::uint64_t seed,
                     std::optional<TileConfig> tile = std::nullopt, TensorMap given = {}) {
  const KernelSpec& spec = rc.spec;
  const TensorMap inputs = make_inputs(spec, shape, seed, std::move(given));
  const TensorMap want = evaluate(spec, shape, inputs, {});
  const TensorMap got = run_on_device(jit, spec, shape, inputs, {}, tile);
  const TensorMap terms = rc.terms ? evaluate(*rc.terms, shape, inputs, {}) : TensorMap{};
  const TensorMap mag = rc.magnitude ? evaluate(*rc.magnitude, shape, magnitudes(inputs), {}) : TensorMap{};
  for (const Output& o : spec.graph.outputs()) {
    INFO("output " << o.name << " " << to_string(o.dtype) << " shape " << shape.m << "x" << shape.n << " tile "
                   << (tile ? to_string(*tile) : "default"));
    const Broadcast b = spec.graph.node(o.value).broadcast;
    const HostTensor& g = got.at(o.name);
    const HostTensor& w = want.at(o.name);
    REQUIRE(g.shape == w.shape);
    const Tolerance tol = tolerance_for(o.dtype, spec.precision);
    std::int64_t bad = 0, checked = 0;
    for (std::int64_t i = 0; i < w.numel(); ++i) {
      const float x = g.get(i), y = w.get(i);
      double bound = tol.atol + tol.rtol * std::fabs(y);
      if (b == Broadcast::full && rc.magnitude) bound += 1e-6 * std::fabs(mag.at(o.name).get(i));
      if (b == Broadcast::row) {
        REQUIRE(rc.terms);
        const HostTensor& t = terms.at(o.name + "_terms");
        double sum = 0;
        for (std::int64_t r = 0; r < shape.m; ++r) sum += std::fabs(t.get(r * shape.n + i));
        bound = 1e-5 * sum + tol.rtol * std::fabs(y) + 1e-30;
      }
      const bool ok = std::isnan(y) ? std::isnan(x) : std::isinf(y) ? x == y : std::fabs(double(x) - y) <= bound;
      ++checked;
      if (!ok && bad++ == 0) FAIL_CHECK("element " << i << ": got " << x << ", want " << y << " (bound " << bound << ")");
    }
    CHECK(bad == 0);
    CHECK(checked == (b == Broadcast::full ? shape.m * shape.n : b == Broadcast::col ? shape.m : shape.n));
  }
  return got;
}

// Against the reference, then a second launch bit-identical to the first
// (the column sums' tree adds in a fixed order).
void check_backward(Jit& jit, const RowCase& rc, const Shape& shape, std::uint64_t seed,
                    std::optional<TileConfig> tile = std::nullopt) {
  const TensorMap first = check_sums(jit, rc, shape, seed, tile);
  const TensorMap again = run_on_device(jit, rc.spec, shape, make_inputs(rc.spec, shape, seed), {}, tile);
  for (const Output& o : rc.spec.graph.outputs()) {
    INFO("output " << o.name << " tile " << (tile ? to_string(*tile) : "default"));
    CHECK(same_bits(first.at(o.name), again.at(o.name)));
  }
}

RowCase softmax_backward_case(DType dt) {
  return {testing::softmax_backward_spec(dt), std::nullopt, testing::softmax_backward_spec(dt, true)};
}
RowCase log_softmax_backward_case(DType dt) {
  return {testing::log_softmax_backward_spec(dt), std::nullopt, testing::log_softmax_backward_spec(dt, true)};
}
RowCase attention_backward_case(DType dt) {
  return {testing::attention_backward_spec(dt, 0.125, 0.1), std::nullopt,
          testing::attention_backward_spec(dt, 0.125, 0.1, false, true)};
}
RowCase layernorm_backward_case(DType dt) {
  return {testing::layernorm_backward_spec(dt), testing::layernorm_backward_spec(dt, true),
          testing::layernorm_backward_spec(dt, false, true)};
}
RowCase add_rmsnorm_backward_case(DType dt, DType wdt) {
  return {testing::add_rmsnorm_backward_spec(dt, wdt), testing::add_rmsnorm_backward_spec(dt, wdt, true),
          testing::add_rmsnorm_backward_spec(dt, wdt, false, true)};
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("row family backward: softmax, log_softmax, layernorm and add+rmsnorm in f32 and bf16, repeat bit-identical") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 9100;
    for (DType dt : {DType::f32, DType::bf16}) {
      const RowCase cases[] = {softmax_backward_case(dt), log_softmax_backward_case(dt), layernorm_backward_case(dt),
                               add_rmsnorm_backward_case(dt, dt)};
      // Rows of 1; short rows on groups with idle groups; a grid of more than
      // 16 blocks (two levels of the column tree and more); rows in registers of whole blocks.
      for (const Shape shape : {Shape{37, 1, 0}, Shape{41, 1000, 0}, Shape{20000, 128, 0}, Shape{300, 4096, 0}})
        for (const RowCase& rc : cases) check_backward(*jit, rc, shape, ++seed);
    }
  }

  TEST_CASE("row family backward: layernorm's column sums on every tile candidate") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 9200;
    const RowCase ln = layernorm_backward_case(DType::bf16);
    for (const Shape shape : {Shape{41, 1024, 0}, Shape{13, 16384, 0}})
      for (const TileConfig& t : tile_candidates(ln.spec, shape, jit->target())) check_backward(*jit, ln, shape, ++seed, t);
    // [N] outputs in bf16, and a streaming tile refused.
    const RowCase rms = add_rmsnorm_backward_case(DType::bf16, DType::bf16);
    check_backward(*jit, rms, Shape{64, 2048, 0}, ++seed);
    CHECK_THROWS_AS(run_on_device(*jit, rms.spec, Shape{64, 2048, 0}, make_inputs(rms.spec, Shape{64, 2048, 0}, 1), {},
                                  RowTile{256, 0, 0, 1}),
                    UserError);
  }

  TEST_CASE("row family backward: long rows on cluster and ring tiles" * doctest::test_suite("gpu_sm90")) {
    Jit* jit = gpu_jit();
    if (!jit || !jit->target().starts_with("sm_9")) return;
    std::uint64_t seed = 9300;
    for (DType dt : {DType::f32, DType::bf16}) {
      const RowCase cases[] = {layernorm_backward_case(dt), add_rmsnorm_backward_case(dt, DType::f32),
                               attention_backward_case(dt), softmax_backward_case(dt)};
      for (const RowTile t : {RowTile{512, 0, -1, 1, 0, 8}, RowTile{1024, 0, -1, 1, 0, 8, 1}, RowTile{1024, 0, -1, 1, 0, 16, 2}})
        for (const RowCase& rc : cases) check_backward(*jit, rc, Shape{5, 65536, 0}, ++seed, t);
      check_backward(*jit, cases[0], Shape{3, 262144, 0}, ++seed, RowTile{1024, 0, -1, 1, 0, 16, 1});
    }
  }

  TEST_CASE("row family backward: a ring in pieces gives the whole-row ring's bits" * doctest::test_suite("gpu_sm90")) {
    // Note [Ring pieces]: the same threads add the same elements in the same
    // order; only when each piece lands changes. Rows whose block part fills
    // the pieces, leaves the last one short (229376: 14336 of 16384 columns a
    // block) or empty (196608 on four vectors a thread: 12288), and more rows
    // than the grid's clusters, so that slots are refilled across rows.
    Jit* jit = gpu_jit();
    if (!jit || !jit->target().starts_with("sm_9")) return;
    std::uint64_t seed = 9400;
    for (DType dt : {DType::f32, DType::bf16}) {
      const RowCase cases[] = {layernorm_backward_case(dt), add_rmsnorm_backward_case(dt, DType::f32)};
      for (const RowCase& rc : cases)
        for (std::int64_t n : {262144, 229376, 196608}) {
          const Shape shape{dt == DType::f32 ? 9 : 17, n, 0};
          // Four 16-byte vectors a thread: 1024 threads of f32, 512 of bf16.
          const RowTile whole = dt == DType::f32 ? RowTile{1024, 4, 4, 1, 0, 16, 1} : RowTile{512, 8, 4, 1, 0, 16, 1};
          const std::uint64_t s = ++seed;
          check_backward(*jit, rc, shape, s, whole);
          const TensorMap want = run_on_device(*jit, rc.spec, shape, make_inputs(rc.spec, shape, s), {}, whole);
          for (const auto& [pieces, slots] : {std::pair{4, 5}, std::pair{2, 3}, std::pair{4, 6}}) {
            RowTile t = whole;
            t.pieces = pieces;
            t.ring = slots;
            check_backward(*jit, rc, shape, s, t);
            const TensorMap got = run_on_device(*jit, rc.spec, shape, make_inputs(rc.spec, shape, s), {}, t);
            for (const Output& o : rc.spec.graph.outputs()) {
              INFO("output " << o.name << ", N = " << n << ", tile " << t.str());
              CHECK(same_bits(want.at(o.name), got.at(o.name)));
            }
          }
        }
    }
  }

  TEST_CASE("row family backward: the column tree in shared memory (t) and launch bounds (m)" *
            doctest::test_suite("gpu_sm90")) {
    // Note [Column sums]: ef_col_sums_finish_shared adds the same children in
    // the same order. Against the reference (and bit-identical on a second
    // run): rows enough for a tree of two levels at 16,384 (more than 16 row
    // units), and fewer rows than units at 65,536. Against the register tree bit for bit where both
    // grids have the same units (fewer rows than one block a multiprocessor
    // holds, so that the launch bound's blocks do not change them).
    Jit* jit = gpu_jit();
    if (!jit || !jit->target().starts_with("sm_9")) return;
    std::uint64_t seed = 9500;
    for (DType dt : {DType::f32, DType::bf16}) {
      const int vec = dt == DType::f32 ? 4 : 8;
      const RowCase cases[] = {layernorm_backward_case(dt), add_rmsnorm_backward_case(dt, DType::f32)};
      for (const RowCase& rc : cases)
        for (const auto& [n, rows, threads, cluster] : {std::tuple{16384, 120, 256, 4}, std::tuple{16384, 120, 512, 2},
                                                        std::tuple{65536, 24, 512, 8}}) {
          const RowTile regs{threads, vec, n / cluster / threads / vec, 1, 0, cluster, 2};
          for (int m : {0, 2}) {
            RowTile t = regs;
            t.tree = 1;
            t.min_blocks = m;
            check_backward(*jit, rc, Shape{rows, n, 0}, ++seed, t);
          }
          const Shape few{5, n, 0};
          const std::uint64_t s = ++seed;
          const TensorMap want = run_on_device(*jit, rc.spec, few, make_inputs(rc.spec, few, s), {}, regs);
          RowTile t = regs;
          t.tree = 1;
          const TensorMap got = run_on_device(*jit, rc.spec, few, make_inputs(rc.spec, few, s), {}, t);
          for (const Output& o : rc.spec.graph.outputs()) {
            INFO("output " << o.name << ", tile " << t.str() << " against " << regs.str());
            CHECK(same_bits(want.at(o.name), got.at(o.name)));
          }
        }
    }
  }

  TEST_CASE("row family backward: the default tiles that keep values, take the tree or bound the registers" *
            doctest::test_suite("gpu_sm90")) {
    // Note [Default column tree and keep]: layernorm's backward by default
    // keeps a stage's values (k) on one block or a cluster of two, holds rows
    // of 1,024 to 2,048 vectors in one block with the column tree (t), and at
    // 65,536 in bf16 bounds 512-thread blocks to two a multiprocessor (m2t).
    // Few rows each: the default tile is chosen from N.
    Jit* jit = gpu_jit();
    if (!jit || !jit->target().starts_with("sm_9")) return;
    std::uint64_t seed = 9600;
    for (DType dt : {DType::f32, DType::bf16}) {
      const RowCase ln = layernorm_backward_case(dt);
      for (const Shape shape : {Shape{33, 4096, 0}, Shape{17, 8192, 0}, Shape{9, 16384, 0}, Shape{7, 65536, 0}})
        check_backward(*jit, ln, shape, ++seed);
    }
  }

  TEST_CASE("row family: [M] outputs of the forward (row max and sum, mean and rstd), with -inf in the mask") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    using namespace epifuse::testing;
    std::uint64_t seed = 9400;
    for (DType dt : {DType::f32, DType::bf16}) {
      const RowCase att{attention_forward_stats_spec(dt, 0.125, 0.1)};
      const Shape shape{9, 1024, 0};
      HostTensor mask = random_tensor(dt, {shape.m, shape.n}, ++seed);
      for (std::int64_t c = 0; c < shape.n; c += 3) mask.set(2 * shape.n + c, -INFINITY);  // row 2: a third -inf
      for (std::int64_t c = 0; c < shape.n; ++c) mask.set(5 * shape.n + c, -INFINITY);      // row 5: all -inf
      TensorMap given;
      given.emplace("mask", mask);
      check_sums(*jit, att, shape, ++seed, std::nullopt, given);
      for (const Shape s : {Shape{37, 1, 0}, Shape{200, 4096, 0}}) {
        check_sums(*jit, att, s, ++seed);
        check_sums(*jit, RowCase{layernorm_forward_stats_spec(dt, 1e-5)}, s, ++seed);
      }
      // The backward from the saved statistics, with -inf in its mask too.
      TensorMap bgiven;
      bgiven.emplace("mask", mask);
      check_sums(*jit, attention_backward_case(dt), shape, ++seed, std::nullopt, bgiven);
    }
  }

  TEST_CASE("row family backward: the dropout mask regenerated from the forward's stream") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    using namespace epifuse::testing;
    const KernelSpec fwd = attention_forward_stats_spec(DType::f32, 0.125, 0.25);
    const KernelSpec bwd = attention_backward_spec(DType::f32, 0.125, 0.25, true);
    const Shape shape{64, 2048, 0};
    const TensorMap in = make_inputs(bwd, shape, 9500);
    TensorMap fin;
    fin.emplace("x", in.at("x"));
    fin.emplace("mask", in.at("mask"));
    const TensorMap y = run_on_device(*jit, fwd, shape, fin, {});
    const TensorMap dz = run_on_device(*jit, bwd, shape, in, {});
    std::int64_t dropped = 0, differ = 0;
    for (std::int64_t i = 0; i < shape.m * shape.n; ++i) {
      const bool a = y.at("y").get(i) == 0.0f, b = dz.at("dz").get(i) == 0.0f;
      dropped += a;
      differ += a != b;
    }
    CHECK(differ == 0);
    CHECK(dropped > shape.m * shape.n / 5);  // p = 0.25: about a quarter dropped
    CHECK(dropped < shape.m * shape.n / 3);
  }
}
