// Compile tier for col_sum outputs in a GEMM's epilogue (Note [GEMM column
// sums]): the mma.sync kernels NVRTC must accept for sm_80, sm_86 and sm_90a,
// on the fragment and staged epilogues, with split-K, for f16, bf16 and tf32
// operands. Skips with a visible line without NVRTC.
#include <doctest/doctest.h>

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
}
