// The elementwise family's column sums without a GPU (Note [Column sums]):
// which specs it takes and refuses, the grid of column tiles x row slices, the
// workspace that grid needs, and what the emitted kernel holds.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <tuple>

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
    const KernelSource v = emit_kernel(backward(DType::bf16), {64, 1024, 0}, ElementwiseTile{256, 8, 0, 3});
    CHECK(v.requires_alignment);
    CHECK(v.text.find("vectorized") == std::string::npos);
    CHECK(v.text.find("__launch_bounds__(256, 4)") != std::string::npos);
    CHECK(v.text.find("constexpr int ROWS = 1;") != std::string::npos);  // 8-element vectors
    CHECK(emit_kernel(backward(DType::f32), {64, 1024, 0}).text.find("constexpr int ROWS = 2;") != std::string::npos);
    // Note [Staged column loads]: with a tile of three stages, 16-bit vectors
    // copy three rows of slots ahead on sm_80+, beside the register loop for
    // other targets: each loop draws and stores once.
    CHECK(count(v.text, "#if !EF_HIP && __CUDA_ARCH__ >= 800") == 2);  // the slots, the loop
    CHECK(count(v.text, "constexpr int ST = 3;") == 1);
    CHECK(count(v.text, "__shared__ uint4 stage[3][2][256];") == 1);  // dy and x
    // The rows' sums reuse the slots, and the last block is a barrier's vote:
    // 48 KB of slots leave no byte for anything else.
    CHECK(count(v.text, "float* const red = reinterpret_cast<float*>(&stage[0][0][0]);") == 1);
    CHECK(count(v.text, "const bool last = __syncthreads_or(first && atomicAdd(") == 1);
    CHECK(v.text.find("__shared__ bool last;") == std::string::npos);
    CHECK(count(v.text, "ef_stage16(") == 4);  // two tensors, before the loop and in it
    CHECK(count(v.text, "ef_philox4_draws(") == 2);
    CHECK(v.text.find("ef_philox4_draw(") == std::string::npos);
    CHECK(count(v.text, "atomicAdd(&p.arrivals[blockIdx.x], 1u)") == 1);
    CHECK(v.text.find("o1 = v4;  // a column term") != std::string::npos);  // dbias receives dact
    CHECK(count(v.text, "ef_store_vec<ef_bf16, VEC>") == 4);  // dx and dres, per loop; dbias by element
    // f32 (two rows in flight in registers) and 512 threads of 16-bit vectors
    // (four rows of slots would pass 48 KB): none, and three rows; the
    // resolved tile says so.
    CHECK(emit_kernel(backward(DType::f32), {64, 1024, 0}, ElementwiseTile{256, 4, 0, 3}).text.find("ef_stage16(") ==
          std::string::npos);
    const KernelSource three = emit_kernel(backward(DType::bf16), {64, 1024, 0}, ElementwiseTile{512, 8, 0, 4});
    CHECK(three.text.find("constexpr int ST = 3;") != std::string::npos);
    CHECK(std::get<ElementwiseTile>(three.tile).str() == "t512v8g0s3");
    // Without stages in the tile: the register loop alone.
    const KernelSource regs = emit_kernel(backward(DType::bf16), {64, 1024, 0}, ElementwiseTile{256, 8, 0});
    CHECK(regs.text.find("ef_stage16(") == std::string::npos);
    CHECK(count(regs.text, "__shared__ bool last;") == 1);
    CHECK(count(regs.text, "ef_philox4_draws(") == 1);
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
  TEST_CASE("column sums: the default tile follows the DRAM bytes each SM must take a clock") {
    // Note [Staged column loads]: an H100 SXM feeds each SM 12.8 bytes a
    // clock at its peak, an H200 18.4 (4.81 TB/s as its driver reports it);
    // the assumed NVIDIA device is the H100.
    const DeviceInfo h100{132, 227 * 1024, 50ull << 20, 3'352'000'000'000ull, 1'980'000};
    const DeviceInfo h200{132, 227 * 1024, 60ull << 20, 4'810'000'000'000ull, 1'980'000};
    CHECK(dram_bytes_per_sm_clock(h100) == doctest::Approx(12.83).epsilon(0.01));
    CHECK(dram_bytes_per_sm_clock(h200) == doctest::Approx(18.40).epsilon(0.01));
    CHECK(dram_bytes_per_sm_clock(DeviceInfo{132, 227 * 1024, 50ull << 20}) == 0.0);  // bandwidth unknown
    CHECK(staged_column_loads_pay("sm_90a", h200));
    CHECK_FALSE(staged_column_loads_pay("sm_90a", h100));
    CHECK_FALSE(staged_column_loads_pay("gfx942", h200));
    CHECK_FALSE(staged_column_loads_pay("sm_90a", DeviceInfo{132, 227 * 1024, 50ull << 20}));

    const Shape shape{16384, 8192, 0};
    const auto tile_on = [&](const KernelSpec& spec, const DeviceInfo& d, const Shape& sh) {
      return std::get<ElementwiseTile>(emit_kernel(spec, sh, std::nullopt, KernelPath::fastest, "sm_90a", d).tile);
    };
    // Where staging pays: 512 threads, three rows of slots, one block an SM up
    // to two waves of column tiles (256 columns each), else as many as fit.
    CHECK(tile_on(backward(DType::bf16), h200, shape) == ElementwiseTile{512, 8, 1, 3});
    CHECK(tile_on(backward(DType::bf16), h200, {2048, 65536, 0}) == ElementwiseTile{512, 8, 1, 3});  // 256 tiles
    CHECK(tile_on(backward(DType::bf16), h200, {512, 262144, 0}) == ElementwiseTile{512, 8, 0, 3});  // 1,024
    CHECK(tile_on(backward(DType::bf16), h100, shape) == ElementwiseTile{256, 8, 0});
    // f32: two 16-byte vectors a row in registers, the same grid; beyond two waves the plain tile.
    CHECK(tile_on(backward(DType::f32), h200, shape) == ElementwiseTile{512, 8, 1});
    CHECK(tile_on(backward(DType::f32), h200, {512, 262144, 0}) == ElementwiseTile{256, 4, 0});
    CHECK(tile_on(backward(DType::f32), h200, {64, 1028, 0}) == ElementwiseTile{256, 4, 0});  // N % 8
    CHECK(tile_on(backward(DType::f32), h100, shape) == ElementwiseTile{256, 4, 0});
    CHECK(tile_on(backward(DType::bf16), h200, {33, 67, 0}) == ElementwiseTile{256, 8, 0});  // N % VEC: scalar path
    {
      // Four full inputs: two rows of slots at 512 threads pass 48 KB; three
      // at 256 fit.
      KernelSpec four = backward(DType::bf16);
      Graph& g = four.graph;
      g.output("dz", g.mul(g.input("z", DType::bf16), g.input("dy2", DType::bf16)), DType::bf16);
      CHECK(tile_on(four, h200, shape) == ElementwiseTile{256, 8, 0, 3});
    }
    CHECK(emit_kernel(backward(DType::bf16), shape).text.find("ef_stage16(") == std::string::npos);  // assumed H100

    // The tuner times both on NVIDIA targets, 16-bit vectors only.
    const auto staged_candidates = [&](const KernelSpec& spec, std::string_view target) {
      int n = 0;
      for (const TileConfig& t : tile_candidates(spec, shape, target)) n += std::get<ElementwiseTile>(t).stages > 0;
      return n;
    };
    CHECK(staged_candidates(backward(DType::bf16), "sm_90a") > 0);
    CHECK(staged_candidates(backward(DType::f32), "sm_90a") == 0);
    CHECK(staged_candidates(backward(DType::bf16), "gfx942") == 0);
    {
      // Four rows of slots where all four fit in 48 KB: two 16-bit inputs at 256
      // threads, one at 512 too (a bias gradient alone); never a tile that would
      // resolve to fewer (the tuner would time one kernel twice).
      KernelSpec bias_grad;
      Graph& g = bias_grad.graph;
      g.output("db", g.col_sum(g.input("dy", DType::bf16)), DType::bf16);
      const auto has = [&](const KernelSpec& spec, const ElementwiseTile& t) {
        const std::vector<TileConfig> c = tile_candidates(spec, shape, "sm_90a");
        return std::find(c.begin(), c.end(), TileConfig{t}) != c.end();
      };
      CHECK(has(bias_grad, ElementwiseTile{512, 8, 1, 4}));
      CHECK(has(bias_grad, ElementwiseTile{256, 8, 0, 4}));
      CHECK(has(backward(DType::bf16), ElementwiseTile{256, 8, 0, 4}));
      CHECK_FALSE(has(backward(DType::bf16), ElementwiseTile{512, 8, 1, 4}));
      for (const TileConfig& t : tile_candidates(backward(DType::bf16), shape, "sm_90a")) {
        const ElementwiseTile& e = std::get<ElementwiseTile>(t);
        if (e.stages == 4) CHECK(column_sum_stages(backward(DType::bf16), e, 4) == 4);
      }
      CHECK(std::get<ElementwiseTile>(emit_kernel(bias_grad, shape, ElementwiseTile{512, 8, 1, 4}).tile).stages == 4);
    }

    // Spelled as the tile prints; refused where there is nothing to stage.
    CHECK(parse_tile("t256v8g0s3") == TileConfig{ElementwiseTile{256, 8, 0, 3}});
    CHECK(ElementwiseTile{256, 8, 0}.str() == "t256v8g0");
    KernelSpec plain;
    plain.graph.output("y", plain.graph.relu(plain.graph.input("x", DType::bf16)), DType::bf16);
    CHECK_THROWS_WITH_AS(emit_kernel(plain, shape, ElementwiseTile{256, 8, 0, 3}),
                         doctest::Contains("only a column-sum kernel has"), UserError);
    CHECK_THROWS_WITH_AS(emit_kernel(backward(DType::bf16), shape, ElementwiseTile{256, 8, 0, 1}),
                         doctest::Contains("s1 asks for shared-memory stages"), UserError);
  }

  TEST_CASE("column sums: a bias gradient alone fills the threads an SM its size gives work") {
    // Note [Threads an SM for a sum alone], on a GPU where staging pays (an H200).
    const DeviceInfo h100{132, 227 * 1024, 50ull << 20, 3'352'000'000'000ull, 1'980'000};
    const DeviceInfo h200{132, 227 * 1024, 60ull << 20, 4'810'000'000'000ull, 1'980'000};
    const auto bias_grad = [](DType in, DType out) {
      KernelSpec s;
      s.graph.output("db", s.graph.col_sum(s.graph.input("dy", in)), out);
      return s;
    };
    const auto tile_on = [&](const KernelSpec& spec, const DeviceInfo& d, const Shape& sh) {
      return std::get<ElementwiseTile>(emit_kernel(spec, sh, std::nullopt, KernelPath::fastest, "sm_90a", d).tile);
    };
    // Each thread at least 96 elements: 2048 threads an SM from 132 x 2048 x 96
    // elements, 1024 from 132 x 1024 x 96, 512 from 132 x 512 x 96.
    CHECK(column_sum_threads_an_sm({4096, 6336, 0}, 132) == 2048);  // 25,952,256
    CHECK(column_sum_threads_an_sm({4095, 6336, 0}, 132) == 1024);
    CHECK(column_sum_threads_an_sm({4096, 8192, 0}, 132) == 2048);
    CHECK(column_sum_threads_an_sm({8192, 2048, 0}, 132) == 1024);
    CHECK(column_sum_threads_an_sm({4096, 3168, 0}, 132) == 1024);  // 12,976,128
    CHECK(column_sum_threads_an_sm({4095, 3168, 0}, 132) == 512);
    CHECK(column_sum_threads_an_sm({2048, 4096, 0}, 132) == 512);
    CHECK(column_sum_threads_an_sm({1024, 1024, 0}, 132) == 256);
    CHECK(column_sum_threads_an_sm({8192, 2048, 0}, 264) == 512);  // twice the SMs, half the work each
    for (const auto& [in, out, vec] : {std::tuple{DType::bf16, DType::f32, 8}, std::tuple{DType::bf16, DType::bf16, 8},
                                       std::tuple{DType::f32, DType::f32, 4}}) {
      CAPTURE(to_string(in));
      CAPTURE(to_string(out));
      const KernelSpec spec = bias_grad(in, out);
      CHECK(sums_alone(spec));
      CHECK(tile_on(spec, h200, {16384, 8192, 0}) == ElementwiseTile{1024, vec, 2});
      CHECK(tile_on(spec, h200, {131072, 1024, 0}) == ElementwiseTile{1024, vec, 2});
      CHECK(tile_on(spec, h200, {8192, 2048, 0}) == ElementwiseTile{1024, vec, 1});
      CHECK(tile_on(spec, h200, {2048, 4096, 0}) == ElementwiseTile{512, vec, 1});
      CHECK(tile_on(spec, h200, {1024, 1024, 0}) == ElementwiseTile{256, vec, 1});
      CHECK(tile_on(spec, h100, {16384, 8192, 0}) == ElementwiseTile{256, vec, 0});  // the registers rule
    }
    // Not alone: [M,N] outputs, a dropout that draws, two sums.
    CHECK_FALSE(sums_alone(backward(DType::bf16)));
    {
      KernelSpec dropped;
      Graph& g = dropped.graph;
      g.output("db", g.col_sum(g.dropout(g.input("dy", DType::bf16), 0.1, RngMode::philox4, 0)), DType::f32);
      CHECK_FALSE(sums_alone(dropped));
      KernelSpec two;
      Graph& h = two.graph;
      h.output("db", h.col_sum(h.input("dy", DType::bf16)), DType::f32);
      h.output("dg", h.col_sum(h.input("g", DType::bf16)), DType::f32);
      CHECK_FALSE(sums_alone(two));
      CHECK(tile_on(two, h200, {16384, 8192, 0}) == ElementwiseTile{512, 8, 1, 3});
    }
    // With [M,N] outputs f32 takes two vectors a row only where 512 threads an SM have work enough.
    CHECK(tile_on(backward(DType::f32), h200, {2048, 4096, 0}) == ElementwiseTile{512, 8, 1});
    CHECK(tile_on(backward(DType::f32), h200, {1024, 1024, 0}) == ElementwiseTile{512, 4, 1});
  }
}
