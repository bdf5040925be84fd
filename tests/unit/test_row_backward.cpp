// The row family's [M] outputs and column sums without a GPU: the backward
// examples (examples/backward) load, run on the reference and emit; the
// emitted text has one per-row store and the column tree; the workspace holds
// the tree's counters and partial rows; what the family does not generate is
// a UserError.
#include <doctest/doctest.h>

#include <filesystem>

#include "../gpu/row_backward_specs.hpp"
#include "codegen/family.hpp"
#include "codegen/row/row.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/json.hpp"
#include "epifuse/reference.hpp"

using namespace epifuse;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& text, std::string_view what) { return text.find(what) != std::string::npos; }

int count_of(const std::string& text, std::string_view what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace

TEST_CASE("backward examples: every example in examples/backward loads, runs on the reference and emits") {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(EPIFUSE_SOURCE_DIR) / "examples" / "backward")) {
    if (entry.path().extension() != ".json") continue;
    INFO(entry.path().filename().string());
    const KernelSpec spec = load_spec(entry.path());
    const Shape small{16, 256, 0};
    const TensorMap out = evaluate(spec, small, make_inputs(spec, small, 11), {});
    CHECK(out.size() == spec.graph.outputs().size());
    const KernelSource ks = emit_kernel(spec, Shape{4096, 4096, 0}, std::nullopt, KernelPath::fastest, "sm_90a");
    CHECK(has(ks.text, "extern \"C\" __global__"));
    ++count;
  }
  CHECK(count == 9);  // seven row backward specs and two GEMM dgrad chains (GELU, ReLU)
}

TEST_CASE("row backward: [M] outputs are stored once a row, [N] outputs through the column tree") {
  using namespace epifuse::testing;
  const Shape shape{4096, 4096, 0};
  const KernelSource fwd = emit_kernel(layernorm_forward_stats_spec(DType::bf16, 1e-5), shape, std::nullopt,
                                       KernelPath::fastest, "sm_90a");
  CHECK(has(fwd.text, "_row_outputs("));
  CHECK(has(fwd.text, "if (live && lane == 0)"));
  CHECK_FALSE(has(fwd.text, "ef_col_sums_finish<"));
  CHECK(family_for(layernorm_forward_stats_spec(DType::bf16, 1e-5)).workspace(fwd, shape).scratch == 0);

  const KernelSpec ln = layernorm_backward_spec(DType::bf16);
  const KernelSource bwd = emit_kernel(ln, shape, std::nullopt, KernelPath::fastest, "sm_90a");
  CHECK(has(bwd.text, "ef_col_sums_finish<2,"));
  CHECK(has(bwd.text, "cs[0][it][j] += c"));
  CHECK(has(bwd.text, "cs[1][it][j] += c"));
  CHECK(has(bwd.text, "unsigned* col_counters"));
  CHECK_FALSE(has(bwd.text, "_row_outputs("));
  // The default tile: 512 threads a row (one vector each), a persistent grid of at most 160 x 4 blocks.
  const WorkspaceNeeds w = family_for(ln).workspace(bwd, shape);
  CHECK(w.zeroed == 44 * sizeof(unsigned));  // 40 + 3 + 1 tree nodes above the blocks (fan-in 16)
  CHECK(w.scratch == std::size_t{640} * 4096 * 3 * sizeof(float));  // a row per block and output (3: the bound)
  CHECK(family_for(ln).geometry(bwd, shape, 132).persistent_work == 640);

  // Cluster ranks have trees of their own.
  const KernelSource cl = emit_kernel(ln, Shape{64, 65536, 0}, RowTile{512, 0, -1, 1, 0, 8}, KernelPath::fastest, "sm_90a");
  CHECK(has(cl.text, "(int)ef_row_cluster_rank(), CLUSTER"));
  CHECK(family_for(ln).workspace(cl, Shape{64, 65536, 0}).zeroed == 5 * 8 * sizeof(unsigned));  // 4 + 1 nodes a rank
}

