// Note [GEMM column sums] (gemm.hpp): the col_sum outputs of an mma.sync
// kernel (templates/gemm_mma.cu.in's column_sum_decls and column_sums), of a
// SIMT one (gemm_simt.cu.in's), of a wave one (gemm_wave.cu.in's) and of a
// wgmma one (templates/gemm_sm90.cu.in's column_sum_setup,
// staged_column_decls, staged_column_chunk and column_sums; the fragment
// epilogue's text takes the same chunk code). The three kernels of a block a
// tile differ only in how their threads' sums reach a partial row of the
// tile (ColumnSumBlock). A chain without col_sum outputs gets empty text
// here, so its kernel is the same bytes as before column sums existed.
#include <algorithm>

#include "codegen/column_sums.hpp"
#include "codegen/gemm/gemm_parts.hpp"
#include "epifuse/errors.hpp"

namespace epifuse {

namespace {

// The outputs that are col_sums, in output order: their index among the sums
// is their row block in the partials workspace.
std::vector<const TensorPlan*> column_sum_plans(const GemmPlan& g) {
  const KernelPlan& plan = *g.plan;
  std::vector<const TensorPlan*> out;
  for (const TensorPlan& t : plan.outputs)
    if (is_column_sum(plan.spec->graph.node(t.value))) out.push_back(&t);
  return out;
}

// One sum's lanes into colbuf[warp % WARPS_M][BN]. The lanes that hold the
// same columns add in a fixed xor butterfly: fragment lanes with the same
// lane % 4 (offsets 4, 8, 16), staged lanes with the same lane % (WTN / 4)
// (offsets WTN / 4 .. 16; none when a warp row is 128 columns).
std::string lanes_into_colbuf(const std::string& f, bool staged) {
  if (staged)
    return fmt::format(
        "#pragma unroll\n    for (int e = 0; e < 4; ++e)\n#pragma unroll\n"
        "      for (int o = WTN / 4; o < 32; o *= 2) {0}_s[e] += __shfl_xor_sync(0xffffffffu, {0}_s[e], o);\n"
        "    __syncthreads();  // the shared memory is free (the staged tiles, the previous sum's row)\n"
        "    if (lane < WTN / 4)\n#pragma unroll\n"
        "      for (int e = 0; e < 4; ++e) colbuf[(warp % WARPS_M) * BN + wn + lane * 4 + e] = {0}_s[e];\n",
        f);
  return fmt::format(
      "#pragma unroll\n    for (int ni = 0; ni < NI; ++ni)\n#pragma unroll\n      for (int j = 0; j < 2; ++j)\n#pragma unroll\n"
      "        for (int o = 4; o < 32; o *= 2) {0}_s[ni][j] += __shfl_xor_sync(0xffffffffu, {0}_s[ni][j], o);\n"
      "    __syncthreads();  // the shared memory is free (the ring, the previous sum's row)\n"
      "    if (lane < 4)\n#pragma unroll\n      for (int ni = 0; ni < NI; ++ni)\n#pragma unroll\n"
      "        for (int j = 0; j < 2; ++j) colbuf[(warp % WARPS_M) * BN + wn + ni * 8 + lane * 2 + j] = {0}_s[ni][j];\n",
      f);
}

}  // namespace

bool gemm_sums_columns(const KernelSource& source) {
  return std::any_of(source.params.begin(), source.params.end(),
                     [](const ParamField& f) { return f.role == ParamRole::workspace && f.name == "col_counters"; });
}

void column_sum_params(const GemmPlan& g, ParamLayout& layout) {
  if (!has_column_sums(*g.plan->spec)) return;
  layout.add(ParamRole::workspace, 0, "col_counters", "unsigned* col_counters", 8, 8);
  layout.add(ParamRole::workspace, 1, "col_partials", "float* col_partials", 8, 8);
}

std::string emit_column_sum_decls(const GemmPlan& g, std::string_view extent) {
  std::string s;
  for (const TensorPlan* t : column_sum_plans(g))
    s += fmt::format("\n  float {}_s{} = {{}};  // a col_sum: this lane's sums over its rows (Note [GEMM column sums])",
                     t->field, extent);
  return s;
}

namespace {

// How a block kernel (one tile a block, returning at its end: mma.sync, SIMT,
// wave) brings its threads' sums to one partial row of the tile: `setup`
// declares `counter`, `partials`, `colbuf` ([rows][BN] floats of free shared
// memory) and `smem` (its bytes); `into_colbuf` puts one sum's thread sums
// into colbuf's `rows` rows, each (row, column) written once; `load` reads
// another block's partial row (L2). The rows are then added in row order,
// and the rest is the same for every such kernel.
struct ColumnSumBlock {
  std::string who;    // which threads share columns, in the opening comment
  std::string setup;  // after tile_m and tile_n
  std::string rows;
  std::string (*into_colbuf)(const std::string& field, bool staged);
  bool staged = false;
  std::string load;
};

std::string block_column_sums(const GemmPlan& g, const ColumnSumBlock& b) {
  const std::vector<const TensorPlan*> sums = column_sum_plans(g);
  if (sums.empty()) return {};
  std::string s = fmt::format(
      "\n"
      "  // Note [GEMM column sums]: each col_sum's partial row of this tile into\n"
      "  // partials[sum][tile_m][N] ({}), then\n"
      "  // in the last of the column tile's tiles_m blocks the rows in order 0..tiles_m-1.\n"
      "  {{\n"
      "    const long long tile_m = m0 / BM, tile_n = n0 / BN;\n"
      "{}",
      b.who, b.setup);
  for (std::size_t q = 0; q < sums.size(); ++q) {
    s += fmt::format("    // {}, sum {}\n", sums[q]->field, q);
    s += b.into_colbuf(sums[q]->field, b.staged);
    s += fmt::format(
        "    __syncthreads();\n"
        "    for (int c = threadIdx.x; c < BN; c += THREADS) {{\n"
        "      float t = colbuf[c];\n"
        "#pragma unroll\n      for (int w = 1; w < {1}; ++w) t += colbuf[w * BN + c];\n"
        "      if (n0 + c < p.n) partials[({0} * tiles_m + tile_m) * p.n + n0 + c] = t;\n"
        "    }}\n",
        q, b.rows);
  }
  s += "    __threadfence();  // the partial rows are visible before the arrival counts\n"
       "    __syncthreads();\n"
       "    unsigned* last = reinterpret_cast<unsigned*>(smem);  // colbuf's reads are done\n"
       "    if (threadIdx.x == 0) *last = atomicAdd(counter, 1u) + 1ull == (unsigned long long)tiles_m ? 1u : 0u;\n"
       "    __syncthreads();\n"
       "    if (*last == 0u) return;\n"
       "    __threadfence();  // every other block's partial rows are read after its arrival\n"
       "    for (int c = threadIdx.x; c < BN && n0 + c < p.n; c += THREADS) {\n";
  for (std::size_t q = 0; q < sums.size(); ++q) {
    const TensorPlan& t = *sums[q];
    s += fmt::format(
        "      {{\n        float t = 0.0f;\n"
        "#pragma unroll 4\n"
        "        for (long long r = 0; r < tiles_m; ++r) t += {3}(partials + ({0} * tiles_m + r) * p.n + n0 + c);\n"
        "        p.{1}[n0 + c] = ef_from_float<{2}>(t);\n      }}\n",
        q, t.field, storage_type_name(t.dtype), b.load);
  }
  s += "    }\n"
       "    if (threadIdx.x == 0) *counter = 0u;  // the zeroed workspace stays zero\n"
       "  }";
  return s;
}

// SIMT (templates/gemm_simt.cu.in): thread (ty, tx) holds columns
// (j / 4) * 64 + tx * 4 + j % 4 of its rows; a warp is two thread rows (lanes
// l and l ^ 16 share columns), the 8 warps share them through the A tiles.
std::string simt_into_colbuf(const std::string& f, bool) {
  return fmt::format(
      "#pragma unroll\n    for (int j = 0; j < TN; ++j) {0}_s[j] += __shfl_xor_sync(0xffffffffu, {0}_s[j], 16);\n"
      "    __syncthreads();  // the shared memory is free (the A tiles, the previous sum's row)\n"
      "    if ((tid & 31) < 16)\n#pragma unroll\n"
      "      for (int j = 0; j < TN; ++j) colbuf[(tid >> 5) * BN + (j / 4) * 64 + tx * 4 + j % 4] = {0}_s[j];\n",
      f);
}

// Wave (templates/gemm_wave.cu.in): a lane's four columns of the staged
// epilogue are fixed (wave tiles at most 4 x LANES columns wide); no
// shuffles (a wave may span two NVIDIA warps in the FMA form): each lane
// writes its own row of colbuf, lane row lane / (WTN / 4) of its wave row.
std::string wave_into_colbuf(const std::string& f, bool) {
  return fmt::format(
      "    __syncthreads();  // the shared memory is free (the staged tiles, the previous sum's row)\n"
      "#pragma unroll\n"
      "    for (int e = 0; e < 4; ++e)\n"
      "      colbuf[((wave % WAVES_M) * (LANES / (WTN / 4)) + lane / (WTN / 4)) * BN + wn + lane % (WTN / 4) * 4 + e] = "
      "{0}_s[e];\n",
      f);
}

}  // namespace

std::string emit_column_sums(const GemmPlan& g, bool staged) {
  return block_column_sums(
      g, {"the warps sharing columns in warp order",
          "    // After split-K's flags and partial tiles in the workspace, if any.\n"
          "    unsigned* counter = p.col_counters + (SPLIT_K > 1 ? tiles_m * tiles_n : 0) + tile_n;\n"
          "    float* partials = p.col_partials + (SPLIT_K > 1 ? tiles_m * tiles_n * (BM * BN) : 0);\n"
          "    static_assert(WARPS_M * BN * 4 <= STAGES * STAGE_BYTES, \"a partial row of each warp row fits the ring\");\n"
          "    float* colbuf = reinterpret_cast<float*>(smem);  // [WARPS_M][BN]\n",
          "WARPS_M", lanes_into_colbuf, staged, "__ldcg"});
}

std::string emit_simt_column_sums(const GemmPlan& g) {
  return block_column_sums(
      g, {"the warps sharing columns in warp order",
          "    unsigned* counter = p.col_counters + tile_n;\n"
          "    float* partials = p.col_partials;\n"
          "    constexpr int COL_ROWS = THREADS / 32;  // a row of colbuf per warp\n"
          "    static_assert(COL_ROWS * BN <= 2 * BK * (BM + PAD), \"a partial row of each warp fits the A tiles\");\n"
          "    char* const smem = reinterpret_cast<char*>(&As[0][0][0]);  // free after the mainloop\n"
          "    float* colbuf = reinterpret_cast<float*>(smem);  // [COL_ROWS][BN]\n",
          "COL_ROWS", simt_into_colbuf, false, "__ldcg"});
}

std::string emit_wave_column_sums(const GemmPlan& g) {
  return block_column_sums(
      g, {"the lanes sharing columns in lane order",
          "    unsigned* counter = p.col_counters + tile_n;\n"
          "    float* partials = p.col_partials;\n"
          "    static_assert(LANES % (WTN / 4) == 0, \"a lane's four columns are fixed\");\n"
          "    constexpr int COL_ROWS = WAVES_M * (LANES / (WTN / 4));  // the lanes that share a column\n"
          "    static_assert(COL_ROWS * BN <= WAVES_M * WAVES_N * Op::M * SROW, \"a row of each lane row fits the staging\");\n"
          "    float* colbuf = reinterpret_cast<float*>(smem);  // [COL_ROWS][BN]\n",
          "COL_ROWS", wave_into_colbuf, true, "ef_col_partial_load"});
}

// The wgmma kernel (templates/gemm_sm90.cu.in) is persistent: a block walks
// many tiles, so nothing here returns, and the consumer warps on one tile
// (all eight cooperative, one warpgroup's four ping-pong) meet at a named
// barrier without the producer warpgroup.

std::string emit_wgmma_column_setup(const GemmPlan& g) {
  const std::size_t sums = column_sum_plans(g).size();
  if (sums == 0) return {};
  return fmt::format(
      "\n  // Note [GEMM column sums]: colbuf[sum][consumer warp][BN], each warp's partial row of its\n"
      "  // tile; col_last[team]: whether this block's team added the column tile's last row tile.\n"
      "  constexpr int COL_SUMS = {};\n"
      "  float* const colbuf = staging + 8 * STAGE_WARP_FLOATS;\n"
      "  unsigned* const col_last = reinterpret_cast<unsigned*>(colbuf + COL_SUMS * 8 * BN);",
      sums);
}

std::string emit_wgmma_chunk_decls(const GemmPlan& g, bool fragment) {
  std::string s;
  for (const TensorPlan* t : column_sum_plans(g))
    s += fmt::format("\n        float {}_s[{}] = {{}};  // a col_sum: this lane's sums over its rows of the chunk", t->field,
                     fragment ? 16 : 4);
  return s;
}

// After a chunk, the lanes that hold the same columns (fragment: the 8 with
// one lane % 4, 16 sums each, [f * 2 + e] for column 8f + 2(lane % 4) + e;
// staged: the 4 with one lane % 8, 4 sums each) add by halves: at each xor
// step a lane keeps the half of its sums that its lane bit picks and adds
// the partner's copy of that half (8 + 4 + 2 shuffles for a fragment chunk,
// where a full butterfly takes 48). Each lane ends with whole sums of its
// own columns (fragment: 2 of column group f = 4 b2 + 2 b3 + b4 of its lane
// bits; staged: column e = 2 b3 + b4 of its quad), which it alone stores into
// the warp's colbuf row (row block 0's chunks) or adds to it (the later ones,
// in chunk order): no barrier.
std::string emit_wgmma_chunk_sums(const GemmPlan& g, bool fragment) {
  const std::vector<const TensorPlan*> sums = column_sum_plans(g);
  std::string s;
  for (std::size_t q = 0; q < sums.size(); ++q) {
    const std::string& f = sums[q]->field;
    s += fmt::format("\n        // Note [GEMM column sums]: sum {}, {}: the lanes sharing columns add by halves.", q, f);
    for (int o = fragment ? 4 : 8, n = fragment ? 8 : 2; o < 32; o *= 2, n /= 2)
      s += fmt::format(
          "\n#pragma unroll\n"
          "        for (int i = 0; i < {1}; ++i) {{\n"
          "          const float keep = (lane & {2}) ? {0}_s[{1} + i] : {0}_s[i], give = (lane & {2}) ? {0}_s[i] : {0}_s[{1} + i];\n"
          "          {0}_s[i] = keep + __shfl_xor_sync(0xffffffffu, give, {2});\n"
          "        }}",
          f, n, o);
    if (fragment)
      s += fmt::format(
          "\n#pragma unroll\n"
          "        for (int e = 0; e < 2; ++e) {{\n"
          "          const int col = c * 64 + ((lane >> 2 & 1) * 4 + (lane >> 3 & 1) * 2 + (lane >> 4 & 1)) * 8 + (lane & 3) * 2 + e;\n"
          "          float* const at = colbuf + ({1} * 8 + threadIdx.x / 32 - 4) * BN + col;\n"
          "          *at = mi == 0 ? {0}_s[e] : *at + {0}_s[e];\n"
          "        }}",
          f, q);
    else
      s += fmt::format(
          "\n        {{\n"
          "          const int col = c * CHUNK + (lane & 7) * 4 + (lane >> 3 & 1) * 2 + (lane >> 4 & 1);\n"
          "          float* const at = colbuf + ({1} * 8 + threadIdx.x / 32 - 4) * BN + col;\n"
          "          *at = mi == 0 ? {0}_s[0] : *at + {0}_s[0];\n"
          "        }}",
          f, q);
  }
  return s;
}

std::string emit_wgmma_column_sums(const GemmPlan& g) {
  const std::vector<const TensorPlan*> sums = column_sum_plans(g);
  if (sums.empty()) return {};
  std::string s =
      "\n"
      "    // Note [GEMM column sums]: the team's warp rows, in warp order, into this tile's\n"
      "    // partial row of partials[sum][tile_m][N]; in the last of the column tile's tiles_m\n"
      "    // arrivals, the rows in order 0..tiles_m-1 into the [N] output. A cluster's\n"
      "    // rank-1 block may get a row tile past M: it neither writes a row nor arrives.\n"
      "    if (m0 < p.m) {\n"
      "      constexpr int TEAM = PINGPONG ? 128 : 256;  // the threads on this tile\n"
      "      const int team = PINGPONG ? wg : 0, tid = PINGPONG ? (int)threadIdx.x % 128 : (int)threadIdx.x - 128;\n"
      "      const int w0 = PINGPONG ? 4 * wg : 0;  // the team's first consumer warp\n"
      "      const long long tile_m = m0 / BM, tile_n = n0 / BN;\n"
      "      unsigned* const counter = p.col_counters + tile_n;\n"
      "      ef_named_barrier_sync(1 + team, TEAM);  // every warp's rows are in colbuf\n"
      "      for (int c = tid; c < BN; c += TEAM) {\n";
  for (std::size_t q = 0; q < sums.size(); ++q)
    s += fmt::format(
        "        {{  // {1}, sum {0}\n"
        "          float t = colbuf[({0} * 8 + w0) * BN + c];\n"
        "#pragma unroll\n"
        "          for (int w = 1; w < TEAM / 32; ++w) t += colbuf[({0} * 8 + w0 + w) * BN + c];\n"
        "          if (n0 + c < p.n) p.col_partials[({0}LL * tiles_m + tile_m) * p.n + n0 + c] = t;\n"
        "        }}\n",
        q, sums[q]->field);
  s += "      }\n"
       "      __threadfence();  // the partial rows are visible before the arrival counts\n"
       "      // colbuf's reads are done (the next tile's chunks may write it), and so are\n"
       "      // the reads of col_last[team] of the tile before (the team's last barrier).\n"
       "      ef_named_barrier_sync(1 + team, TEAM);\n"
       "      if (tid == 0) col_last[team] = atomicAdd(counter, 1u) + 1u == (unsigned)tiles_m ? 1u : 0u;\n"
       "      ef_named_barrier_sync(1 + team, TEAM);\n"
       "      if (col_last[team] != 0u) {\n"
       "        __threadfence();  // every other tile's partial rows are read after its arrival\n"
       "        for (int c = tid; c < BN && n0 + c < p.n; c += TEAM) {\n";
  for (std::size_t q = 0; q < sums.size(); ++q) {
    const TensorPlan& t = *sums[q];
    s += fmt::format(
        "          {{\n            float t = 0.0f;\n"
        "#pragma unroll 4\n"
        "            for (long long r = 0; r < tiles_m; ++r) t += __ldcg(p.col_partials + ({0}LL * tiles_m + r) * p.n + n0 + c);\n"
        "            p.{1}[n0 + c] = ef_from_float<{2}>(t);\n          }}\n",
        q, t.field, storage_type_name(t.dtype));
  }
  s += "        }\n"
       "        if (tid == 0) *counter = 0u;  // the zeroed workspace stays zero\n"
       "      }\n"
       "    }";
  return s;
}

}  // namespace epifuse
