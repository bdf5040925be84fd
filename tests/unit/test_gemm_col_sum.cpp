// col_sum outputs in a GEMM's epilogue without a GPU (Note [GEMM column sums],
// src/codegen/gemm/gemm.hpp): which mainloop and tiles a chain gets on each
// NVIDIA target (mma.sync, and wgmma on sm_90a), the workspace, the wgmma
// kernel's shared memory, what the emitted kernels hold (mma.sync, wgmma,
// SIMT, and the wave kernel on AMD targets and in its FMA form), and what is
// still refused.
#include <doctest/doctest.h>

#include <optional>
#include <string>

#include "codegen/family.hpp"
#include "codegen/gemm/gemm.hpp"
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
  TEST_CASE("gemm col_sum: mma.sync on sm_80 and sm_86, and on sm_90a the tiles any chain gets") {
    const KernelSpec spec = spec_from_json_text(k_bias_chain);
    for (const char* target : {"sm_80", "sm_86"})
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
    // On sm_90a the chain and the same chain without its col_sum get the same
    // default tile and the same candidates: wgmma from 1024^2 outputs (below,
    // mma.sync), wgmma alone from 2048^2.
    KernelSpec plain;
    plain.mainloop = spec.mainloop;
    plain.graph.output("y", plain.graph.add(plain.graph.accumulator(0), plain.graph.input("bias", DType::bf16, Broadcast::row)),
                       DType::bf16);
    for (const Shape& shape : {Shape{256, 256, 64}, Shape{4096, 4096, 256}, Shape{1024, 1024, 64}, Shape{67, 200, 96}}) {
      INFO("sm_90a " << shape.m << "x" << shape.n << "x" << shape.k);
      const TileConfig tile = emit_kernel(spec, shape, std::nullopt, KernelPath::fastest, "sm_90a").tile;
      CHECK(tile == emit_kernel(plain, shape, std::nullopt, KernelPath::fastest, "sm_90a").tile);
      CHECK(std::holds_alternative<WgmmaTile>(tile) == (shape.m * shape.n >= 1024 * 1024));
      const std::vector<TileConfig> candidates = tile_candidates(spec, shape, "sm_90a");
      CHECK(candidates == tile_candidates(plain, shape, "sm_90a"));
      int wgmma = 0;
      for (const TileConfig& c : candidates) wgmma += std::holds_alternative<WgmmaTile>(c) ? 1 : 0;
      CHECK(wgmma == 11);  // every wgmma candidate: cooperative, cluster and ping-pong (64x128, 64x64 and the 192-column ones too)
      CHECK((wgmma == static_cast<int>(candidates.size())) == (shape.m * shape.n >= 2048 * 2048));
    }
    CHECK(std::get<WgmmaTile>(emit_kernel(spec, {4096, 4096, 256}, std::nullopt, KernelPath::fastest, "sm_90a").tile) ==
          WgmmaTile{128, 128, 64, 6, 8, 1, 1});  // Note [Default GEMM tile]
  }

  TEST_CASE("gemm col_sum: the wgmma kernel's colbuf in its shared memory, and the tiles that no longer fit") {
    // A row of BN floats per consumer warp (8) and col_sum, and two flags.
    const WgmmaTile big{128, 256, 64, 4, 8};
    CHECK(wgmma_shared_bytes(big, false, 1) == wgmma_shared_bytes(big) + 8 * 256 * 4 + 16);
    CHECK(wgmma_shared_bytes(big, false, 2) == wgmma_shared_bytes(big) + 2 * 8 * 256 * 4 + 16);
    CHECK(wgmma_shared_bytes(big, false, 0) == wgmma_shared_bytes(big));
    const KernelSpec one = dgrad(DType::bf16);
    const KernelSource ks = emit_kernel(one, {4096, 4096, 256}, TileConfig{big}, KernelPath::fastest, "sm_90a");
    CHECK(ks.shared_bytes == wgmma_shared_bytes(big, false, 1));
    CHECK(ks.shared_bytes <= 227u * 1024u);  // one col_sum fits beside the largest ring
    // Two col_sums: the 4-stage 128x256 rings no longer fit. A default of
    // 128x256 (a staged epilogue with the saved input, here its dropout; Note
    // [Default GEMM tile], from K = 4096) gives up a stage, the tuner leaves
    // them out, a request is refused.
    KernelSpec two = dgrad(DType::bf16);
    two.graph.output("acc_sum", two.graph.col_sum(two.graph.accumulator(0)), DType::f32);
    CHECK(wgmma_shared_bytes(big, false, 2) > 227u * 1024u);
    KernelSpec two_staged = two;
    two_staged.graph.output("dropped", two_staged.graph.dropout(two_staged.graph.accumulator(0), 0.1), DType::bf16);
    const WgmmaTile two_default =
        std::get<WgmmaTile>(emit_kernel(two_staged, {4096, 4096, 4096}, std::nullopt, KernelPath::fastest, "sm_90a").tile);
    CHECK(two_default == WgmmaTile{128, 256, 64, 3, 8});
    // Without dropout the fragment epilogue's default, the ping-pong 128x128, keeps its six stages.
    CHECK(std::get<WgmmaTile>(emit_kernel(two, {4096, 4096, 256}, std::nullopt, KernelPath::fastest, "sm_90a").tile) ==
          WgmmaTile{128, 128, 64, 6, 8, 1, 1});
    CHECK(wgmma_shared_bytes(two_default, false, 2) <= 227u * 1024u);
    const std::vector<TileConfig> candidates = tile_candidates(two, {4096, 4096, 256}, "sm_90a");
    CHECK(candidates.size() == 8);  // h128x192 s5 does not fit beside two sums' rows either
    for (const TileConfig& c : candidates) CHECK(std::get<WgmmaTile>(c).bn != 256);
    CHECK_THROWS_WITH_AS(emit_kernel(two, {4096, 4096, 256}, TileConfig{big}, KernelPath::fastest, "sm_90a"),
                         doctest::Contains("bytes of shared memory, more than the 232448 a block can have"), UserError);
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
    // The wgmma kernel's: no split-K, tiles of its own; its general path (a
    // misaligned launch) is the mma.sync fallback tile's kernel, counted in that tile.
    const Shape big{5000, 520, 64};
    for (const WgmmaTile& w : {WgmmaTile{128, 256, 64, 4, 8}, WgmmaTile{128, 128, 64, 6, 8, 1, 1}}) {
      const KernelSource wk = emit_kernel(spec, big, TileConfig{w}, KernelPath::fastest, "sm_90a");
      const WorkspaceNeeds ww = family.workspace(wk, big);
      const std::size_t wtiles_m = (5000 + w.bm - 1) / w.bm, wtiles_n = (520 + w.bn - 1) / w.bn;
      CHECK(ww.zeroed == wtiles_n * 4);
      CHECK(ww.scratch == wk.outputs.size() * wtiles_m * 520 * 4);
      const KernelSource general = emit_kernel(spec, big, TileConfig{w}, KernelPath::general, "sm_90a");
      CHECK(general.text.find("mma.sync") != std::string::npos);
      const WorkspaceNeeds wg = family.workspace(general, big);
      CHECK(wg.zeroed == (520 + 127) / 128 * 4);
      CHECK(wg.scratch == general.outputs.size() * ((5000 + 127) / 128) * 520 * 4);
    }
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

  TEST_CASE("gemm col_sum: the wgmma kernel sums columns on the fragment and the staged epilogues") {
    // bf16 dacc and f32 db, N % 4 == 0: the fragment epilogue (only [M,N] outputs count).
    const Shape shape{4096, 4096, 256};
    for (int pingpong : {0, 1}) {
      INFO("pingpong " << pingpong);
      const WgmmaTile t{128, 128, 64, 6, 8, 1, pingpong};
      const std::string fragment = emit_kernel(dgrad(DType::bf16), shape, TileConfig{t}, KernelPath::fastest, "sm_90a").text;
      CHECK(count(fragment, "FRAGMENT_EPILOGUE = true;") == 1);
      CHECK(count(fragment, "float out1_s[16] = {};") == 1);
      CHECK(count(fragment, "if (row < p.m) out1_s[f * 2 + e] += out1_v;") == 1);
      // By halves: xor 4, 8 and 16 over the fragment's 16 sums, 8, 4 and 2 kept.
      CHECK(count(fragment, "for (int i = 0; i < 8; ++i) {") == 1);
      CHECK(count(fragment, "__shfl_xor_sync(0xffffffffu, give, 4);") == 1);
      CHECK(count(fragment, "__shfl_xor_sync(0xffffffffu, give, 16);") == 2);  // the staged branch's too
      CHECK(count(fragment, "float out1_s[4] = {};") == 1);  // the staged branch, compiled out
      CHECK(count(fragment, "ef_named_barrier_sync(1 + team, TEAM);") == 3);
      CHECK(count(fragment, "atomicAdd(counter, 1u)") == 1);
      CHECK(count(fragment, "p.out1[n0 + c] = ef_from_float<float>(t);") == 1);
      CHECK(count(fragment, "constexpr int COL_SUMS = 1;") == 1);
      CHECK(count(fragment, "unsigned* col_counters;") == 1);
      CHECK(count(fragment, "return;") == 0);  // persistent: a block goes on to its next tile
      CHECK(fragment.find("p.out1[at]") == std::string::npos);
    }
    // tf32 (f32 dacc): the staged epilogue, four fixed columns a lane, xor 8 and 16.
    const std::string staged =
        emit_kernel(dgrad(DType::f32, GemmMath::tf32), shape, std::nullopt, KernelPath::fastest, "sm_90a").text;
    CHECK(count(staged, "FRAGMENT_EPILOGUE = false;") == 1);
    CHECK(count(staged, "float out1_s[4] = {};") == 1);
    CHECK(count(staged, "if (row < p.m) out1_s[e] += out1_v;") == 1);
    CHECK(count(staged, "__shfl_xor_sync(0xffffffffu, give, 8);") == 1);
    CHECK(count(staged, "__shfl_xor_sync(0xffffffffu, give, 4);") == 0);
    CHECK(count(staged, "*at = mi == 0 ? out1_s[0] : *at + out1_s[0];") == 1);
    CHECK(staged.find("out1_q") == std::string::npos);
    // Ragged N (N % 4 != 0): element stores, each term guarded by its row and column.
    const std::string ragged = emit_kernel(dgrad(DType::bf16), {4096, 4090, 256}, std::nullopt, KernelPath::fastest,
                                           "sm_90a").text;
    CHECK(count(ragged, "FRAGMENT_EPILOGUE = false;") == 1);
    CHECK(count(ragged, "              out1_s[e] += out1_v;  // a column term") == 1);
  }

  TEST_CASE("gemm col_sum SIMT: the exact-f32 kernel sums a thread's TN columns, its warps through the A tiles") {
    const KernelSpec spec = dgrad(DType::f32);
    const KernelFamily& family = family_for(spec);
    for (const Shape& shape : {Shape{67, 200, 96}, Shape{1000, 520, 64}, Shape{4096, 4096, 256}}) {
      INFO(shape.m << "x" << shape.n << "x" << shape.k);
      const KernelSource ks = emit_kernel(spec, shape, std::nullopt, KernelPath::fastest, "sm_80");
      REQUIRE(std::holds_alternative<GemmTile>(ks.tile));
      const GemmTile& t = std::get<GemmTile>(ks.tile);
      CHECK(t.warps_m * t.warps_n == 8);  // a SIMT tile
      CHECK(ks.text.find("exact fp32, FFMA") != std::string::npos);
      CHECK(gemm_sums_columns(ks));
      CHECK(ks.shared_bytes == 0);  // static shared memory: colbuf reuses the A tiles
      // A counter per column tile, a partial row per row tile (every output: an upper bound).
      const WorkspaceNeeds w = family.workspace(ks, shape);
      CHECK(w.zeroed == static_cast<std::size_t>((shape.n + t.bn - 1) / t.bn) * 4);
      CHECK(w.scratch == ks.outputs.size() * static_cast<std::size_t>((shape.m + t.bm - 1) / t.bm) *
                             static_cast<std::size_t>(shape.n) * 4);
      CHECK(tile_candidates(spec, shape, "sm_80").size() == 8);  // every SIMT candidate takes the chain
    }
    const std::string text = emit_kernel(spec, {67, 200, 96}, std::nullopt, KernelPath::fastest, "sm_80").text;
    CHECK(count(text, "float out1_s[TN] = {};") == 1);
    CHECK(count(text, "          out1_s[jg * 4 + e] += out1_v;  // a column term") == 1);  // inside the row < M guard
    CHECK(count(text, "out1_s[j] += __shfl_xor_sync(0xffffffffu, out1_s[j], 16);") == 1);
    CHECK(count(text, "colbuf[(tid >> 5) * BN + (j / 4) * 64 + tx * 4 + j % 4] = out1_s[j];") == 1);
    CHECK(count(text, "constexpr int COL_ROWS = THREADS / 32;") == 1);
    CHECK(count(text, "for (int w = 1; w < COL_ROWS; ++w) t += colbuf[w * BN + c];") == 1);
    CHECK(count(text, "atomicAdd(counter, 1u)") == 1);
    CHECK(count(text, "t += __ldcg(partials + (0 * tiles_m + r) * p.n + n0 + c);") == 1);
    CHECK(count(text, "p.out1[n0 + c] = ef_from_float<float>(t);") == 1);
    CHECK(count(text, "*counter = 0u;") == 1);
    CHECK(count(text, "unsigned* col_counters;") == 1);
    CHECK(text.find("p.out1[at]") == std::string::npos);  // the [N] output is never stored per element
    // Two sums: a row of partials each, combined one after the other through colbuf.
    KernelSpec two = spec;
    two.graph.output("acc_sum", two.graph.col_sum(two.graph.accumulator(0)), DType::f32);
    const std::string both = emit_kernel(two, {67, 200, 96}, std::nullopt, KernelPath::fastest, "sm_80").text;
    CHECK(count(both, "_s[j] += __shfl_xor_sync") == 2);
    CHECK(count(both, "partials[(1 * tiles_m + tile_m) * p.n + n0 + c] = t;") == 1);
    CHECK(count(both, "atomicAdd(counter, 1u)") == 1);
  }

  TEST_CASE("gemm col_sum wave: a lane's four staged columns, no shuffles, on gfx90a, gfx1100 and the FMA form") {
    const KernelSpec spec = dgrad(DType::bf16);
    const KernelFamily& family = family_for(spec);
    struct Case {
      const char* target;
      std::optional<TileConfig> tile;
      const char* op;
    };
    const Case cases[] = {{"gfx90a", std::nullopt, "EfMfma32<T, true>"},
                          {"gfx1100", std::nullopt, "EfWmma16<T, true>"},
                          {"gfx1030", std::nullopt, "EfWmma16<T, false>"},
                          {"sm_80", TileConfig{WaveTile{64, 64, 32, 2, 2, 8, 0, 1}}, "EfMfma32<T, false>"},
                          {"sm_80", TileConfig{WaveTile{128, 128, 32, 2, 4, 8, 1, 1}}, "EfWmma16<T, false>"}};
    for (const Case& c : cases)
      for (const Shape& shape : {Shape{67, 200, 96}, Shape{1000, 520, 64}, Shape{4096, 4096, 256}}) {
        INFO(c.target << " " << shape.m << "x" << shape.n << "x" << shape.k);
        const KernelSource ks = emit_kernel(spec, shape, c.tile, KernelPath::fastest, c.target);
        REQUIRE(std::holds_alternative<WaveTile>(ks.tile));
        const WaveTile& t = std::get<WaveTile>(ks.tile);
        CHECK(ks.text.find(c.op) != std::string::npos);
        CHECK(gemm_sums_columns(ks));
        CHECK(count(ks.text, "float out1_s[4] = {};") == 1);
        CHECK(count(ks.text, "out1_s[e] += out1_v;  // a column term") == 1);
        CHECK(count(ks.text, "colbuf[((wave % WAVES_M) * (LANES / (WTN / 4)) + lane / (WTN / 4)) * BN + wn + "
                             "lane % (WTN / 4) * 4 + e] = out1_s[e];") == 1);
        CHECK(count(ks.text, "constexpr int COL_ROWS = WAVES_M * (LANES / (WTN / 4));") == 1);
        CHECK(count(ks.text, "atomicAdd(counter, 1u)") == 1);
        CHECK(count(ks.text, "t += ef_col_partial_load(partials + (0 * tiles_m + r) * p.n + n0 + c);") == 1);
        CHECK(count(ks.text, "p.out1[n0 + c] = ef_from_float<float>(t);") == 1);
        CHECK(ks.text.find("shfl") == std::string::npos);  // a wave may be two NVIDIA warps; HIP has no _sync shuffles
        CHECK(ks.text.find("__ldcg") == std::string::npos);
        CHECK(ks.text.find("p.out1[at]") == std::string::npos);
        CHECK(ks.shared_bytes == wave_shared_bytes(t, 2));  // colbuf reuses the staging area
        const WorkspaceNeeds w = family.workspace(ks, shape);
        CHECK(w.zeroed == static_cast<std::size_t>((shape.n + t.bn - 1) / t.bn) * 4);
        CHECK(w.scratch == ks.outputs.size() * static_cast<std::size_t>((shape.m + t.bm - 1) / t.bm) *
                               static_cast<std::size_t>(shape.n) * 4);
      }
    // N % 4 != 0 (element stores): each term inside the element's row and column guard; N % 4 == 0
    // (unguarded quads): the term masked by its row.
    CHECK(count(emit_kernel(spec, {67, 202, 96}, std::nullopt, KernelPath::fastest, "gfx90a").text,
                "          out1_s[e] += out1_v;  // a column term") == 1);
    CHECK(count(emit_kernel(spec, {67, 200, 96}, std::nullopt, KernelPath::fastest, "gfx90a").text,
                "if (row < p.m) out1_s[e] += out1_v;") == 1);
    // The tuner's wave candidates take the chain: the plain chain's.
    KernelSpec plain;
    plain.mainloop = spec.mainloop;
    plain.graph.output("y", plain.graph.accumulator(0), DType::bf16);
    for (const char* target : {"gfx90a", "gfx1100", "gfx942"})
      CHECK(tile_candidates(spec, {4096, 4096, 256}, target) == tile_candidates(plain, {4096, 4096, 256}, target));
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
    for (const WgmmaTile& t : {WgmmaTile{128, 256, 64, 4, 8}, WgmmaTile{128, 128, 64, 6, 8, 1, 1}}) {
      const KernelSource ks = emit_kernel(plain, {4096, 4096, 256}, TileConfig{t}, KernelPath::fastest, "sm_90a");
      CHECK(ks.text.find("colbuf") == std::string::npos);
      CHECK(ks.text.find("col_counters") == std::string::npos);
      CHECK(ks.shared_bytes == wgmma_shared_bytes(t));
    }
    // The SIMT kernel (exact f32) and the wave kernel (AMD, and its FMA form on NVIDIA).
    KernelSpec f32 = plain;
    f32.mainloop.a = f32.mainloop.b = DType::f32;
    const std::string simt = emit_kernel(f32, {256, 256, 64}, std::nullopt, KernelPath::fastest, "sm_80").text;
    CHECK(simt.find("col_counters") == std::string::npos);
    CHECK(simt.find("colbuf") == std::string::npos);
    CHECK(simt.find("    }\n  }\n\n  // Epilogue, one accumulator row per pass") != std::string::npos);
    for (const char* target : {"gfx90a", "gfx1100"}) {
      const KernelSource ks = emit_kernel(plain, {256, 256, 64}, std::nullopt, KernelPath::fastest, target);
      CHECK(ks.text.find("col_counters") == std::string::npos);
      CHECK(ks.text.find("colbuf") == std::string::npos);
      CHECK(ks.text.find("float* stage1 = stage + Op::M * SROW;\n#pragma unroll") != std::string::npos);
      CHECK(family_for(plain).workspace(ks, {256, 256, 64}).zeroed == 0);
    }
  }

  TEST_CASE("gemm col_sum: what still refuses it, naming why (dual GEMM, batched, split-K on SIMT, wide tiles)") {
    const KernelSpec spec = spec_from_json_text(k_bias_chain);
    const Shape shape{256, 256, 64};
    // The SIMT and wave mainloops sum columns: no refusal on any target.
    CHECK_NOTHROW(emit_kernel(dgrad(DType::f32), shape, std::nullopt, KernelPath::fastest, "sm_80"));
    CHECK_NOTHROW(tile_candidates(dgrad(DType::f32), shape, "sm_80"));
    CHECK_NOTHROW(emit_kernel(spec, shape, std::nullopt, KernelPath::fastest, "gfx90a"));
    CHECK_NOTHROW(tile_candidates(spec, shape, "gfx942"));
    CHECK_NOTHROW(emit_kernel(spec, shape, TileConfig{WaveTile{64, 64, 32, 2, 2, 8, 0, 1}}, KernelPath::fastest, "sm_80"));
    // The SIMT mainloop has no split-K (col_sum or not); a batched col_sum chain is refused on every mainloop.
    CHECK_THROWS_WITH_AS(emit_kernel(dgrad(DType::f32), shape, TileConfig{GemmTile{64, 64, 8, 2, 4, 2, 8, 2}},
                                     KernelPath::fastest, "sm_80"),
                         doctest::Contains("an f32 (FFMA) tile has"), UserError);
    for (const char* target : {"sm_80", "gfx90a", "gfx1100"}) {
      INFO(target);
      CHECK_THROWS_WITH_AS(emit_kernel(dgrad(DType::f32), Shape{256, 256, 64, 0, 0, 0, 2}, std::nullopt,
                                       KernelPath::fastest, target),
                           doctest::Contains("output 'db'"), UserError);
    }
    // A wave tile wider than four columns a lane: a staged lane's columns would move.
    CHECK_THROWS_WITH_AS(emit_kernel(spec, shape, TileConfig{WaveTile{16, 256, 16, 1, 1, 8, 1, 1}}, KernelPath::fastest,
                                     "sm_80"),
                         doctest::Contains("a chain with a col_sum needs wave tiles at most 128 columns wide"), UserError);
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
