// GPU tier for col_sum outputs in a GEMM's epilogue (Note [GEMM column sums],
// src/codegen/gemm/gemm.hpp; docs/gemm-backward.md §2): the bias gradient of
// a dgrad epilogue and of a bias chain, on every mma.sync tile candidate, the
// fragment and staged epilogues, split-K, ragged shapes, f16, bf16 and tf32
// operands, against the reference evaluator on random non-zero data; two
// launches give the same bits. On an sm_90a GPU the same for every wgmma
// candidate (persistent blocks, cooperative, cluster and ping-pong tiles) and
// its general (mma.sync) kernel. The same for exact f32 (the SIMT mainloop)
// and the wave kernel's FMA form (the AMD mainloop's code on NVIDIA: its
// loaders, staging, lane sums and arrivals). Skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <optional>

#include "column_sum_checks.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/compare.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/reference.hpp"
#include "gemm_checks.hpp"
#include "gpu_jit.hpp"

using namespace epifuse;

namespace {

using testing::check_column_sum;
using testing::column_terms;
using testing::gemm_tolerance;
using testing::gpu_jit;
using testing::hopper_jit;
using testing::is_column_sum;

// y = acc + bias (bias a row vector), db = col_sum(y): a linear layer's output
// and its bias gradient's shape of work.
KernelSpec bias_chain(DType dt, GemmMath math = GemmMath::exact, DType db = DType::f32) {
  KernelSpec s;
  s.mainloop = {MainloopKind::gemm, dt, dt, Layout::row, Layout::row, math};
  Graph& g = s.graph;
  const Value h = g.add(g.accumulator(0), g.input("bias", dt, Broadcast::row));
  g.output("y", h, dt);
  g.output("db", g.col_sum(h), db);
  return s;
}

// The dgrad epilogue of bias + GELU-tanh: dacc = dy_acc * gelu_tanh_deriv(saved),
// db = col_sum(dacc), with `saved` the forward's pre-activation (a full input).
KernelSpec dgrad_chain(DType dt, GemmMath math = GemmMath::exact, DType db = DType::f32, Layout a = Layout::row,
                       Layout b = Layout::col) {
  KernelSpec s;
  s.mainloop = {MainloopKind::gemm, dt, dt, a, b, math};
  Graph& g = s.graph;
  const Value dacc = g.mul(g.accumulator(0), g.unary(OpKind::gelu_tanh_deriv, g.input("saved", dt)));
  g.output("dacc", dacc, dt);
  g.output("db", g.col_sum(dacc), db);
  return s;
}

// f32 operands run as tf32 on mma.sync (exact f32 is the SIMT mainloop's: its own cases below).
GemmMath math_of(DType dt) { return dt == DType::f32 ? GemmMath::tf32 : GemmMath::exact; }

// The wave kernel's FMA form (what NVIDIA runs of the AMD mainloop): the MFMA
// layout (64-lane waves, two warps each) and the WMMA one (32 lanes), at the
// heuristic's sizes and a narrow one.
const WaveTile k_wave_fma_tiles[] = {{64, 64, 32, 2, 2, 8, 0, 1}, {128, 128, 32, 2, 2, 8, 0, 1},
                                     {64, 64, 32, 2, 2, 8, 1, 1}, {128, 128, 32, 2, 4, 8, 1, 1},
                                     {32, 32, 64, 1, 1, 8, 1, 1}};

// Two launches of one kernel on the same inputs, another col_sum kernel with
// the same tile between them (it writes the shared scratch workspace): the
// same bits in every output.
void check_two_launches(Jit& jit, const KernelSpec& spec, const KernelSpec& other, const Shape& s,
                        const TileConfig& tile, std::uint64_t seed);

// Runs `spec` on the GPU and the reference: full outputs within the
// accumulator's bound (times 1.13, |gelu_tanh_deriv|'s peak, for the dgrad
// chain), each column sum within check_column_sum's bound with a term's error
// the accumulator's. Returns what the GPU wrote.
TensorMap check_gemm_column_sums(Jit& jit, const KernelSpec& spec, const Shape& shape, std::uint64_t seed,
                                 std::optional<TileConfig> tile = std::nullopt, std::size_t misalign = 0) {
  const TensorMap inputs = make_inputs(spec, shape, seed);
  const TensorMap want = evaluate(spec, shape, inputs, {});
  TensorMap got = run_on_device(jit, spec, shape, inputs, {}, tile, misalign);
  const TensorMap terms = evaluate(column_terms(spec), shape, inputs, {});
  const double accumulator = static_cast<double>(shape.k) * std::ldexp(1.0, -21) * 4.0 * 1.13;
  for (const Output& o : spec.graph.outputs()) {
    INFO("output " << o.name << " shape " << shape.m << "x" << shape.n << "x" << shape.k << " "
                   << to_string(spec.mainloop.a) << " tile " << (tile ? to_string(*tile) : "default"));
    if (is_column_sum(spec.graph, o.value)) {
      check_column_sum(got.at(o.name), want.at(o.name), terms.at(o.name), o.dtype, shape, accumulator);
      continue;
    }
    Tolerance t = gemm_tolerance(o.dtype, shape);
    t.atol += accumulator;
    const Comparison c = compare(got.at(o.name), want.at(o.name), t);
    CHECK_MESSAGE(c.ok, c.message);
  }
  return got;
}

using testing::same_bits;

void check_two_launches(Jit& jit, const KernelSpec& spec, const KernelSpec& other, const Shape& s,
                        const TileConfig& tile, std::uint64_t seed) {
  INFO("shape " << s.m << "x" << s.n << "x" << s.k << " tile " << to_string(tile));
  const TensorMap inputs = make_inputs(spec, s, seed);
  const TensorMap first = run_on_device(jit, spec, s, inputs, {}, tile);
  run_on_device(jit, other, s, make_inputs(other, s, seed + 1), {}, tile);
  const TensorMap second = run_on_device(jit, spec, s, inputs, {}, tile);
  for (const Output& o : spec.graph.outputs()) {
    INFO("output " << o.name);
    CHECK(same_bits(first.at(o.name), second.at(o.name)));
  }
}

// The wgmma candidates of a col_sum chain on sm_90a: at 4096^2 the tuner
// tries wgmma tiles alone, so these are all of them.
std::vector<TileConfig> wgmma_candidates(const KernelSpec& spec) {
  std::vector<TileConfig> out = tile_candidates(spec, {4096, 4096, 256}, "sm_90a");
  for (const TileConfig& t : out) REQUIRE(std::holds_alternative<WgmmaTile>(t));
  return out;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("gemm col_sum: the bias chain and the dgrad chain, f16, bf16 and tf32, ragged shapes") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 9100;
    for (DType dt : {DType::bf16, DType::f16, DType::f32})
      for (const Shape& s : {Shape{67, 200, 96}, Shape{1000, 520, 64}, Shape{1, 8, 16}, Shape{130, 70, 33}}) {
        check_gemm_column_sums(*jit, bias_chain(dt, math_of(dt)), s, ++seed);
        check_gemm_column_sums(*jit, dgrad_chain(dt, math_of(dt)), s, ++seed);
      }
    // A 16-bit [N] output, and the other layouts.
    check_gemm_column_sums(*jit, dgrad_chain(DType::bf16, GemmMath::exact, DType::bf16), {200, 136, 96}, ++seed);
    for (Layout a : {Layout::row, Layout::col})
      for (Layout b : {Layout::row, Layout::col})
        check_gemm_column_sums(*jit, dgrad_chain(DType::f16, GemmMath::exact, DType::f32, a, b), {67, 200, 96}, ++seed);
  }

