// Compile tier for col_sum outputs in a GEMM's epilogue (Note [GEMM column
// sums]): the mma.sync kernels NVRTC must accept for sm_80, sm_86 and sm_90a,
// on the fragment and staged epilogues, with split-K, and the wgmma kernels
// for sm_90a (every candidate, cooperative, cluster and ping-pong, fragment
// and staged epilogues), for f16, bf16 and tf32 operands; and the SIMT
// (exact f32) and wave-FMA kernels for sm_80 and sm_90a. Skips with a
// visible line without NVRTC. (The wave kernel's AMD forms: test_hiprtc.cpp.)
#include <doctest/doctest.h>

#include <chrono>

#include "backend/nvrtc.hpp"
#include "epifuse/jit.hpp"

using namespace epifuse;

namespace {

bool have_nvrtc() {
  if (backend::nvrtc_or_null()) return true;
  MESSAGE("compile tier skipped: " << backend::nvrtc_unavailable_reason());
  return false;
}

// dacc = acc * gelu_tanh_deriv(saved), db = col_sum(dacc), and a second sum
// of the bias chain's kind: two column sums in one kernel.
KernelSpec dgrad_two_sums(DType dt) {
  KernelSpec s;
  s.mainloop = {MainloopKind::gemm, dt, dt, Layout::row, Layout::col,
                dt == DType::f32 ? GemmMath::tf32 : GemmMath::exact};
  Graph& g = s.graph;
  const Value dacc = g.mul(g.accumulator(0), g.unary(OpKind::gelu_tanh_deriv, g.input("saved", dt)));
  g.output("dacc", dacc, dt);
  g.output("db", g.col_sum(dacc), DType::f32);
  g.output("dacc_sum", g.col_sum(g.accumulator(0)), dt == DType::f32 ? DType::f32 : dt);
  return s;
}

// dacc = acc * gelu_tanh_deriv(saved), db = col_sum(dacc): one column sum.
KernelSpec dgrad_one_sum(DType dt) {
  KernelSpec s;
  s.mainloop = {MainloopKind::gemm, dt, dt, Layout::row, Layout::col,
                dt == DType::f32 ? GemmMath::tf32 : GemmMath::exact};
  Graph& g = s.graph;
  const Value dacc = g.mul(g.accumulator(0), g.unary(OpKind::gelu_tanh_deriv, g.input("saved", dt)));
  g.output("dacc", dacc, dt);
  g.output("db", g.col_sum(dacc), DType::f32);
  return s;
}

}  // namespace

