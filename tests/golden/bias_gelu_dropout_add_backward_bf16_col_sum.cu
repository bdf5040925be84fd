// epifuse elementwise kernel with column sums: dropout -> add -> gelu_tanh_deriv -> mul -> col_sum | out bf16 bf16 bf16
// Generated from templates/elementwise_col_sum.cu.in (Note [Column sums] in
// src/codegen/elementwise/elementwise.hpp). A block is blockDim.x lanes across
// TN = blockDim.x x VEC columns (one vector a lane, so a row's tile is one
// contiguous run of every full tensor) by blockDim.y rows; it walks rows
// blockIdx.y * blockDim.y + k * gridDim.y * blockDim.y, writes the full
// outputs and adds each col_sum's term into registers. The block's rows are
// combined in order through shared memory into one partial row per column
// tile in the workspace; the last block of a column tile to arrive adds the
// gridDim.y partials in slice order, writes the [N] outputs and sets the
// tile's counter back to zero. Fixed order throughout: the same grid gives the
// same bits.
#include "common/numeric.cuh"
#include "common/vector_io.cuh"
#include "common/activations.cuh"
#include "common/philox.cuh"

struct ef_b97c21ec081a1ef3_params {
  const ef_bf16* in0;
  const ef_bf16* in1;
  const ef_bf16* in2;
  ef_bf16* out0;
  ef_bf16* out1;
  ef_bf16* out2;
  long long m;
  long long n;
  unsigned long long seed;
  unsigned long long offset;
  const unsigned long long* rng_state;
  unsigned* arrivals;
  float* partials;
};

// The fused epilogue of one element: straight-line SSA from the op table; a
// col_sum output receives its operand, the term the kernel adds up.
__device__ __forceinline__ void ef_b97c21ec081a1ef3_epilogue(const ef_b97c21ec081a1ef3_params& p, float v0, float v2, float v3, unsigned d0, float& o0, float& o1, float& o2) {
  const float v1 = v0 * ef_dropout_factor(d0, 429496832u, 1.1111112f);
  const float v4 = v2 + v3;
  const float v5 = ef_gelu_tanh_deriv_fast(v4);
  const float v6 = v1 * v5;
  o0 = v6;
  o1 = v6;  // a column term
  o2 = v0;
}

// Sums v[VEC] over the block's rows (threadIdx.y) in order; row 0's lanes
// hold the result for their columns. `red` holds one float a thread.
template <int VEC>
__device__ __forceinline__ void ef_b97c21ec081a1ef3_rows_sum(float (&v)[VEC], float* red) {
  if (blockDim.y == 1) return;  // one row a step: nothing to combine
  const int at = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    __syncthreads();  // the previous element's reads are done
    red[at] = v[j];
    __syncthreads();
    if (threadIdx.y == 0) {
      float s = red[threadIdx.x];
      for (int w = 1; w < (int)blockDim.y; ++w) s += red[w * blockDim.x + threadIdx.x];
      v[j] = s;
    }
  }
}

