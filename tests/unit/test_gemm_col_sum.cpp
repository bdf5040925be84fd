// col_sum outputs in a GEMM's epilogue without a GPU (Note [GEMM column sums],
// src/codegen/gemm/gemm.hpp): which mainloop and tiles a chain gets on each
// NVIDIA target, the workspace, what the emitted kernel holds, and the
// refusals of the mainloops that do not sum columns.
#include <doctest/doctest.h>

#include <string>

#include "codegen/family.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/json.hpp"

using namespace epifuse;

namespace {

// y = acc + bias, db = col_sum(y): the chain docs/gemm-backward.md §2 starts from.
constexpr const char* k_bias_chain = R"({"epifuse":1,"name":"gemm_colsum","mainloop":{"kind":"gemm","a":"bf16","b":"bf16"},
  "inputs":{"bias":{"dtype":"bf16","broadcast":"row"}},
  "ops":[{"name":"h","op":"add","args":["acc","bias"]},{"name":"db","op":"col_sum","args":["h"]}],
  "outputs":{"y":{"dtype":"bf16","value":"h"},"db":{"dtype":"f32"}}})";

// dacc = acc * gelu_tanh_deriv(saved), db = col_sum(dacc): a dgrad epilogue.
KernelSpec dgrad(DType dt, GemmMath math = GemmMath::exact, MainloopKind kind = MainloopKind::gemm) {
  KernelSpec s;
  s.mainloop = {kind, dt, dt, Layout::row, Layout::col, math};
  Graph& g = s.graph;
  const Value dacc = g.mul(g.accumulator(0), g.unary(OpKind::gelu_tanh_deriv, g.input("saved", dt)));
  g.output("dacc", dacc, dt);
  g.output("db", g.col_sum(dacc), DType::f32);
  return s;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("gemm col_sum: the mma.sync mainloop on every NVIDIA target, sm_90a included") {
    const KernelSpec spec = spec_from_json_text(k_bias_chain);
    for (const char* target : {"sm_80", "sm_86", "sm_90a"})
      for (const Shape& shape : {Shape{256, 256, 64}, Shape{4096, 4096, 256}, Shape{67, 200, 96}}) {
        INFO(target << " " << shape.m << "x" << shape.n << "x" << shape.k);
        const KernelSource ks = emit_kernel(spec, shape, std::nullopt, KernelPath::fastest, target);
        CHECK(std::holds_alternative<GemmTile>(ks.tile));
        const std::vector<TileConfig> candidates = tile_candidates(spec, shape, target);
        CHECK_FALSE(candidates.empty());
        for (const TileConfig& c : candidates) {
          REQUIRE(std::holds_alternative<GemmTile>(c));
          const GemmTile& t = std::get<GemmTile>(c);
          CHECK(t.bn / t.warps_n <= 128);
        }
      }
    // The same chain without its col_sum keeps wgmma on sm_90a at 4096^2.
    KernelSpec plain;
    plain.mainloop = spec.mainloop;
    plain.graph.output("y", plain.graph.add(plain.graph.accumulator(0), plain.graph.input("bias", DType::bf16, Broadcast::row)),
                       DType::bf16);
    CHECK(std::holds_alternative<WgmmaTile>(
        emit_kernel(plain, {4096, 4096, 256}, std::nullopt, KernelPath::fastest, "sm_90a").tile));
  }

  TEST_CASE("gemm col_sum: the workspace holds a counter per column tile and a partial row per row tile") {
    const KernelSpec spec = dgrad(DType::bf16);
    const KernelFamily& family = family_for(spec);
    const Shape shape{1000, 520, 64};
    const GemmTile t{64, 64, 32, 2, 2, 4, 8};
    const KernelSource ks = emit_kernel(spec, shape, TileConfig{t});
    const WorkspaceNeeds w = family.workspace(ks, shape);
    const std::size_t tiles_m = (1000 + 63) / 64, tiles_n = (520 + 63) / 64;
    CHECK(w.zeroed == tiles_n * 4);
    CHECK(w.scratch == ks.outputs.size() * tiles_m * 520 * 4);  // sized for every output: an upper bound
    // Split-K's flags and partial tiles first, the column sums' after them.
    GemmTile split = t;
    split.split_k = 2;
    const KernelSource sk = emit_kernel(spec, {256, 256, 1024}, TileConfig{split});
    const WorkspaceNeeds ws = family.workspace(sk, {256, 256, 1024});
    CHECK(ws.zeroed == 16 * 4 + 4 * 4);
    CHECK(ws.scratch == 16 * 64 * 64 * 4 + ks.outputs.size() * 4 * 256 * 4);
    // No col_sum, no workspace (the plain kernel's).
    const KernelSource plain = emit_kernel(spec_from_json_text(R"({"epifuse":1,"mainloop":{"kind":"gemm","a":"bf16","b":"bf16"},
      "outputs":{"y":{"dtype":"bf16","value":"acc"}}})"), shape, TileConfig{t});
    CHECK(family.workspace(plain, shape).zeroed == 0);
    CHECK(family.workspace(plain, shape).scratch == 0);
  }

  TEST_CASE("gemm col_sum: the emitted kernel sums columns on the fragments and on the staged epilogue") {
    const KernelSpec spec = dgrad(DType::f16);
    const Shape shape{67, 200, 96};
    // 32x32 warp tiles: the fragment epilogue, two columns of each fragment a lane.
    const std::string fragment = emit_kernel(spec, shape, TileConfig{GemmTile{64, 64, 32, 2, 2, 4, 8}}).text;
    CHECK(count(fragment, "float out1_s[NI][2] = {};") == 1);
    CHECK(count(fragment, "out1_s[ni][e & 1] += out1_v;") == 1);
    CHECK(count(fragment, "for (int o = 4; o < 32; o *= 2)") == 1);
    CHECK(count(fragment, "o1 = v") == 1);
    CHECK(count(fragment, "// a column term") == 2);  // the epilogue's output and the lane's sum
    CHECK(count(fragment, "atomicAdd(counter, 1u)") == 1);
    CHECK(count(fragment, "p.out1[n0 + c] = ef_from_float<float>(t);") == 1);
    CHECK(fragment.find("p.out1[at]") == std::string::npos);  // the [N] output is never stored per element
    // 64x64 warp tiles: the staged epilogue, four fixed columns a lane, its quads unguarded.
    const std::string staged = emit_kernel(spec, {256, 256, 64}, TileConfig{GemmTile{128, 128, 32, 2, 2, 4, 8}}).text;
    CHECK(count(staged, "float out1_s[4] = {};") == 1);
    CHECK(count(staged, "if (row < p.m) out1_s[e] += out1_v;") == 1);
    CHECK(count(staged, "for (int o = WTN / 4; o < 32; o *= 2)") == 1);
    CHECK(staged.find("out1_q") == std::string::npos);
    CHECK(count(staged, "float out0_q[4];") == 1);
  }

  TEST_CASE("gemm col_sum: a chain without col_sum emits no column-sum code") {
    const KernelSpec plain = spec_from_json_text(R"({"epifuse":1,"mainloop":{"kind":"gemm","a":"bf16","b":"bf16"},
      "inputs":{"bias":{"dtype":"bf16","broadcast":"row"}},"ops":[{"name":"h","op":"add","args":["acc","bias"]}],
      "outputs":{"y":{"dtype":"bf16","value":"h"}}})");
    for (const GemmTile& t : {GemmTile{64, 64, 32, 2, 2, 4, 8}, GemmTile{128, 256, 32, 2, 4, 4, 8}}) {
      const std::string text = emit_kernel(plain, {256, 256, 64}, TileConfig{t}).text;
      CHECK(text.find("col_counters") == std::string::npos);
      CHECK(text.find("column sums") == std::string::npos);
      CHECK(text.find("ef_cp_async_wait<0>();\n\n") != std::string::npos);
    }
  }

  TEST_CASE("gemm col_sum: the other mainloops refuse it, naming why") {
    const KernelSpec spec = spec_from_json_text(k_bias_chain);
    const Shape shape{256, 256, 64};
    CHECK_THROWS_WITH_AS(emit_kernel(spec, shape, TileConfig{WgmmaTile{}}, KernelPath::fastest, "sm_90a"),
                         doctest::Contains("col_sum 'db': the wgmma mainloop (tile h"), UserError);
    CHECK_THROWS_WITH_AS(emit_kernel(spec, shape, TileConfig{WaveTile{}}, KernelPath::fastest, "sm_80"),
                         doctest::Contains("col_sum 'db': the wave mainloop"), UserError);
    CHECK_THROWS_WITH_AS(emit_kernel(spec, shape, std::nullopt, KernelPath::fastest, "gfx90a"),
                         doctest::Contains("col_sum 'db': the AMD wave mainloop (gfx90a) does not sum columns yet"),
                         UserError);
    CHECK_THROWS_WITH_AS(tile_candidates(spec, shape, "gfx942"), doctest::Contains("AMD wave mainloop"), UserError);
    // Exact f32 is the SIMT mainloop's; tf32 runs on mma.sync.
    CHECK_THROWS_WITH_AS(emit_kernel(dgrad(DType::f32), shape, std::nullopt, KernelPath::fastest, "sm_80"),
                         doctest::Contains("the SIMT mainloop of exact f32 GEMMs"), UserError);
    CHECK_THROWS_WITH_AS(tile_candidates(dgrad(DType::f32), shape, "sm_80"), doctest::Contains("SIMT mainloop"), UserError);
    CHECK(std::holds_alternative<GemmTile>(
        emit_kernel(dgrad(DType::f32, GemmMath::tf32), shape, std::nullopt, KernelPath::fastest, "sm_80").tile));
    // A dual GEMM's epilogue does not sum columns.
    KernelSpec dual = dgrad(DType::bf16, GemmMath::exact, MainloopKind::dual_gemm);
    CHECK_THROWS_WITH_AS(emit_kernel(dual, shape), doctest::Contains("col_sum: a dual_gemm epilogue does not sum columns"),
                         UserError);
    // A warp tile wider than 128 columns: a staged lane's columns would move.
    CHECK_THROWS_WITH_AS(emit_kernel(spec, shape, TileConfig{GemmTile{64, 256, 32, 2, 1, 3, 8}}),
                         doctest::Contains("at most 128 columns wide"), UserError);
    // A col_sum that an op reads has no value at one element.
    KernelSpec read = dgrad(DType::bf16);
    read.graph.output("twice", read.graph.add(read.graph.col_sum(read.graph.accumulator(0)),
                                              read.graph.input("b2", DType::bf16, Broadcast::row)),
                      DType::f32);
    CHECK_THROWS_WITH_AS(emit_kernel(read, shape), doctest::Contains("the gemm family writes a col_sum as an [N] output only"),
                         UserError);
  }
}