TEST_SUITE("compile") {
  TEST_CASE("gemm col_sum kernels compile for sm_80, sm_86 and sm_90a" * doctest::test_suite("nvrtc")) {
    if (!have_nvrtc()) return;
    int compiled = 0;
    auto compile = [&](Jit& jit, const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& tile) {
      INFO(jit.target() << " " << to_string(spec.mainloop.a) << " " << shape.m << "x" << shape.n << "x" << shape.k
                        << " tile " << (tile ? to_string(*tile) : "default"));
      auto kernel = jit.compile(spec, shape, tile);
      CHECK(kernel->binary().size() > 4);
      CHECK(kernel->binary()[0] == 0x7f);  // ELF
      ++compiled;
    };
    for (const char* target : {"sm_80", "sm_86", "sm_90a"}) {
      Jit jit(target);
      // Every candidate at a shape of few tiles and a long K: the fragment and
      // staged epilogues, one warp row or four, and split-K.
      const KernelSpec bf16 = dgrad_two_sums(DType::bf16);
      const Shape few{256, 256, 1024};
      const std::vector<TileConfig> candidates = tile_candidates(bf16, few, target);
      CHECK(candidates.size() >= 10);
      for (const TileConfig& tile : candidates) compile(jit, bf16, few, tile);
      // The other operands: the default tiles of a small and a large shape, and a fragment tile.
      for (DType dt : {DType::f16, DType::f32}) {
        const KernelSpec spec = dgrad_two_sums(dt);
        compile(jit, spec, {67, 200, 96}, std::nullopt);
        compile(jit, spec, {4096, 4096, 256}, std::nullopt);
        compile(jit, spec, {67, 200, 96}, TileConfig{GemmTile{64, 64, 32, 2, 2, 4, 8}});
      }
    }
    MESSAGE("compiled " << compiled << " gemm col_sum kernels");
  }

  TEST_CASE("gemm col_sum wgmma kernels compile for sm_90a" * doctest::test_suite("nvrtc")) {
    if (!have_nvrtc()) return;
    Jit jit("sm_90a");
    int compiled = 0;
    double slowest = 0, total = 0;
    auto compile = [&](const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& tile) {
      INFO(to_string(spec.mainloop.a) << " " << shape.m << "x" << shape.n << "x" << shape.k << " tile "
                                      << (tile ? to_string(*tile) : "default"));
      const auto start = std::chrono::steady_clock::now();
      auto kernel = jit.compile(spec, shape, tile);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      CHECK(std::holds_alternative<WgmmaTile>(kernel->source().tile));
      CHECK(kernel->binary().size() > 4);
      CHECK(kernel->binary()[0] == 0x7f);  // ELF
      slowest = std::max(slowest, ms);
      total += ms;
      ++compiled;
    };
    // Every wgmma candidate at 4096^2 (wgmma tiles alone): with 16-bit
    // operands the fragment epilogue, with tf32 the staged one.
    const Shape big{4096, 4096, 256};
    for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
      const KernelSpec spec = dgrad_one_sum(dt);
      const std::vector<TileConfig> candidates = tile_candidates(spec, big, "sm_90a");
      CHECK(candidates.size() == 11);
      for (const TileConfig& tile : candidates) compile(spec, big, tile);
    }
    // The staged epilogue with 16-bit operands: N % 4 != 0 (element stores),
    // on a cooperative and a ping-pong tile; and two sums in one kernel.
    for (DType dt : {DType::bf16, DType::f16})
      for (const WgmmaTile& t : {WgmmaTile{128, 256, 64, 4, 8}, WgmmaTile{128, 128, 64, 6, 8, 1, 1}})
        compile(dgrad_one_sum(dt), {4096, 4090, 256}, TileConfig{t});
    for (const TileConfig& tile : tile_candidates(dgrad_two_sums(DType::bf16), big, "sm_90a"))
      compile(dgrad_two_sums(DType::bf16), big, tile);
    MESSAGE("compiled " << compiled << " wgmma col_sum kernels, " << total / compiled << " ms each on average, "
                        << slowest << " ms the slowest");
  }
  TEST_CASE("gemm col_sum SIMT and wave-FMA kernels compile for sm_80 and sm_90a" * doctest::test_suite("nvrtc")) {
    if (!have_nvrtc()) return;
    int compiled = 0;
    for (const char* target : {"sm_80", "sm_90a"}) {
      Jit jit(target);
      auto compile = [&](const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& tile) {
        INFO(target << " " << to_string(spec.mainloop.a) << " " << shape.m << "x" << shape.n << "x" << shape.k
                    << " tile " << (tile ? to_string(*tile) : "default"));
        auto kernel = jit.compile(spec, shape, tile);
        CHECK(kernel->binary().size() > 4);
        CHECK(kernel->binary()[0] == 0x7f);  // ELF
        ++compiled;
      };
      // Exact f32 (SIMT): every candidate, two sums in one kernel, ragged and 16-byte shapes.
      KernelSpec simt = dgrad_two_sums(DType::f32);
      simt.mainloop.math = GemmMath::exact;
      for (const Shape& shape : {Shape{67, 200, 96}, Shape{1000, 520, 64}})
        for (const TileConfig& tile : tile_candidates(simt, shape, target)) compile(simt, shape, tile);
      // The wave kernel's FMA form (what the GPU suite runs): both layouts, f32 and bf16, N % 4 == 0 or not.
      for (const WaveTile& t : {WaveTile{64, 64, 32, 2, 2, 8, 0, 1}, WaveTile{128, 128, 32, 2, 2, 8, 0, 1},
                                WaveTile{64, 64, 32, 2, 2, 8, 1, 1}, WaveTile{128, 128, 32, 2, 4, 8, 1, 1},
                                WaveTile{32, 32, 64, 1, 1, 8, 1, 1}})
        for (DType dt : {DType::bf16, DType::f32})
          for (const Shape& shape : {Shape{1000, 520, 64}, Shape{67, 202, 96}}) compile(dgrad_two_sums(dt), shape, t);
    }
    MESSAGE("compiled " << compiled << " SIMT and wave-FMA gemm col_sum kernels");
  }
}