TEST_CASE("row backward: a stage's independent reductions go through the reducer in one call") {
  using namespace epifuse::testing;
  // The layernorm backward's means (of g = dy * w and of g * xhat) are independent: one
  // call of two values, one barrier a row (Note [Reductions of a stage]).
  const KernelSpec ln = layernorm_backward_spec(DType::bf16);
  const std::string block = emit_kernel(ln, Shape{64, 4096, 0}, std::nullopt, KernelPath::fastest, "sm_90a").text;
  const std::string cluster =
      emit_kernel(ln, Shape{64, 65536, 0}, RowTile{512, 0, -1, 1, 0, 8}, KernelPath::fastest, "sm_90a").text;
  for (const std::string& text : {block, cluster}) {
    CHECK(has(text, "constexpr int RED_VALUES = 2;"));
    CHECK(count_of(text, "red.sum_n(") == 1);
    CHECK_FALSE(has(text, "red.sum(acc"));
  }
  CHECK(has(cluster, "CLUSTER = 8;"));
  // Softmax's two reductions depend on each other: one value a call, RED_VALUES 1.
  const std::string sm = emit_kernel(softmax_backward_spec(DType::bf16), Shape{64, 4096, 0}, std::nullopt,
                                     KernelPath::fastest, "sm_90a").text;
  CHECK(has(sm, "constexpr int RED_VALUES = 1;"));
  CHECK_FALSE(has(sm, "red.sum_n("));
}

TEST_CASE("row backward: a ring in pieces waits for each piece and refills its slot once the last stage read it") {
  using namespace epifuse::testing;
  // Note [Ring pieces]: layernorm's f32 backward at 262,144, a cluster of 16,
  // its one-stage ring cut into quarter rows in five slots.
  const KernelSpec ln = layernorm_backward_spec(DType::f32);
  const Shape shape{512, 262144, 0};
  const RowTile whole{1024, 4, 4, 1, 0, 16, 1};
  RowTile quarters = whole;
  quarters.ring = 5;
  quarters.pieces = 4;
  CHECK(quarters.str() == "r1024v4x4c16s5p4");
  CHECK(parse_row_tile("r1024v4x4c16s5p4") == quarters);
  const std::string text = emit_kernel(ln, shape, quarters, KernelPath::fastest, "sm_90a").text;
  CHECK(has(text, "constexpr int RING = 5, PIECES = 4, PIECE_ITEMS = ITEMS / PIECES;"));
  CHECK(count_of(text, "ef_bulk_load(") == 2);  // dy and x, a piece each
  CHECK(count_of(text, "piece_wait(g0 + it / PIECE_ITEMS);") == 2);  // every stage, as it reaches a piece
  CHECK(count_of(text, "piece_read(g0 + it / PIECE_ITEMS - 1);") == 1);  // the last stage frees them
  CHECK(count_of(text, "piece_read(g0 + PIECES - 1);") == 1);
  CHECK(text.find("piece_read(g0 + it") > text.find("// stage 1"));
  CHECK_FALSE(has(text, "RING_STAGE"));  // no whole-row slots
  CHECK_FALSE(has(text, "the slot refilled next was read in the last row"));
  // Five quarter rows of dy and x in f32: 160 KiB; a whole stage is 128 KiB.
  CHECK(ring_bytes(ln, resolve_row_tile(ln, shape, quarters)) == 5 * 128 * 1024 / 4);
  CHECK(ring_bytes(ln, resolve_row_tile(ln, shape, whole)) == 128 * 1024);
  // Refusals name the rule.
  const KernelFamily& row = family_for(ln);
  auto refused = [&](RowTile t, const char* why) {
    CHECK_THROWS_WITH_AS(row.resolve_tile(ln, shape, t, "sm_90a"), doctest::Contains(why), UserError);
  };
  RowTile t = quarters;
  t.pieces = 3;
  refused(t, "pieces (p) are 0");
  t = quarters;
  t.ring = 4;
  refused(t, "more slots than pieces");
  t.ring = 0;
  refused(t, "more slots than pieces");
  t = RowTile{1024, 4, 6, 1, 0, 16, 5, 0, 4};
  refused(t, "unevenly");
  t = quarters;
  t.keep = 2;
  refused(t, "use k (registers)");
  // Candidates: a one-stage ring also in pieces.
  const std::vector<TileConfig> c = tile_candidates(ln, shape, "sm_90a");
  CHECK(std::any_of(c.begin(), c.end(), [&](const TileConfig& x) { return x == TileConfig{quarters}; }));
}

TEST_CASE("row backward: column sums the row family does not generate are user errors") {
  using namespace epifuse::testing;
  const Shape shape{64, 1024, 0};
  {  // a col_sum read by another op
    KernelSpec s;
    Graph& g = s.graph;
    const Value x = g.input("x", DType::f32);
    const Value cs = g.col_sum(g.mul(x, x));
    g.output("y", g.mul(g.div(x, g.row_sum(x)), cs), DType::f32);
    CHECK_THROWS_WITH_AS(emit_kernel(s, shape), doctest::Contains("not as an operand of another op"), UserError);
  }
  {  // an [N] output that is not a col_sum
    KernelSpec s;
    Graph& g = s.graph;
    const Value x = g.input("x", DType::f32), w = g.input("w", DType::f32, Broadcast::row);
    g.output("y", g.div(x, g.row_sum(x)), DType::f32);
    g.output("w2", g.mul(w, w), DType::f32);
    CHECK_THROWS_WITH_AS(emit_kernel(s, shape), doctest::Contains("not a col_sum"), UserError);
  }
  // A streaming tile holds no column of the row.
  CHECK_THROWS_WITH_AS(emit_kernel(layernorm_backward_spec(DType::f32), shape, RowTile{256, 0, 0, 1}),
                       doctest::Contains("cannot sum columns"), UserError);
  for (const TileConfig& t : tile_candidates(layernorm_backward_spec(DType::f32), Shape{8, 262144, 0}, "sm_90a")) {
    const RowTile& r = std::get<RowTile>(t);
    CHECK(r.regs > 0);
    CHECK(r.persistent == 1);
  }
}