  TEST_CASE("gemm col_sum: every mma.sync tile candidate, split-K included") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 9200;
    for (DType dt : {DType::bf16, DType::f32}) {
      const KernelSpec spec = dgrad_chain(dt, math_of(dt));
      // The last: few tiles and a long K, so the split-K candidates are tried.
      // (On sm_90a the wgmma candidates come first: the gpu_sm90 cases below.)
      for (const Shape& s : {Shape{67, 200, 96}, Shape{300, 264, 96}, Shape{256, 256, 1024}})
        for (const TileConfig& tile : tile_candidates(spec, s, jit->target()))
          if (std::holds_alternative<GemmTile>(tile)) check_gemm_column_sums(*jit, spec, s, ++seed, tile);
    }
  }

  TEST_CASE("gemm col_sum: more than 256 row tiles") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    // 313 row tiles of 32 rows: the last block adds 313 partial rows.
    check_gemm_column_sums(*jit, bias_chain(DType::bf16), {10000, 96, 32}, 9301, GemmTile{32, 32, 64, 2, 2, 4, 8});
  }

  TEST_CASE("gemm col_sum: 4096^2 dgrad with the default tile") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    check_gemm_column_sums(*jit, dgrad_chain(DType::bf16), {4096, 4096, 256}, 9302);
  }

  TEST_CASE("gemm col_sum: two launches give the same bits") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const KernelSpec spec = dgrad_chain(DType::bf16);
    for (const Shape& s : {Shape{1000, 520, 64}, Shape{256, 256, 1024}}) {
      for (const TileConfig& tile : {TileConfig{GemmTile{128, 256, 32, 2, 4, 4, 8}}, TileConfig{GemmTile{64, 64, 32, 2, 2, 4, 8}},
                                     TileConfig{GemmTile{64, 64, 64, 2, 2, 3, 8, 2}}}) {
        INFO("shape " << s.m << "x" << s.n << "x" << s.k << " tile " << to_string(tile));
        const TensorMap inputs = make_inputs(spec, s, 9400);
        const TensorMap first = run_on_device(*jit, spec, s, inputs, {}, tile);
        // Another kernel on the same stream in between writes the shared scratch workspace.
        run_on_device(*jit, bias_chain(DType::bf16), s, make_inputs(bias_chain(DType::bf16), s, 9401), {}, tile);
        const TensorMap second = run_on_device(*jit, spec, s, inputs, {}, tile);
        CHECK(same_bits(first.at("db"), second.at("db")));
        CHECK(same_bits(first.at("dacc"), second.at("dacc")));
      }
    }
  }
  // Exact f32 (the SIMT mainloop, FFMA): the accumulator's bound above is
  // tf32's, a loose one for exact f32, so these also pass if the kernel ran
  // tf32; the column sums' own error is what they check.
  TEST_CASE("gemm col_sum SIMT: exact f32 bias and dgrad chains on every SIMT candidate, ragged shapes, all layouts") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 9800;
    const KernelSpec dgrad = dgrad_chain(DType::f32);
    for (const Shape& s : {Shape{67, 200, 96}, Shape{1000, 522, 64}, Shape{1, 8, 16}, Shape{130, 70, 33}}) {
      check_gemm_column_sums(*jit, bias_chain(DType::f32), s, ++seed);
      check_gemm_column_sums(*jit, dgrad, s, ++seed);
      for (const TileConfig& tile : tile_candidates(dgrad, s, jit->target())) {
        REQUIRE(std::holds_alternative<GemmTile>(tile));
        check_gemm_column_sums(*jit, dgrad, s, ++seed, tile);
      }
    }
    for (Layout a : {Layout::row, Layout::col})
      for (Layout b : {Layout::row, Layout::col})
        check_gemm_column_sums(*jit, dgrad_chain(DType::f32, GemmMath::exact, DType::f32, a, b), {67, 200, 96}, ++seed);
    // A 16-byte-misaligned launch (the general kernel), and more than 256 row tiles of 64 rows.
    check_gemm_column_sums(*jit, dgrad, {1000, 520, 64}, ++seed, std::nullopt, 1);
    check_gemm_column_sums(*jit, bias_chain(DType::f32), {20000, 96, 32}, ++seed, GemmTile{64, 64, 8, 2, 4, 2, 8});
  }

  TEST_CASE("gemm col_sum SIMT: two launches give the same bits") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const KernelSpec spec = dgrad_chain(DType::f32);
    for (const Shape& s : {Shape{1000, 520, 64}, Shape{20000, 96, 32}})
      for (const TileConfig& tile : {TileConfig{GemmTile{128, 128, 8, 2, 4, 2, 8}}, TileConfig{GemmTile{64, 64, 16, 2, 4, 2, 8}}})
        check_two_launches(*jit, spec, bias_chain(DType::f32), s, tile, 9900);
  }

  TEST_CASE("gemm col_sum wave-FMA: MFMA and WMMA layouts, f16, bf16 and f32, ragged shapes, every test tile") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 10000;
    for (const WaveTile& t : k_wave_fma_tiles)
      for (DType dt : {DType::bf16, DType::f16, DType::f32})
        for (const Shape& s : {Shape{67, 200, 96}, Shape{1000, 522, 64}, Shape{1, 8, 16}, Shape{130, 70, 33}}) {
          check_gemm_column_sums(*jit, bias_chain(dt, math_of(dt)), s, ++seed, t);
          check_gemm_column_sums(*jit, dgrad_chain(dt, math_of(dt)), s, ++seed, t);
        }
    // Exact f32 operands, a 16-bit [N] output, the other layouts, two sums in one kernel, misaligned
    // operands, and more than 256 row tiles.
    for (const WaveTile& t : {k_wave_fma_tiles[0], k_wave_fma_tiles[2]}) {
      check_gemm_column_sums(*jit, dgrad_chain(DType::f32), {300, 264, 96}, ++seed, t);
      check_gemm_column_sums(*jit, dgrad_chain(DType::bf16, GemmMath::exact, DType::bf16), {200, 136, 96}, ++seed, t);
      for (Layout a : {Layout::row, Layout::col})
        for (Layout b : {Layout::row, Layout::col})
          check_gemm_column_sums(*jit, dgrad_chain(DType::f16, GemmMath::exact, DType::f32, a, b), {67, 200, 96}, ++seed, t);
      KernelSpec two = dgrad_chain(DType::bf16);
      two.graph.output("acc_sum", two.graph.col_sum(two.graph.accumulator(0)), DType::f32);
      check_gemm_column_sums(*jit, two, {1000, 520, 64}, ++seed, t);
      check_gemm_column_sums(*jit, dgrad_chain(DType::f16), {96, 128, 64}, ++seed, t, 1);
      check_gemm_column_sums(*jit, bias_chain(DType::bf16), {20000, 96, 32}, ++seed, t);
    }
  }

  TEST_CASE("gemm col_sum wave-FMA: two launches give the same bits") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const KernelSpec spec = dgrad_chain(DType::bf16);
    for (const Shape& s : {Shape{1000, 520, 64}, Shape{20000, 96, 32}})
      for (const WaveTile& t : k_wave_fma_tiles) check_two_launches(*jit, spec, bias_chain(DType::bf16), s, TileConfig{t}, 10100);
  }
}

