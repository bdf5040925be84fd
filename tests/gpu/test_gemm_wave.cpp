// GPU tier for the wave GEMM (templates/gemm_wave.cu.in, docs/amd.md), the
// AMD mainloop: its FMA form computes each instruction's fragment layout (the
// MFMA 32x32 layout on 64-lane waves, the WMMA 16x16 one on 32-lane waves)
// with the same loaders, barriers, staging and epilogue as the native form,
// so running it here checks all of that code numerically, the epilogue's
// row/col mapping of each AMD instruction included. Only the instruction
// itself (and the wavefront's width) is left to the AMD compile tier
// (tests/compile/test_hiprtc.cpp). Skips without a GPU.
#include <doctest/doctest.h>

#include <memory>

#include "epifuse/compare.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/reference.hpp"
#include "gemm_checks.hpp"
#include "gpu_jit.hpp"

using namespace epifuse;

namespace {

using testing::gpu_jit;

using testing::check;
using testing::check_dual;
using testing::check_mask;
using testing::dual_spec;
using testing::gemm_spec;

// The FMA form of each layout, at the heuristic's two sizes and a few others.
const WaveTile k_tiles[] = {
    {128, 128, 32, 2, 2, 8, 0, 1}, {64, 64, 32, 2, 2, 8, 0, 1}, {64, 64, 16, 2, 2, 8, 0, 1},
    {32, 64, 64, 1, 2, 4, 0, 1},   {128, 128, 32, 2, 4, 8, 1, 1}, {64, 64, 32, 2, 2, 8, 1, 1},
    {32, 32, 64, 1, 1, 8, 1, 1},   {64, 128, 16, 4, 2, 2, 1, 1},
};

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("wave gemm (FMA form of MFMA and WMMA layouts): f16, bf16, f32 and tf32, all layouts, odd shapes") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const Shape shapes[] = {{1, 1, 1}, {7, 63, 65}, {65, 1000, 7}, {63, 7, 1000}, {200, 136, 96}};
    std::uint64_t seed = 9000;
    for (const WaveTile& t : {k_tiles[1], k_tiles[5]})
      for (DType dt : {DType::f16, DType::bf16, DType::f32})
        for (Layout a : {Layout::row, Layout::col})
          for (Layout b : {Layout::row, Layout::col})
            for (const Shape& s : shapes) check(*jit, gemm_spec(dt, a, b), s, ++seed, t);
    for (const WaveTile& t : {k_tiles[1], k_tiles[5]})
      check(*jit, gemm_spec(DType::f32, Layout::col, Layout::row, 0.0, RngMode::philox4, Broadcast::col,
                            GemmMath::tf32), {200, 136, 96}, ++seed, t);
  }

  TEST_CASE("wave gemm: every test tile, on the 16-byte path, the element path and misaligned operands") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 9500;
    for (const WaveTile& t : k_tiles) {
      check(*jit, gemm_spec(DType::f16, Layout::row, Layout::col), {256, 192, 160}, ++seed, t);
      check(*jit, gemm_spec(DType::bf16, Layout::col, Layout::row), {129, 131, 67}, ++seed, t);  // ld1: element loads
      check(*jit, gemm_spec(DType::f16, Layout::row, Layout::row), {96, 128, 64}, ++seed, t, 1);  // misaligned
    }
  }

  TEST_CASE("wave gemm: K = 0, several outputs, dropout masks equal the reference's") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    check(*jit, gemm_spec(DType::f16, Layout::row, Layout::row), {40, 72, 0}, 9700, k_tiles[0]);
    KernelSpec s;
    s.mainloop = {MainloopKind::gemm, DType::bf16, DType::bf16, Layout::row, Layout::col};
    Graph& g = s.graph;
    const Value z = g.add(g.accumulator(0), g.input("bias", DType::bf16, Broadcast::col));
    g.output("pre", z, DType::f32);
    g.output("y", g.gelu_tanh(z), DType::bf16);
    for (const WaveTile& t : {k_tiles[0], k_tiles[4]}) check(*jit, s, {77, 96, 40}, 9701, t);
    for (const WaveTile& t : {k_tiles[1], k_tiles[6]})
      for (RngMode rng : {RngMode::philox4, RngMode::triton})
        for (const Shape& shape : {Shape{128, 256, 64}, Shape{65, 130, 33}})  // n4 and n1
          check_mask(*jit, gemm_spec(DType::f16, Layout::row, Layout::row, 0.3, rng), shape, 9702, t);
  }

  TEST_CASE("wave dual gemm: gating, SwiGLU and GEGLU over two accumulators, masks exact") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 9800;
    for (const WaveTile& t : {WaveTile{128, 64, 32, 2, 2, 8, 0, 1}, WaveTile{64, 64, 32, 2, 2, 8, 1, 1}})
      for (testing::Chain chain : {testing::Chain::gating, testing::Chain::swiglu, testing::Chain::geglu})
        for (DType dt : {DType::f16, DType::bf16}) {
          check_dual(*jit, dual_spec(dt, Layout::row, Layout::col, chain), {130, 200, 72}, ++seed, t);
          check_dual(*jit, dual_spec(dt, Layout::col, Layout::row, chain), {16, 256, 256}, ++seed, t);
          check_mask(*jit, dual_spec(dt, Layout::row, Layout::row, chain, 0.25), {96, 128, 64}, ++seed, t);
        }
  }

  TEST_CASE("wave gemm: native instructions and bad tiles are user errors on NVIDIA" * doctest::test_suite("gpu_nvidia")) {
    Jit* jit = gpu_jit();
    if (!jit) return;
    const KernelSpec spec = gemm_spec(DType::f16, Layout::row, Layout::row);
    CHECK_THROWS_AS(jit->compile(spec, {64, 64, 64}, WaveTile{64, 64, 32, 2, 2, 8, 0, 0}), UserError);  // MFMA itself
    CHECK_THROWS_AS(jit->compile(spec, {64, 64, 64}, WaveTile{64, 64, 32, 4, 2, 8, 0, 1}), UserError);  // 16-row waves
    CHECK_THROWS_AS(jit->compile(spec, {64, 64, 64}, WaveTile{256, 256, 64, 2, 2, 8, 0, 1}), UserError);  // accumulators
  }
}
