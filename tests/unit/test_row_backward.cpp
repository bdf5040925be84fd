// The row family's [M] outputs and column sums without a GPU: the backward
// examples (examples/backward) load, run on the reference and emit; the
// emitted text has one per-row store and the column tree; the workspace holds
// the tree's counters and partial rows; what the family does not generate is
// a UserError.
#include <doctest/doctest.h>

#include <filesystem>

#include "../gpu/row_backward_specs.hpp"
#include "codegen/family.hpp"
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
  CHECK(count == 8);  // seven row backward specs and a GEMM dgrad chain
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
