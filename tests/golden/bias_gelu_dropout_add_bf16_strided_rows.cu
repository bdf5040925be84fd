// epifuse elementwise kernel over strided rows: add -> gelu_tanh -> dropout -> add | out bf16
// Generated from templates/elementwise_rows.cu.in (Note [Strided rows] in
// src/codegen/elementwise/elementwise.hpp). Some full tensor's rows lie
// p.ld_<tensor> elements apart, so one index over M*N cannot address it: the
// kernel walks (row, column) as the column-sum kernel does. A block is
// blockDim.x lanes across TN = blockDim.x x VEC columns (one vector a lane, a
// contiguous run of every row) by blockDim.y rows; the grid strides over
// column tiles (x) and rows (y). A thread holds ROWS rows of its column tile
// in flight, S apart: it issues all their loads, then their dropout draws,
// before it computes and stores the first, so ROWS vectors of each full input
// are on their way where one was (a row past M is skipped). A strided
// tensor's element (r, c) is at r * p.ld_<tensor> + c, a dense one's at
// r * N + c. A dropout draw's index is r * N + c, the element's place in the
// [M,N] result, so a view and its dense copy draw the same mask and give the
// same bits.
#include "common/numeric.cuh"
#include "common/vector_io.cuh"
#include "common/activations.cuh"
#include "common/philox.cuh"

struct ef_ed4c77e06ed915d7_params {
  const ef_bf16* in0;
  const ef_bf16* in1;
  const ef_bf16* in2;
  ef_bf16* out0;
  long long m;
  long long n;
  long long ld_in0;
  long long ld_in2;
  long long ld_out0;
  unsigned long long seed;
  unsigned long long offset;
  const unsigned long long* rng_state;
};

// The fused epilogue of one element: straight-line SSA from the op table.
__device__ __forceinline__ void ef_ed4c77e06ed915d7_epilogue(const ef_ed4c77e06ed915d7_params& p, float v0, float v1, float v2, unsigned d0, float& o0) {
  const float v3 = v0 + v1;
  const float v4 = ef_gelu_tanh_fast(v3);
  const float v5 = v4 * ef_dropout_factor(d0, 429496832u, 1.1111112f);
  const float v6 = v5 + v2;
  o0 = v6;
}

extern "C" __global__ void __launch_bounds__(256) ef_ed4c77e06ed915d7(const ef_ed4c77e06ed915d7_params p) {
  constexpr int VEC = 8;
  constexpr int ROWS = 4;  // rows in flight a thread (strided_rows_in_flight)
  // Dense indices are 32-bit when M*N < 2^30; a strided tensor's are 64-bit (its ld is).
  const int n = (int)p.n, m = (int)p.m;
  const int lane = threadIdx.x, ty = threadIdx.y, TY = blockDim.y;
  const int TN = (int)blockDim.x * VEC;  // columns of a block
  const int S = (int)gridDim.y * TY;     // rows the grid takes a step
  // one path: no alignment flag
  for (int c0 = (int)blockIdx.x * TN + lane * VEC; c0 < n; c0 += (int)gridDim.x * TN) {
    float in1_v[VEC];
    {
      ef_load_vec<ef_bf16, VEC>(p.in1 + c0, in1_v);
    }
    for (int r = (int)blockIdx.y * TY + ty; r < m; r += ROWS * S) {
      // Rows r + k * S, k < ROWS: every row's loads, then every row's draws,
      // then row by row the epilogue and the stores.
      float in0_v[ROWS][VEC];
      float in2_v[ROWS][VEC];
#pragma unroll
      for (int k = 0; k < ROWS; ++k) {
        const int rk = r + k * S;
        if (rk >= m) break;
        const int e0 = rk * n + c0;
        {
          ef_load_vec<ef_bf16, VEC>(p.in0 + rk * p.ld_in0 + c0, in0_v[k]);
          ef_load_vec<ef_bf16, VEC>(p.in2 + rk * p.ld_in2 + c0, in2_v[k]);
        }
      }
      unsigned d0[ROWS][VEC];  // dropout stream 0 (philox4)
#pragma unroll
      for (int k = 0; k < ROWS; ++k) {
        const int rk = r + k * S;
        if (rk >= m) break;
        const int e0 = rk * n + c0;
        {
#pragma unroll
          for (int j = 0; j < VEC; j += 4) {  // one Philox call, four draws
            const ef_u32x4 w = ef_philox4_draws(ef_seed(p), ef_offset(p), 0u, (unsigned long long)(e0 + j) >> 2);
            d0[k][j] = w.x;
            d0[k][j + 1] = w.y;
            d0[k][j + 2] = w.z;
            d0[k][j + 3] = w.w;
          }
        }
      }
#pragma unroll
      for (int k = 0; k < ROWS; ++k) {
        const int rk = r + k * S;
        if (rk >= m) break;
        const int e0 = rk * n + c0;  // the element's place in [M,N]: dense tensors' offset, the draws' index
        float out0_v[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          ef_ed4c77e06ed915d7_epilogue(p, in0_v[k][j], in1_v[j], in2_v[k][j], d0[k][j], out0_v[j]);
        {
          ef_store_vec<ef_bf16, VEC>(p.out0 + rk * p.ld_out0 + c0, out0_v);
        }
      }
    }
  }
}
