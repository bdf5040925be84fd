// The wave GEMM's tiles (WaveTile, docs/amd.md): the text form, the choice per
// AMD target (the instruction each architecture has, or the FMA form), the
// rules a tile must keep, and what the emitted kernel asks for. No GPU.
#include <doctest/doctest.h>

#include <algorithm>

#include "codegen/family.hpp"
#include "codegen/gemm/gemm.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"

using namespace epifuse;

namespace {

KernelSpec gemm(DType dt, MainloopKind kind = MainloopKind::gemm, GemmMath math = GemmMath::exact) {
  KernelSpec spec;
  spec.mainloop = {kind, dt, dt, Layout::row, Layout::col, math};
  Graph& g = spec.graph;
  Value y = g.relu(g.accumulator(0));
  if (kind == MainloopKind::dual_gemm) y = g.mul(y, g.accumulator(1));
  g.output("y", y, dt);
  return spec;
}

WaveTile resolved(const KernelSpec& spec, const Shape& shape, std::string_view target) {
  return std::get<WaveTile>(family_for(spec).resolve_tile(spec, shape, std::nullopt, target));
}

}  // namespace

TEST_CASE("wave tiles: text form round trip; anything else is a user error naming the form") {
  for (const WaveTile& t : {WaveTile{128, 128, 32, 2, 2, 8, 0, 0}, WaveTile{64, 64, 16, 2, 2, 4, 1, 1},
                            WaveTile{32, 64, 64, 1, 2, 8, 0, 1}, WaveTile{128, 64, 32, 4, 2, 8, 1, 0}})
    CHECK(std::get<WaveTile>(parse_tile(t.str())) == t);
  CHECK(WaveTile{128, 128, 32, 2, 2, 8, 0, 0}.str() == "m128x128x32w2x2g8.mfma");
  CHECK(WaveTile{64, 64, 32, 2, 2, 8, 1, 1}.str() == "m64x64x32w2x2g8.wmma-fma");
  for (const char* bad : {"m", "m128x128x32w2x2g8", "m128x128x32w2x2g8.xdl", "m128x128x32w2x2g8.mfma-", "m128x128x32g8.mfma"})
    CHECK_THROWS_WITH_AS(parse_tile(bad), doctest::Contains("expected mBMxBNxBKwWMxWNgGROUP.OP"), UserError);
  CHECK(tile_hash(WaveTile{64, 64, 32, 2, 2, 8, 0, 0}) != tile_hash(WaveTile{64, 64, 32, 2, 2, 8, 0, 1}));
  CHECK(tile_hash(WaveTile{64, 64, 32, 2, 2, 8, 0, 0}) != tile_hash(GemmTile{64, 64, 32, 2, 2, 8, 0, 0}));
}

TEST_CASE("wave tiles: MFMA on gfx90a and gfx942, WMMA on gfx11, the FMA form elsewhere and for f32") {
  const Shape big{4096, 4096, 4096}, small{128, 256, 256};
  for (DType dt : {DType::f16, DType::bf16}) {
    for (const char* cdna : {"gfx90a", "gfx90a:xnack-", "gfx942"}) {
      const WaveTile t = resolved(gemm(dt), big, cdna);
      CHECK(t.op == 0);
      CHECK(t.fma == 0);
      CHECK(t.lanes() == 64);
    }
    CHECK(resolved(gemm(dt), big, "gfx1100") == WaveTile{128, 128, 32, 2, 4, 8, 1, 0});
    CHECK(resolved(gemm(dt), small, "gfx1100") == WaveTile{64, 64, 32, 2, 2, 8, 1, 0});
    CHECK(resolved(gemm(dt, MainloopKind::dual_gemm), big, "gfx1100") == WaveTile{128, 64, 32, 4, 2, 8, 1, 0});
    CHECK(resolved(gemm(dt, MainloopKind::dual_gemm), big, "gfx942") == WaveTile{128, 64, 32, 2, 2, 8, 0, 0});
    for (const char* rdna : {"gfx1030", "gfx1201"}) CHECK(resolved(gemm(dt), big, rdna) == WaveTile{64, 64, 32, 2, 2, 8, 1, 1});
  }
  CHECK(resolved(gemm(DType::f32), big, "gfx90a") == WaveTile{64, 64, 16, 2, 2, 8, 0, 1});
  CHECK(resolved(gemm(DType::f32, MainloopKind::gemm, GemmMath::tf32), big, "gfx1100") == WaveTile{64, 64, 16, 2, 2, 8, 1, 1});
  // NVIDIA targets keep their own mainloops unless a wave tile is asked for.
  CHECK(std::holds_alternative<GemmTile>(family_for(gemm(DType::f16)).resolve_tile(gemm(DType::f16), big, std::nullopt, "sm_80")));
  // The tuner's candidates for an AMD target are wave tiles of its instruction, the untuned choice first.
  const auto c = tile_candidates(gemm(DType::f16), big, "gfx942");
  REQUIRE(c.size() >= 4);
  CHECK(std::get<WaveTile>(c.front()) == resolved(gemm(DType::f16), big, "gfx942"));
  CHECK(std::all_of(c.begin(), c.end(), [](const TileConfig& t) {
    const auto* w = std::get_if<WaveTile>(&t);
    return w && w->op == 0 && w->fma == 0;
  }));
}

