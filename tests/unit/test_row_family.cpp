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
    CHECK(count(sm, "ef_block_max<THREADS>") == 1);
    CHECK(count(sm, "ef_block_sum<THREADS>") == 1);
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
    CHECK(count(a, "ef_philox4_draws(") == 1);
    CHECK(a.find("ef_philox4_draws(") > a.find("// stage 2"));
    // N % 4 != 0: one Philox call per element, at the element's own index.
    const std::string odd = emit_kernel(att, {8, 1002, 0}).text;
    CHECK(odd.find("ef_philox4_draw(p.seed") != std::string::npos);
  }
}
