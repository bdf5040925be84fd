// The elementwise family's column sums without a GPU (Note [Column sums]):
// which specs it takes and refuses, the grid of column tiles x row slices, the
// workspace that grid needs, and what the emitted kernel holds.
#include <doctest/doctest.h>

#include <string>

#include "codegen/elementwise/elementwise.hpp"
#include "codegen/family.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/json.hpp"

using namespace epifuse;

namespace {

// dx = dropout(dy) * gelu_tanh_deriv(h), dbias = col_sum(dx), dres = dy.
KernelSpec backward(DType dt) {
  KernelSpec s;
  Graph& g = s.graph;
  Value dy = g.input("dy", dt);
  Value h = g.input("h", dt);
  Value dact = g.mul(g.dropout(dy, 0.1, RngMode::philox4, 0), g.unary(OpKind::gelu_tanh_deriv, h));
  g.output("dx", dact, dt);
  g.output("dbias", g.col_sum(dact), DType::f32);
  g.output("dres", dy, dt);
  return s;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("column sums: the elementwise family takes col_sum outputs and refuses what it does not write") {
    const KernelSpec spec = backward(DType::bf16);
    CHECK(&family_for(spec) == &family_for(MainloopKind::elementwise));
    CHECK(has_column_sums(spec));
    CHECK(column_sum_outputs(spec) == std::vector<bool>{false, true, false});

    KernelSpec read;  // a col_sum an op reads
    Value x = read.graph.input("x", DType::f32);
    read.graph.output("y", read.graph.add(x, read.graph.col_sum(x)), DType::f32);
    CHECK_THROWS_WITH_AS(column_sum_outputs(read), doctest::Contains("as an [N] output only, and add reads it"),
                         UserError);
    CHECK_THROWS_AS(emit_kernel(read, {4, 8, 0}), UserError);

    KernelSpec row_out;  // an [N] output that is not a col_sum
    Value b = row_out.graph.input("b", DType::f32, Broadcast::row);
    row_out.graph.output("y", row_out.graph.input("x", DType::f32), DType::f32);
    row_out.graph.output("bb", row_out.graph.relu(b), DType::f32);
    CHECK_THROWS_WITH_AS(emit_kernel(row_out, {4, 8, 0}), doctest::Contains("output 'bb' is a row value ([N]) that is not a col_sum"),
                         UserError);
  }

  TEST_CASE("column sums: the grid fills the GPU with whole column tiles, the workspace bounds every grid") {
    const ElementwiseTile t{256, 4, 0};  // 8 warps, 128 columns, 4 blocks per multiprocessor
    CHECK(column_sum_blocks_per_sm(t) == 4);
    CHECK(column_sum_blocks_per_sm({256, 4, 8}) == 8);
    CHECK(column_sum_blocks_per_sm({1024, 4, 8}) == 2);  // no more than 2048 threads
    CHECK(column_sum_blocks_per_sm({1024, 4, 0}) == 1);

    ColumnGrid g = column_grid(t, {16384, 8192, 0}, 132);
    CHECK(g.lanes == 32);  // a warp across, the 8 warps down
    CHECK(g.rows_per_step == 8);
    CHECK(g.tile_columns == 128);
    CHECK(g.column_tiles == 64);
    CHECK(g.row_slices == 132 * 4 / 64);  // 8: 512 blocks of the 528 the GPU holds
    // Few columns: slices up to the row steps; never fewer than one.
    g = column_grid(t, {100, 1, 0}, 132);
    CHECK(g.column_tiles == 1);
    CHECK(g.row_slices == 13);  // ceil(100 / 8)
    g = column_grid(t, {1, 1, 0}, 132);
    CHECK(g.row_slices == 1);
    g = column_grid(t, {8, 1 << 20, 0}, 132);  // more column tiles than the GPU holds blocks
    CHECK(g.column_tiles == 8192);
    CHECK(g.row_slices == 1);
    g = column_grid(t, {1 << 24, 1, 0}, 100000);  // the multiprocessors assumed at most
    CHECK(g.row_slices == k_column_sum_max_multiprocessors * 4);
    CHECK(column_grid(t, {1 << 30, 1, 0}, 1 << 20).row_slices <= 65535);

    // The workspace is sized for the largest grid, so every GPU's grid fits.
    for (const Shape& shape : {Shape{16384, 8192, 0}, Shape{100, 1, 0}, Shape{1 << 20, 3, 0}, Shape{8, 1 << 20, 0}}) {
      const WorkspaceNeeds w = column_sum_workspace(t, shape, 2);
      for (int sms : {1, 78, 132, 1024}) {
        const ColumnGrid c = column_grid(t, shape, sms);
        CHECK(w.zeroed == static_cast<std::size_t>(c.column_tiles) * 4);
        CHECK(w.scratch >= 2 * static_cast<std::size_t>(c.row_slices * c.column_tiles * c.tile_columns) * 4);
      }
    }
  }

  TEST_CASE("column sums: the family's geometry and workspace follow the emitted kernel") {
    const KernelSpec spec = backward(DType::bf16);
    const Shape shape{16384, 8192, 0};
    const KernelSource ks = emit_kernel(spec, shape, ElementwiseTile{256, 8, 0});
    const KernelFamily& f = family_for(spec);
    const LaunchGeometry g = f.geometry(ks, shape, 132);
    CHECK(g.grid[0] == 32);  // 8192 / 256 columns
    CHECK(g.grid[1] == 132 * 4 / 32);
    CHECK(g.block[0] == 32);
    CHECK(g.block[1] == 8);
    const WorkspaceNeeds w = f.workspace(ks, shape);
    CHECK(w.zeroed == 32 * 4);
    CHECK(w.scratch > 0);
    // A plain elementwise spec keeps its one-dimensional grid and no workspace.
    KernelSpec plain;
    plain.graph.output("y", plain.graph.relu(plain.graph.input("x", DType::f32)), DType::f32);
    const KernelSource pk = emit_kernel(plain, shape);
    CHECK(family_for(plain).geometry(pk, shape, 132).grid[1] == 1);
    CHECK(family_for(plain).workspace(pk, shape).scratch == 0);
    CHECK(pk.text.find("arrivals") == std::string::npos);
  }

  TEST_CASE("column sums: the emitted kernel") {
    // Aligned rows, fastest path: vectors only, no alignment flag.
    const KernelSource v = emit_kernel(backward(DType::bf16), {64, 1024, 0}, ElementwiseTile{256, 8, 0});
    CHECK(v.requires_alignment);
    CHECK(v.text.find("vectorized") == std::string::npos);
    CHECK(v.text.find("__launch_bounds__(256, 4)") != std::string::npos);
    CHECK(v.text.find("constexpr int ROWS = 1;") != std::string::npos);  // 8-element vectors
    CHECK(emit_kernel(backward(DType::f32), {64, 1024, 0}).text.find("constexpr int ROWS = 2;") != std::string::npos);
    CHECK(count(v.text, "ef_philox4_draws(") == 1);
    CHECK(v.text.find("ef_philox4_draw(") == std::string::npos);
    CHECK(count(v.text, "atomicAdd(&p.arrivals[blockIdx.x], 1u)") == 1);
    CHECK(v.text.find("o1 = v4;  // a column term") != std::string::npos);  // dbias receives dact
    CHECK(count(v.text, "ef_store_vec<ef_bf16, VEC>") == 2);  // dx and dres; dbias by element
    int workspace_fields = 0;
    for (const ParamField& f : v.params) workspace_fields += f.role == ParamRole::workspace;
    CHECK(workspace_fields == 2);
    CHECK(v.output_alignment == std::vector<int>{16, 0, 16});

    // Rows of N % VEC != 0: element by element, a Philox word per element.
    const KernelSource s = emit_kernel(backward(DType::f32), {33, 67, 0});
    CHECK_FALSE(s.requires_alignment);
    CHECK(s.text.find("vectorized") == std::string::npos);
    CHECK(s.text.find("ef_philox4_draws(") == std::string::npos);
    CHECK(count(s.text, "ef_philox4_draw(") == 1);
    CHECK(s.output_alignment == std::vector<int>{0, 0, 0});

    // The general kernel of aligned rows: both paths behind the flag.
    const KernelSource gk =
        emit_kernel(backward(DType::f32), {64, 1024, 0}, std::nullopt, KernelPath::general);
    CHECK(gk.text.find("const bool whole = p.vectorized != 0;") != std::string::npos);
    CHECK(count(gk.text, "ef_philox4_draws(") == 1);
    CHECK(count(gk.text, "ef_philox4_draw(") == 1);
  }

  TEST_CASE("column sums: the example backward chain parses and emits") {
    const KernelSpec spec = load_spec(EPIFUSE_SOURCE_DIR "/examples/chains/bias_gelu_dropout_add_backward.json");
    CHECK(column_sum_outputs(spec) == std::vector<bool>{false, true, false});
    const KernelSource ks = emit_kernel(spec, {256, 1024, 0});
    CHECK(ks.outputs == std::vector<std::string>{"dx", "dbias", "dres"});
    CHECK(ks.text.find("dropout stream 0 (philox4)") != std::string::npos);
  }
}