TEST_CASE("row backward: the column tree in the ring's shared memory (t) and a launch bound (m)") {
  using namespace epifuse::testing;
  // Note [Column sums]: layernorm's bf16 backward at 65,536 on clusters of 8.
  const KernelSpec ln = layernorm_backward_spec(DType::bf16);
  const Shape shape{2048, 65536, 0};
  RowTile t{512, 8, 2, 1, 0, 8, 2};
  CHECK(t.str() == "r512v8x2c8s2");
  t.tree = 1;
  CHECK(t.str() == "r512v8x2c8s2t");
  t.min_blocks = 2;
  CHECK(t.str() == "r512v8x2c8s2m2t");
  CHECK(parse_row_tile("r512v8x2c8s2m2t") == t);
  CHECK(parse_row_tile("r512v8x2c8s2m2tkb").keep == 1);
  CHECK_THROWS_AS(parse_row_tile("r512v8x2c8s2tm2"), UserError);  // the form's order

  const std::string plain = emit_kernel(ln, shape, RowTile{512, 8, 2, 1, 0, 8, 2}, KernelPath::fastest, "sm_90a").text;
  const std::string text = emit_kernel(ln, shape, t, KernelPath::fastest, "sm_90a").text;
  CHECK(has(plain, "__launch_bounds__(THREADS) __cluster_dims__(8, 1, 1)"));
  CHECK(has(text, "__launch_bounds__(THREADS, 2) __cluster_dims__(8, 1, 1)"));
  CHECK(has(plain, "ef_col_sums_finish<2, ITEMS, VEC, THREADS, GROUP, 16>(cs, col_buf,"));
  CHECK_FALSE(has(text, "ef_col_sums_finish<"));
  CHECK(has(text, "ef_col_sums_finish_shared<2, ITEMS, VEC, THREADS, 16>(cs, reinterpret_cast<float*>(ring),"));
  CHECK_FALSE(has(text, "col_buf"));
  // Two sums of 512 threads x 16 floats: 64 KiB, what the two stages of dy and x hold.
  CHECK(col_sum_bytes(ln, resolve_row_tile(ln, shape, t)) == 64 * 1024);
  CHECK(ring_bytes(ln, resolve_row_tile(ln, shape, t)) == 64 * 1024);

  const KernelFamily& row = family_for(ln);
  auto refused = [&](const KernelSpec& spec, RowTile bad, const char* target, const char* why) {
    CHECK_THROWS_WITH_AS(row.resolve_tile(spec, shape, bad, target), doctest::Contains(why), UserError);
  };
  RowTile bad = t;
  bad.ring = 1;  // one stage: 32 KiB
  refused(ln, bad, "sm_90a", "which do not hold them");
  bad = t;
  bad.ring = 0;
  refused(ln, bad, "sm_90a", "it needs a ring (s)");
  refused(softmax_backward_spec(DType::bf16), t, "sm_90a", "no col_sum output");
  bad = t;
  bad.threads = 1024;
  bad.min_blocks = 3;
  refused(ln, bad, "sm_90a", "is 1 to 2 for 1024 threads");
  bad = RowTile{256, 8, 2, 1};
  bad.min_blocks = 2;
  refused(ln, bad, "gfx90a", "AMD targets");

  // Candidates: the 512-thread two-stage ring also with the tree in shared memory, at one, two and three blocks.
  const std::vector<TileConfig> c = tile_candidates(ln, shape, "sm_90a");
  for (int m : {0, 2, 3}) {
    RowTile want = t;
    want.min_blocks = m;
    CHECK(std::any_of(c.begin(), c.end(), [&](const TileConfig& x) { return x == TileConfig{want}; }));
  }
  for (const TileConfig& x : c) {
    const RowTile& r = std::get<RowTile>(x);
    if (r.tree) CHECK(ring_bytes(ln, r) >= col_sum_bytes(ln, r));
  }
}