TEST_SUITE("gpu_sm90") {
  TEST_CASE("gemm col_sum sm90: every wgmma candidate, f16, bf16 and tf32, ragged M and N, persistent blocks") {
    Jit* jit = hopper_jit();
    if (!jit) return;
    std::uint64_t seed = 9500;
    for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
      const KernelSpec spec = dgrad_chain(dt, math_of(dt));
      const std::vector<TileConfig> tiles = wgmma_candidates(spec);
      CHECK(tiles.size() == 11);
      // Compile each shape class's kernels in parallel: N % 4 == 0 (16-bit
      // dacc: the fragment epilogue) and N % 4 != 0 (the staged one).
      (void)jit->compile_all(spec, {1000, 520, 64}, tiles);
      (void)jit->compile_all(spec, {300, 130, 96}, tiles);
      for (const TileConfig& tile : tiles)
        // Ragged M and N; N % 4 != 0 and K not a multiple of BK; more tiles
        // than SMs, so a block (a ping-pong warpgroup) sums several tiles.
        for (const Shape& s : {Shape{1000, 520, 64}, Shape{300, 130, 96}, Shape{2056, 2000, 72}})
          check_gemm_column_sums(*jit, spec, s, ++seed, tile);
    }
    // The bias chain (B row-major) on 16-bit operands, and a 16-bit [N] output.
    for (const TileConfig& tile : wgmma_candidates(bias_chain(DType::bf16)))
      check_gemm_column_sums(*jit, bias_chain(DType::bf16), {1000, 520, 64}, ++seed, tile);
    check_gemm_column_sums(*jit, dgrad_chain(DType::bf16, GemmMath::exact, DType::bf16), {1000, 520, 64}, ++seed,
                           WgmmaTile{128, 128, 64, 6, 8, 1, 1});
    // A misaligned launch of a wgmma key runs its general kernel (mma.sync), with its own workspace.
    check_gemm_column_sums(*jit, dgrad_chain(DType::bf16), {1000, 520, 64}, ++seed, WgmmaTile{128, 256, 64, 4, 8}, 1);
  }

  TEST_CASE("gemm col_sum sm90: more than 256 row tiles on every wgmma candidate") {
    Jit* jit = hopper_jit();
    if (!jit) return;
    // 258 row tiles of 256 rows (515 of 128); N of 72 against BN 64..256.
    std::uint64_t seed = 9600;
    const KernelSpec spec = dgrad_chain(DType::bf16);
    for (const TileConfig& tile : wgmma_candidates(spec)) check_gemm_column_sums(*jit, spec, {65800, 72, 64}, ++seed, tile);
  }

  TEST_CASE("gemm col_sum sm90: two launches give the same bits on every wgmma candidate") {
    Jit* jit = hopper_jit();
    if (!jit) return;
    const KernelSpec spec = dgrad_chain(DType::bf16);
    const KernelSpec other = bias_chain(DType::bf16);
    for (const Shape& s : {Shape{1000, 520, 64}, Shape{2056, 2000, 72}, Shape{65800, 72, 64}})
      for (const TileConfig& tile : wgmma_candidates(spec)) {
        INFO("shape " << s.m << "x" << s.n << "x" << s.k << " tile " << to_string(tile));
        const TensorMap inputs = make_inputs(spec, s, 9700);
        const TensorMap first = run_on_device(*jit, spec, s, inputs, {}, tile);
        // Another col_sum kernel with the same tile on the same stream in
        // between: the shared scratch workspace holds its partial rows.
        run_on_device(*jit, other, s, make_inputs(other, s, 9701), {}, tile);
        const TensorMap second = run_on_device(*jit, spec, s, inputs, {}, tile);
        CHECK(same_bits(first.at("db"), second.at("db")));
        CHECK(same_bits(first.at("dacc"), second.at("dacc")));
      }
  }
}
