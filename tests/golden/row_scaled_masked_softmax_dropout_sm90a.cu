// epifuse row kernel: scale -> add -> row_max -> sub -> exp -> row_sum -> div -> dropout | out bf16
// Generated from templates/row.cu.in (docs/row-reductions.md). Each row is
// walked by GROUP threads of a block (a block takes ROWS rows at once) or by
// the CLUSTER blocks of a thread-block cluster; the grid is persistent
// (multiprocessors x occupancy blocks) or one block per row. A row takes
// 3 stages, each ending in reductions whose per-row results the
// next stage reads; the last stage writes the outputs. With ITEMS > 0 a thread
// keeps its ITEMS vectors of each full input in registers and the row is read
// once; with ITEMS 0 every stage reads it again (long rows; L2 serves the re-reads).
#include "common/numeric.cuh"
#include "common/vector_io.cuh"
#include "common/activations.cuh"
#include "common/philox.cuh"
#include "common/row_reduce.cuh"


struct ef_86e9262ff1685bce_params {
  const ef_bf16* in0;
  const ef_bf16* in1;
  ef_bf16* out0;
  long long m;
  long long n;
  double n_inv;
  unsigned long long seed;
  unsigned long long offset;
  const unsigned long long* rng_state;
  float alpha0;
};

// Note [Row stages] (src/codegen/row/plan_row.cpp): stage s of one element.
__device__ __forceinline__ void ef_86e9262ff1685bce_stage0(const ef_86e9262ff1685bce_params& p, float v0, float v1, float& a4) {
  const float v2 = p.alpha0 * v0;
  const float v3 = v2 + v1;
  a4 = v3;
}

__device__ __forceinline__ void ef_86e9262ff1685bce_stage1(const ef_86e9262ff1685bce_params& p, float v0, float v1, float v4, float& a7) {
  const float v2 = p.alpha0 * v0;
  const float v3 = v2 + v1;
  const float v5 = v3 - v4;
  const float v6 = ef_exp_fast(v5);
  a7 = v6;
}

template <bool kTiny>
__device__ __forceinline__ void ef_86e9262ff1685bce_stage2(const ef_86e9262ff1685bce_params& p, float v0, float v1, unsigned d0, float v4, float v7, float& o0) {
  const float v2 = p.alpha0 * v0;
  const float v3 = v2 + v1;
  const float v5 = v3 - v4;
  const float v6 = ef_exp_fast(v5);
  const float v8 = kTiny ? v6 * (1.0f / (v7 * 16777216.0f)) * 16777216.0f : v6 * (1.0f / v7);
  const float v9 = v8 * ef_dropout_factor(d0, 429496832u, 1.1111112f);
  o0 = v9;
}

constexpr int THREADS = 256, VEC = 8, ITEMS = 2;
constexpr int GROUP = 256;         // threads of a block on one row
constexpr int CLUSTER = 1;     // blocks on one row
constexpr int ROWS = THREADS / GROUP;   // rows a block walks at once
constexpr int LANES = GROUP * CLUSTER;  // threads on one row
constexpr int RED_VALUES = 1;  // the most values one reduction call combines

