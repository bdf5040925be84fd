// The row family without a GPU: which specs it takes, its tiles (resolution,
// text form, shape classes), its launch geometry, and the stages it cuts a
// graph into (Note [Row stages]), read off the emitted source.
#include <doctest/doctest.h>

#include <string>

#include "codegen/family.hpp"
#include "codegen/row/row.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/errors.hpp"

using namespace epifuse;

namespace {

KernelSpec softmax_spec(DType dt) {
  KernelSpec s;
  s.graph.output("y", s.graph.softmax(s.graph.input("x", dt)), dt);
  return s;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("row family: chosen for elementwise graphs with a row reduction, refused for a GEMM's") {
    const KernelSpec sm = softmax_spec(DType::bf16);
    CHECK(has_row_reduction(sm));
    CHECK(&family_for(sm) != &family_for(MainloopKind::elementwise));
    KernelSpec plain;
    plain.graph.output("y", plain.graph.exp(plain.graph.input("x", DType::f32)), DType::f32);
    CHECK_FALSE(has_row_reduction(plain));
    CHECK(&family_for(plain) == &family_for(MainloopKind::elementwise));
    KernelSpec gemm;
    gemm.mainloop.kind = MainloopKind::gemm;
    gemm.graph.output("y", gemm.graph.softmax(gemm.graph.accumulator()), DType::f32);
    CHECK_THROWS_WITH_AS(family_for(gemm), doctest::Contains("cannot reduce rows"), UserError);
  }

  TEST_CASE("row tiles: text form, resolution for N, shape classes") {
    CHECK(RowTile{256, 8, 2, 1}.str() == "r256v8x2");
    CHECK(RowTile{1024, 4, 0, 0}.str() == "r1024v4x0b");
    CHECK(parse_row_tile("r256v8x2") == RowTile{256, 8, 2, 1});
    CHECK(parse_row_tile("r128v0x-1b") == RowTile{128, 0, -1, 0});
    CHECK(std::get<RowTile>(parse_tile("r64v1x0")) == RowTile{64, 1, 0, 1});
    CHECK(RowTile{256, 8, 4, 1, 32, 1}.str() == "r256v8x4g32");
    CHECK(RowTile{1024, 8, 4, 0, 0, 4}.str() == "r1024v8x4c4b");
    CHECK(parse_row_tile("r256v8x4g32") == RowTile{256, 8, 4, 1, 32, 1});
    CHECK(parse_row_tile("r1024v8x4c4b") == RowTile{1024, 8, 4, 0, 0, 4});
    CHECK(parse_row_tile("r256v8x4g8c2") == RowTile{256, 8, 4, 1, 8, 2});  // refused by the family, not the parser
    CHECK_THROWS_AS(parse_row_tile("r256v8x4g"), UserError);
    CHECK_THROWS_AS(parse_row_tile("r256v8x4c4g32"), UserError);  // suffixes in order
    CHECK_THROWS_AS(parse_row_tile("r256v8x4q"), UserError);
    CHECK(parse_row_tile("r512v8x8c8s2") == RowTile{512, 8, 8, 1, 0, 8, 2});
    CHECK(RowTile{512, 8, 8, 0, 0, 1, 3}.str() == "r512v8x8s3b");
    CHECK_THROWS_WITH_AS(parse_row_tile("r256v8"), doctest::Contains("rTHREADSvVECxREGS"), UserError);
    CHECK_THROWS_AS(parse_row_tile("r256v8x2q"), UserError);

    const KernelSpec bf = softmax_spec(DType::bf16), f32 = softmax_spec(DType::f32);
    // 16 bytes of bf16, rows of 4096 in two vectors a thread.
    CHECK(resolve_row_tile(bf, {8, 4096, 0}, RowTile{}) == RowTile{256, 8, 2, 1});
    // vec lowered until it divides N; N = 1000 = 8 * 125.
    CHECK(resolve_row_tile(bf, {8, 1000, 0}, RowTile{}).vec == 8);
    CHECK(resolve_row_tile(bf, {8, 1002, 0}, RowTile{}).vec == 2);
    CHECK(resolve_row_tile(f32, {8, 7, 0}, RowTile{}).vec == 1);
    // Rows that do not fit 64 floats a thread stream.
    CHECK(resolve_row_tile(f32, {8, 16384, 0}, RowTile{}).regs == 16);
    CHECK(resolve_row_tile(f32, {8, 65536, 0}, RowTile{}).regs == 0);
    CHECK(resolve_row_tile(f32, {8, 65536, 0}, RowTile{1024, 0, -1, 1}).regs == 16);

    const KernelFamily& row = family_for(bf);
    const TileConfig t = row.resolve_tile(bf, {8, 4096, 0}, std::nullopt, "sm_90a");
    CHECK(row.shape_class(bf, t, {8, 4096, 0}) == "row");
    CHECK(row.shape_class(bf, t, {8, 4100, 0}) == "row/n_not_vec");
    CHECK(row.shape_class(bf, t, {8, 8192, 0}) == "row/n_too_long");
    CHECK_THROWS_AS(row.resolve_tile(bf, {8, 4096, 0}, ElementwiseTile{}, ""), UserError);
    CHECK_THROWS_AS(row.resolve_tile(bf, {8, 4096, 0}, RowTile{100, 0, -1, 1}, ""), UserError);
    CHECK_THROWS_AS(row.resolve_tile(bf, {8, 4096, 0}, RowTile{256, 0, 40, 1}, ""), UserError);
    // Groups and clusters: a row's threads are group x cluster.
    CHECK(resolve_row_tile(bf, {8, 1024, 0}, RowTile{256, 0, -1, 1, 32, 1}).regs == 4);
    CHECK(resolve_row_tile(bf, {8, 262144, 0}, RowTile{1024, 0, -1, 1, 0, 8}).regs == 4);
    CHECK(row.shape_class(bf, RowTile{256, 8, 4, 1, 32, 1}, {8, 1024, 0}) == "row");
    CHECK(row.shape_class(bf, RowTile{256, 8, 4, 1, 32, 1}, {8, 2048, 0}) == "row/n_too_long");
    CHECK_THROWS_AS(row.resolve_tile(bf, {8, 4096, 0}, RowTile{256, 0, -1, 1, 24, 1}, ""), UserError);
    CHECK_THROWS_AS(row.resolve_tile(bf, {8, 4096, 0}, RowTile{256, 0, -1, 1, 64, 1}, ""), UserError);
    CHECK_THROWS_AS(row.resolve_tile(bf, {8, 4096, 0}, RowTile{256, 0, -1, 1, 0, 3}, ""), UserError);
    CHECK_THROWS_AS(row.resolve_tile(bf, {8, 4096, 0}, RowTile{256, 0, -1, 1, 32, 2}, ""), UserError);
    CHECK_THROWS_WITH_AS(row.resolve_tile(bf, {8, 4096, 0}, RowTile{256, 0, -1, 1, 0, 2}, "sm_80"),
                         doctest::Contains("sm_90"), UserError);
    CHECK_NOTHROW(row.resolve_tile(bf, {8, 4096, 0}, RowTile{256, 0, -1, 1, 0, 2}, "sm_90a"));
    // Rings: sm_90, whole blocks, 16-byte vectors; the ring's N is split evenly between a cluster's blocks.
    CHECK_THROWS_AS(row.resolve_tile(bf, {8, 4096, 0}, RowTile{256, 0, -1, 1, 0, 1, 2}, "sm_80"), UserError);
    CHECK_THROWS_AS(row.resolve_tile(bf, {8, 4096, 0}, RowTile{256, 0, -1, 1, 32, 1, 2}, ""), UserError);
    CHECK_THROWS_AS(row.resolve_tile(bf, {8, 4100, 0}, RowTile{256, 0, -1, 1, 0, 1, 2}, ""), UserError);
    CHECK_THROWS_WITH_AS(row.resolve_tile(bf, {8, 1000, 0}, RowTile{256, 0, -1, 1, 0, 2, 2}, ""),
                         doctest::Contains("does not split"), UserError);
    // A requested tile that cannot hold the row is refused, not emitted with part of the row left out.
    CHECK_THROWS_WITH_AS(row.resolve_tile(bf, {8, 8192, 0}, RowTile{256, 8, 2, 1}, ""),
                         doctest::Contains("holds rows of up to 4096"), UserError);
    const RowTile ring = std::get<RowTile>(row.resolve_tile(bf, {8, 262144, 0}, RowTile{512, 0, -1, 1, 0, 8, 2}, ""));
    CHECK(ring.regs == 8);  // no register limit: the row sits in shared memory
    CHECK(ring_bytes(bf, ring) == 2 * 512 * 8 * 8 * 2);
    CHECK(row.shape_class(bf, ring, {8, 262144, 0}) == "row");
    CHECK(row.shape_class(bf, ring, {8, 262144 - 8, 0}) == "row/n_not_ring");
  }

  TEST_CASE("row family: candidates hold the row in groups, blocks and clusters, in both grids") {
    const KernelSpec bf = softmax_spec(DType::bf16);
    auto has = [](const std::vector<TileConfig>& c, const std::string& s) {
      return std::any_of(c.begin(), c.end(), [&](const TileConfig& t) { return to_string(t) == s; });
    };
    const std::vector<TileConfig> short_rows = tile_candidates(bf, {4096, 1024, 0}, "sm_90a");
    CHECK(has(short_rows, "r256v8x4g32"));
    CHECK(has(short_rows, "r256v8x4g32b"));
    CHECK(has(short_rows, "r128v8x1"));
    CHECK_FALSE(has(short_rows, "r256v8x16g8"));  // 64 floats a thread at most
    CHECK_FALSE(has(short_rows, "r1024v8x1c2"));  // a cluster for a row one block holds
    const std::vector<TileConfig> long_rows = tile_candidates(bf, {512, 262144, 0}, "sm_90a");
    CHECK(has(long_rows, "r1024v8x4c8"));
    CHECK(has(long_rows, "r1024v8x0"));
    CHECK_FALSE(has(long_rows, "r1024v8x0c8"));
    // N odd: vectors of one element, too narrow for a ring's 16-byte copies; every candidate resolves.
    for (const TileConfig& t : tile_candidates(bf, {64, 4097, 0}, "sm_90a")) {
      CHECK(std::get<RowTile>(t).ring == 0);
      CHECK_NOTHROW(family_for(bf).resolve_tile(bf, {64, 4097, 0}, t, "sm_90a"));
    }
    const std::vector<TileConfig> ampere = tile_candidates(bf, {512, 262144, 0}, "sm_80");
    CHECK(std::none_of(ampere.begin(), ampere.end(), [](const TileConfig& t) { return std::get<RowTile>(t).cluster > 1; }));
  }

  TEST_CASE("row family: groups and clusters size the grid in blocks") {
    const KernelSpec bf = softmax_spec(DType::bf16);
    const Shape shape{1001, 1024, 0};
    const LaunchGeometry g = family_for(bf).geometry(emit_kernel(bf, shape, RowTile{256, 0, -1, 0, 32, 1}), shape, 132);
    CHECK(g.grid[0] == 126);  // 8 rows a block
    const Shape long_shape{100, 262144, 0};
    const LaunchGeometry c =
        family_for(bf).geometry(emit_kernel(bf, long_shape, RowTile{1024, 0, -1, 1, 0, 8}, KernelPath::fastest, "sm_90a"),
                                      long_shape, 132);
    CHECK(c.persistent_work == 800);
    CHECK(c.grid_multiple == 8);
  }

  TEST_CASE("row family: persistent grids leave the block count to the launch's occupancy") {
    const KernelSpec bf = softmax_spec(DType::bf16);
    const Shape shape{100000, 4096, 0};
    KernelSource persistent = emit_kernel(bf, shape, RowTile{512, 0, -1, 1});
    KernelSource per_row = emit_kernel(bf, shape, RowTile{512, 0, -1, 0});
    const LaunchGeometry a = family_for(bf).geometry(persistent, shape, 132);
    const LaunchGeometry b = family_for(bf).geometry(per_row, shape, 132);
    CHECK(a.persistent_work == 100000);
    CHECK(a.block[0] == 512);
    CHECK(b.persistent_work == 0);
    CHECK(b.grid[0] == 100000);
  }

  TEST_CASE("row family: stages cut at reductions, rows in registers or streamed") {
    // softmax: max, then the sum of exp(x - max), then the quotient.
    const std::string sm = emit_kernel(softmax_spec(DType::bf16), {8, 4096, 0}).text;
    CHECK(count(sm, "// stage ") == 3);
    CHECK(count(sm, "red.max(") == 1);
    CHECK(count(sm, "red.sum(") == 1);
    CHECK(sm.find("ITEMS = 2") != std::string::npos);
    CHECK(sm.find("in0_x[ITEMS][VEC]") != std::string::npos);  // the row read once
    const std::string streamed = emit_kernel(softmax_spec(DType::f32), {8, 65536, 0}).text;
    CHECK(streamed.find("ITEMS = 0") != std::string::npos);
    CHECK(count(streamed, "ef_load_vec<float, VEC>(p.in0 + base + c0") == 3);  // read again each stage

    // rmsnorm(x + r) with the sum an output: two stages, the sum stored in the last.
    KernelSpec rms;
    Graph& g = rms.graph;
    const Value h = g.add(g.input("x", DType::bf16), g.input("r", DType::bf16));
    g.output("h", h, DType::bf16);
    g.output("y", g.rmsnorm(h, g.input("w", DType::bf16, Broadcast::row), 1e-6), DType::bf16);
    const std::string r = emit_kernel(rms, {8, 4096, 0}).text;
    CHECK(count(r, "// stage ") == 2);
    CHECK(count(r, "ef_store_vec") == 2);
    CHECK(r.find("* p.n_inv") != std::string::npos);  // row_mean

    // Dropout after softmax draws in the last stage only, one Philox call per four elements.
    KernelSpec att;
    att.graph.output("y", att.graph.dropout(att.graph.softmax(att.graph.input("x", DType::bf16)), 0.1), DType::bf16);
    const std::string a = emit_kernel(att, {8, 4096, 0}).text;
    CHECK(count(a, "ef_philox4_draws(") == 2);  // in both copies of the last stage's loop (below)
    CHECK(a.find("ef_philox4_draws(") > a.find("// stage 2"));
    // N % 4 != 0: one Philox call per element, at the element's own index.
    const std::string odd = emit_kernel(att, {8, 1002, 0}).text;
    CHECK(odd.find("ef_philox4_draw(rng.seed") != std::string::npos);
  }

  TEST_CASE("row family: keep (k) computes a value once and reads it in later stages") {
    CHECK(parse_row_tile("r512v8x8c8s1kb") == RowTile{512, 8, 8, 0, 0, 8, 1, 1});
    CHECK(RowTile{128, 8, 1, 1, 0, 1, 0, 1}.str() == "r128v8x1k");
    CHECK(parse_row_tile("r16v8x4c16s1") == RowTile{16, 8, 4, 1, 0, 16, 1});
    CHECK_THROWS_AS(parse_row_tile("r256v8x2bk"), UserError);  // suffixes in order
    // softmax: exp(x - max) is computed in the sum's stage and kept for the quotient's.
    const KernelSpec bf = softmax_spec(DType::bf16);
    const std::string plain = emit_kernel(bf, {8, 4096, 0}, RowTile{256, 8, 2, 1}).text;
    const std::string kept = emit_kernel(bf, {8, 4096, 0}, RowTile{256, 8, 2, 1, 0, 1, 0, 1}).text;
    CHECK(count(plain, "ef_exp_fast(") == 2);
    CHECK(count(kept, "ef_exp_fast(") == 1);
    CHECK(count(kept, "[ITEMS][VEC];  // kept") == 1);
    const std::string ring = emit_kernel(bf, {8, 4096, 0}, RowTile{256, 8, 2, 0, 0, 1, 1, 1}, KernelPath::fastest, "sm_90a").text;
    CHECK(count(ring, "ef_exp_fast(") == 1);
    // A streaming tile has no room for kept values; keep there is refused.
    const KernelFamily& row = family_for(bf);
    CHECK_THROWS_WITH_AS(row.resolve_tile(bf, {8, 65536, 0}, RowTile{256, 0, 0, 1, 0, 1, 0, 1}, ""),
                         doctest::Contains("streaming"), UserError);
    // Keep candidates only where a later stage reads a computed value (not for a plain rmsnorm).
    const std::vector<TileConfig> c = tile_candidates(bf, {4096, 1024, 0}, "sm_90a");
    CHECK(std::any_of(c.begin(), c.end(), [](const TileConfig& t) { return std::get<RowTile>(t).keep == 1; }));
    KernelSpec rms;
    rms.graph.output("y", rms.graph.rmsnorm(rms.graph.input("x", DType::bf16), rms.graph.input("w", DType::bf16, Broadcast::row), 1e-6),
                     DType::bf16);
    CHECK_FALSE(row_keeps_values(rms.graph));
    CHECK(row_keeps_values(bf.graph));
    const std::vector<TileConfig> r = tile_candidates(rms, {4096, 1024, 0}, "sm_90a");
    CHECK(std::none_of(r.begin(), r.end(), [](const TileConfig& t) { return std::get<RowTile>(t).keep == 1; }));
    // Note [Kept values in the ring]: bf16 x and mask leave 4 bytes an element,
    // one fp32 slot: x*scale + mask and then exp(. - max) live there in turn,
    // so no register array; bf16 softmax's 2 bytes hold none (registers).
    KernelSpec att;
    {
      Graph& g = att.graph;
      const Value z = g.add(g.scale(g.input("x", DType::bf16), 0.125), g.input("mask", DType::bf16));
      g.output("y", g.dropout(g.softmax(z), 0.1), DType::bf16);
    }
    const std::string slots =
        emit_kernel(att, {8, 65536, 0}, RowTile{256, 8, 4, 0, 0, 8, 1, 2}, KernelPath::fastest, "sm_90a").text;
    CHECK(count(slots, "[ITEMS][VEC];  // kept") == 0);
    CHECK(count(slots, "ef_store_floats<4>(row_s") == 4);  // two values, each in the x and mask halves
    CHECK(count(slots, "ef_load_floats<4>(row_s") == 6);  // the quotient's stage twice
    CHECK(count(slots, "ef_fence_proxy_async();") == 1);     // before the copy engine refills the bytes
    CHECK(count(ring, "[ITEMS][VEC];  // kept") == 1);  // k: registers
    CHECK(count(ring, "ef_store_floats") == 0);
    CHECK(parse_row_tile("r256v8x4c8s1krb") == RowTile{256, 8, 4, 0, 0, 8, 1, 2});
    CHECK(RowTile{256, 8, 4, 0, 0, 8, 1, 2}.str() == "r256v8x4c8s1krb");
    CHECK(ring_holds_kept_values(att.graph, 8));
    CHECK_FALSE(ring_holds_kept_values(bf.graph, 8));
    CHECK_THROWS_WITH_AS(row.resolve_tile(bf, {8, 4096, 0}, RowTile{256, 8, 2, 0, 0, 1, 1, 2}, "sm_90a"),
                         doctest::Contains("cannot hold"), UserError);
    CHECK_THROWS_WITH_AS(row.resolve_tile(att, {8, 4096, 0}, RowTile{256, 8, 2, 1, 0, 1, 0, 2}, "sm_90a"),
                         doctest::Contains("needs a ring"), UserError);
    const std::vector<TileConfig> ac = tile_candidates(att, {2048, 65536, 0}, "sm_90a");
    CHECK(std::any_of(ac.begin(), ac.end(), [](const TileConfig& t) { return std::get<RowTile>(t).keep == 2; }));
    // A quotient by a row value multiplies by its reciprocal; where the stage
    // draws dropout, the choice to scale a divisor below FLT_MIN first is made
    // once a row (two copies of the loop), elsewhere by a hoisted select.
    CHECK(count(slots, "if (fabsf(v") == 1);
    CHECK(count(slots, "<false>(p") == 1);
    CHECK(count(slots, "<true>(p") == 1);
    CHECK(count(slots, "kTiny ? ") == 1);
    // Note [Draws during the copy]: a ring tile decides the keep bits before it
    // waits for the row's copy; the dropping stage reads bits, no Philox.
    CHECK(count(slots, "ef_philox4_draws(") == 1);
    CHECK(slots.find("ef_philox4_draws(") < slots.find("ef_mbar_wait(ring_bar(slot)"));
    CHECK(count(slots, "d0_bits[(it * VEC + j) / 32] >>") == 2);  // in both copies of the last loop
    CHECK(count(emit_kernel(att, {8, 65536, 0}).text, "_bits[") == 0);  // no ring: Philox in the stage
    CHECK(count(kept, "if (fabsf(v") == 0);
    CHECK(count(kept, "(tiny") == 2);
    // So does a quotient by a per-row input (the sum the attention backward
    // reads back): the row's choice tests the value loaded for the row.
    {
      KernelSpec bwd;
      Graph& g = bwd.graph;
      const Value x = g.input("x", DType::bf16);
      const Value sum = g.input("saved_sum", DType::f32, Broadcast::col);
      const Value d = g.dropout(g.input("dy", DType::bf16), 0.1);
      const Value y = g.div(g.exp(x), sum);
      g.output("dx", g.mul(y, g.sub(d, g.row_sum(g.mul(d, y)))), DType::bf16);
      const std::string drawn = emit_kernel(bwd, {8, 4096, 0}, std::nullopt, KernelPath::fastest, "sm_90a").text;
      CHECK(count(drawn, "if (fabsf(in1_r) >= 1.17549435e-38f)") == 1);
      CHECK(count(drawn, "kTiny ? ") == 1);  // a multiply by the reciprocal, not a division an element
    }
    // Clusters of 16 (non-portable) for the longest rows.
    CHECK_NOTHROW(row.resolve_tile(bf, {8, 262144, 0}, RowTile{512, 0, -1, 1, 0, 16, 1}, "sm_90a"));
    CHECK_THROWS_AS(row.resolve_tile(bf, {8, 262144, 0}, RowTile{512, 0, -1, 1, 0, 32, 1}, "sm_90a"), UserError);
  }
}