// The grid is sized for 4 blocks a multiprocessor: on NVIDIA the
// compiler keeps the registers that allows. (HIP's second bound counts waves
// per execution unit, another thing: AMD takes the block size alone.)
#if EF_HIP
extern "C" __global__ void __launch_bounds__(256) ef_b97c21ec081a1ef3(const ef_b97c21ec081a1ef3_params p) {
#else
extern "C" __global__ void __launch_bounds__(256, 4) ef_b97c21ec081a1ef3(const ef_b97c21ec081a1ef3_params p) {
#endif
  constexpr int VEC = 8;
#if !EF_HIP && __CUDA_ARCH__ >= 800  // Note [Staged column loads]: the slots, then the rows' sums
  __shared__ uint4 stage[3][2][256];
  float* const red = reinterpret_cast<float*>(&stage[0][0][0]);
#else
  __shared__ float red[256];
#endif
  // Indices are 32-bit when M*N < 2^30 (cheaper index math), else 64-bit.
  const int n = (int)p.n, m = (int)p.m;
  const int lane = threadIdx.x, ty = threadIdx.y, TY = blockDim.y;
  const int TN = (int)blockDim.x * VEC;  // columns of a block
  const int c0 = (int)blockIdx.x * TN + lane * VEC;
  const bool in_columns = c0 < n;
  // one path: no alignment flag
  float out1_s[VEC];  // the column sum of output 1
#pragma unroll
  for (int j = 0; j < VEC; ++j) out1_s[j] = 0.0f;
  float in2_v[VEC];
  {
    if (in_columns) ef_load_vec<ef_bf16, VEC>(p.in2 + c0, in2_v);
  }
  if (in_columns) {
    const ef_rng_state rng = ef_rng_read(p);  // read once (Note [Seeds on the device])
#if !EF_HIP && __CUDA_ARCH__ >= 800  // Note [Staged column loads]: slots of this thread's own
    constexpr int ST = 3;
    const int tid = ty * (int)blockDim.x + lane;
    const int S = (int)gridDim.y * TY;
    int ahead = (int)blockIdx.y * TY + ty;  // the next row to copy
#pragma unroll
    for (int s = 0; s < ST - 1; ++s, ahead += S) {
      if (ahead < m) {
        ef_stage16(&stage[s][0][tid], p.in0 + ahead * n + c0);
        ef_stage16(&stage[s][1][tid], p.in1 + ahead * n + c0);
      }
      ef_stage_commit();
    }
    int slot = 0;  // row r's
    for (int r = (int)blockIdx.y * TY + ty; r < m; r += S, ahead += S) {
      const int next = slot == 0 ? ST - 1 : slot - 1;  // row r - S's, read already
      if (ahead < m) {
        ef_stage16(&stage[next][0][tid], p.in0 + ahead * n + c0);
        ef_stage16(&stage[next][1][tid], p.in1 + ahead * n + c0);
      }
      ef_stage_commit();
      ef_stage_wait<ST - 1>();  // row r's copies have landed
      constexpr int k = 0;
      const int rk = r;
      const int e0 = rk * n + c0;
      float in0_v[1][VEC];
      ef_load_vec<ef_bf16, VEC>(reinterpret_cast<const ef_bf16*>(&stage[slot][0][tid]), in0_v[0]);
      float in1_v[1][VEC];
      ef_load_vec<ef_bf16, VEC>(reinterpret_cast<const ef_bf16*>(&stage[slot][1][tid]), in1_v[0]);
      slot = slot == ST - 1 ? 0 : slot + 1;
      unsigned d0[VEC];  // dropout stream 0 (philox4)
      {
#pragma unroll
        for (int j = 0; j < VEC; j += 4) {  // one Philox call, four draws
          const ef_u32x4 w = ef_philox4_draws(rng.seed, rng.offset, 0u, (unsigned long long)(e0 + j) >> 2);
          d0[j] = w.x;
          d0[j + 1] = w.y;
          d0[j + 2] = w.z;
          d0[j + 3] = w.w;
        }
      }
      float out0_v[VEC], out1_v[VEC], out2_v[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        ef_b97c21ec081a1ef3_epilogue(p, in0_v[k][j], in1_v[k][j], in2_v[j], d0[j], out0_v[j], out1_v[j], out2_v[j]);
      {
        ef_store_vec<ef_bf16, VEC>(p.out0 + e0, out0_v);
        ef_store_vec<ef_bf16, VEC>(p.out2 + e0, in0_v[k]);
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) { out1_s[j] += out1_v[j]; }
    }
    ef_stage_wait<0>();
#else
    // ROWS rows a step, S apart: their loads are all in flight at once.
    constexpr int ROWS = 1;
    const int S = (int)gridDim.y * TY;
    for (int r = (int)blockIdx.y * TY + ty; r < m; r += ROWS * S) {
      float in0_v[ROWS][VEC];
      float in1_v[ROWS][VEC];
#pragma unroll
      for (int k = 0; k < ROWS; ++k) {
        const int rk = r + k * S;
        if (rk >= m) break;
        const int e0 = rk * n + c0;
        {
          ef_load_vec<ef_bf16, VEC>(p.in0 + e0, in0_v[k]);
          ef_load_vec<ef_bf16, VEC>(p.in1 + e0, in1_v[k]);
        }
      }
#pragma unroll
      for (int k = 0; k < ROWS; ++k) {
        const int rk = r + k * S;
        if (rk >= m) break;
        const int e0 = rk * n + c0;
      unsigned d0[VEC];  // dropout stream 0 (philox4)
      {
#pragma unroll
        for (int j = 0; j < VEC; j += 4) {  // one Philox call, four draws
          const ef_u32x4 w = ef_philox4_draws(rng.seed, rng.offset, 0u, (unsigned long long)(e0 + j) >> 2);
          d0[j] = w.x;
          d0[j + 1] = w.y;
          d0[j + 2] = w.z;
          d0[j + 3] = w.w;
        }
      }
      float out0_v[VEC], out1_v[VEC], out2_v[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        ef_b97c21ec081a1ef3_epilogue(p, in0_v[k][j], in1_v[k][j], in2_v[j], d0[j], out0_v[j], out1_v[j], out2_v[j]);
      {
        ef_store_vec<ef_bf16, VEC>(p.out0 + e0, out0_v);
        ef_store_vec<ef_bf16, VEC>(p.out2 + e0, in0_v[k]);
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) { out1_s[j] += out1_v[j]; }
      }
    }
#endif  // Note [Staged column loads]
  }
  // The block's partial sums, then the column tile's total in its last block.
  const int slice_stride = (int)gridDim.x * TN;
  const int part0 = (int)blockIdx.y * slice_stride + (int)blockIdx.x * TN + lane * VEC;
  const int sum_stride = (int)gridDim.y * slice_stride;
  ef_b97c21ec081a1ef3_rows_sum<VEC>(out1_s, red);
  if (ty == 0) {
    float* q = p.partials + 0 * sum_stride + part0;
#pragma unroll
    for (int j = 0; j < VEC; ++j) q[j] = out1_s[j];
  }
  __threadfence();  // the partials are visible before the arrival counts
  __syncthreads();
  const bool first = threadIdx.x == 0 && threadIdx.y == 0;
  const bool last = __syncthreads_or(first && atomicAdd(&p.arrivals[blockIdx.x], 1u) == gridDim.y - 1);
  if (!last) return;
  __threadfence();  // every other block's partials are read after its arrival
  {
    float t[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) t[j] = 0.0f;
#pragma unroll 4
    for (int s = ty; s < (int)gridDim.y; s += TY) {
      const float* q = p.partials + 0 * sum_stride + s * slice_stride + (int)blockIdx.x * TN + lane * VEC;
#pragma unroll
      for (int j = 0; j < VEC; ++j) t[j] += ef_col_partial_load(q + j);  // another block's: L2
    }
    ef_b97c21ec081a1ef3_rows_sum<VEC>(t, red);
    if (ty == 0) {
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        if (c0 + j < n) p.out1[c0 + j] = ef_from_float<ef_bf16>(t[j]);
    }
  }
  if (first) p.arrivals[blockIdx.x] = 0u;  // the zeroed workspace stays zero
}