TEST_CASE("wave tiles: the rules, each a user error that says which") {
  const KernelSpec f16 = gemm(DType::f16);
  const Shape s{256, 256, 256};
  auto refused = [&](const KernelSpec& spec, const WaveTile& t, std::string_view target, const char* why) {
    CAPTURE(t.str());
    CHECK_THROWS_WITH_AS(family_for(spec).resolve_tile(spec, s, TileConfig{t}, target), doctest::Contains(why), UserError);
  };
  refused(f16, {64, 64, 32, 2, 2, 8, 0, 0}, "gfx1100", "MFMA runs on gfx90a and gfx942 only");
  refused(f16, {64, 64, 32, 2, 2, 8, 1, 0}, "gfx90a", "WMMA runs on gfx11 only");
  refused(f16, {64, 64, 32, 2, 2, 8, 0, 0}, "sm_90a", "the FMA form");
  refused(gemm(DType::f32), {64, 64, 16, 2, 2, 8, 0, 0}, "gfx90a", "f32 operands take the FMA form");
  refused(f16, {64, 64, 32, 4, 2, 8, 0, 1}, "gfx90a", "whole 32x32 fragments");
  refused(f16, {64, 64, 24, 2, 2, 8, 0, 1}, "gfx90a", "BK must be 16, 32 or 64");
  refused(f16, {256, 256, 32, 2, 2, 8, 0, 0}, "gfx90a", "at most 128 for MFMA");
  refused(gemm(DType::f16, MainloopKind::dual_gemm), {128, 64, 32, 2, 2, 8, 1, 0}, "gfx1100", "at most 64 for WMMA");
  refused(f16, {256, 256, 64, 4, 4, 8, 0, 1}, "gfx90a", "shared memory");
  refused(f16, {256, 256, 64, 8, 4, 8, 0, 1}, "gfx90a", "at most 1024 lanes");
  // An AMD target takes wave tiles only.
  CHECK_THROWS_WITH_AS(family_for(f16).resolve_tile(f16, s, TileConfig{GemmTile{}}, "gfx90a"),
                       doctest::Contains("AMD targets take wave tiles"), UserError);
}

TEST_CASE("wave kernel text: the instruction's wrapper, the FMA form's, tf32 rounding, the dual GEMM's second B") {
  const Shape s{256, 256, 256};
  CHECK(emit_kernel(gemm(DType::bf16), s, std::nullopt, KernelPath::fastest, "gfx942").text.find("EfMfma32<T, true>") !=
        std::string::npos);
  CHECK(emit_kernel(gemm(DType::f16), s, std::nullopt, KernelPath::fastest, "gfx1100").text.find("EfWmma16<T, true>") !=
        std::string::npos);
  CHECK(emit_kernel(gemm(DType::f16), s, std::nullopt, KernelPath::fastest, "gfx1030").text.find("EfWmma16<T, false>") !=
        std::string::npos);
  const KernelSource tf32 =
      emit_kernel(gemm(DType::f32, MainloopKind::gemm, GemmMath::tf32), s, std::nullopt, KernelPath::fastest, "gfx90a");
  CHECK(tf32.text.find("constexpr bool TF32 = true;") != std::string::npos);
  const KernelSource dual = emit_kernel(gemm(DType::f16, MainloopKind::dual_gemm), s, std::nullopt, KernelPath::fastest, "gfx90a");
  CHECK(dual.text.find("constexpr bool DUAL = true;") != std::string::npos);
  CHECK(dual.text.find("reinterpret_cast<const E*>(p.b1)") != std::string::npos);
  // Shared memory: two buffers of A and B (rows padded by 16 bytes), or the staging, whichever is larger.
  CHECK(wave_shared_bytes(WaveTile{128, 128, 32, 2, 2, 8, 0, 0}, 2) == 2u * 256u * 80u);
  CHECK(wave_shared_bytes(WaveTile{64, 128, 16, 1, 2, 8, 0, 1}, 2, true) == 2u * 2u * 32u * 68u * 4u);
}