extern "C" __global__ void __launch_bounds__(THREADS)  ef_86e9262ff1685bce(const ef_86e9262ff1685bce_params p) {
  __shared__ float scratch[2 * RED_VALUES * (THREADS / EF_WARP)];
  __shared__ float cluster_slots[CLUSTER > 1 ? 2 * RED_VALUES * (THREADS / 32) * CLUSTER : 1];
  __shared__ __align__(8) unsigned long long cluster_bars[CLUSTER > 1 ? 2 : 1];
  EfRowReducer<THREADS, GROUP, CLUSTER, RED_VALUES> red{scratch, cluster_slots, cluster_bars};
  red.start();
  const int lane = red.lane();
  const ef_rng_state rng = ef_rng_read(p);  // read once (Note [Seeds on the device])
  // no shared-memory ring
  for (long long first = red.unit() * ROWS; first < p.m; first += red.units() * ROWS) {
    const long long row = first + (ROWS > 1 ? (int)threadIdx.x / GROUP : 0);
    // A group past the last row reads nothing but takes part in the shuffles.
    const bool live = ROWS == 1 || row < p.m;
    const int n = live ? (int)p.n : 0;
    const long long base = row * p.n;
    float in0_x[ITEMS][VEC];  // this thread's vectors of the row, read once
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const int c0 = (it * LANES + lane) * VEC;
      if (c0 < n) ef_load_vec<ef_bf16, VEC>(p.in0 + base + c0, in0_x[it]);
    }
    float in1_x[ITEMS][VEC];  // this thread's vectors of the row, read once
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const int c0 = (it * LANES + lane) * VEC;
      if (c0 < n) ef_load_vec<ef_bf16, VEC>(p.in1 + base + c0, in1_x[it]);
    }
    // stage 0
    float acc4 = EF_NEG_INF;
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const int c0 = (it * LANES + lane) * VEC;
      if (c0 >= n) continue;
      const float (&in0_v)[VEC] = in0_x[it];
      const float (&in1_v)[VEC] = in1_x[it];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        float a4;
        ef_86e9262ff1685bce_stage0(p, in0_v[j], in1_v[j], a4);
        acc4 = ef_max_nan(acc4, a4);
      }
    }
    const float v4 = red.max(acc4);
    // stage 1
    float acc7 = 0.0f;
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const int c0 = (it * LANES + lane) * VEC;
      if (c0 >= n) continue;
      const float (&in0_v)[VEC] = in0_x[it];
      const float (&in1_v)[VEC] = in1_x[it];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        float a7;
        ef_86e9262ff1685bce_stage1(p, in0_v[j], in1_v[j], v4, a7);
        acc7 += a7;
      }
    }
    const float v7 = red.sum(acc7);
    // stage 2
    if (fabsf(v7) >= 1.17549435e-38f) {
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const int c0 = (it * LANES + lane) * VEC;
      if (c0 >= n) continue;
      const float (&in0_v)[VEC] = in0_x[it];
      const float (&in1_v)[VEC] = in1_x[it];
      unsigned d0[VEC];  // dropout stream 0 (philox4)
#pragma unroll
      for (int j = 0; j < VEC; j += 4) {  // one Philox call, four draws
        const ef_u32x4 w = ef_philox4_draws(rng.seed, rng.offset, 0u, (unsigned long long)(base + c0 + j) >> 2);
        d0[j] = w.x;
        d0[j + 1] = w.y;
        d0[j + 2] = w.z;
        d0[j + 3] = w.w;
      }
      float out0_v[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        ef_86e9262ff1685bce_stage2<false>(p, in0_v[j], in1_v[j], d0[j], v4, v7, out0_v[j]);
      }
      ef_store_vec<ef_bf16, VEC>(p.out0 + base + c0, out0_v);
    }
    } else {  // a divisor below FLT_MIN: its reciprocal overflows
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const int c0 = (it * LANES + lane) * VEC;
      if (c0 >= n) continue;
      const float (&in0_v)[VEC] = in0_x[it];
      const float (&in1_v)[VEC] = in1_x[it];
      unsigned d0[VEC];  // dropout stream 0 (philox4)
#pragma unroll
      for (int j = 0; j < VEC; j += 4) {  // one Philox call, four draws
        const ef_u32x4 w = ef_philox4_draws(rng.seed, rng.offset, 0u, (unsigned long long)(base + c0 + j) >> 2);
        d0[j] = w.x;
        d0[j + 1] = w.y;
        d0[j + 2] = w.z;
        d0[j + 3] = w.w;
      }
      float out0_v[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        ef_86e9262ff1685bce_stage2<true>(p, in0_v[j], in1_v[j], d0[j], v4, v7, out0_v[j]);
      }
      ef_store_vec<ef_bf16, VEC>(p.out0 + base + c0, out0_v);
    }
    }
  }
}
