// epifuse row kernel: sub -> mul -> mul -> row_mean -> mul -> row_mean -> sub -> mul -> sub -> mul -> mul -> col_sum -> col_sum | out bf16 f32 f32
// Generated from templates/row.cu.in (docs/row-reductions.md). Each row is
// walked by GROUP threads of a block (a block takes ROWS rows at once) or by
// the CLUSTER blocks of a thread-block cluster; the grid is persistent
// (multiprocessors x occupancy blocks) or one block per row. A row takes
// 2 stages, each ending in reductions whose per-row results the
// next stage reads; the last stage writes the outputs. With ITEMS > 0 a thread
// keeps its ITEMS vectors of each full input in registers and the row is read
// once; with ITEMS 0 every stage reads it again (long rows; L2 serves the re-reads).
#include "common/numeric.cuh"
#include "common/vector_io.cuh"
#include "common/activations.cuh"
#include "common/philox.cuh"
#include "common/row_reduce.cuh"
#include "common/hopper.cuh"

struct ef_270a5f29761ab0e5_params {
  const ef_bf16* in0;
  const ef_bf16* in1;
  const ef_bf16* in2;
  const float* in3;
  const float* in4;
  ef_bf16* out0;
  float* out1;
  float* out2;
  long long m;
  long long n;
  double n_inv;
  unsigned long long seed;
  unsigned long long offset;
  unsigned* col_counters;
  float* col_partials;
};

// Note [Row stages] (src/codegen/row/plan_row.cpp): stage s of one element.
__device__ __forceinline__ void ef_270a5f29761ab0e5_stage0(const ef_270a5f29761ab0e5_params& p, float v0, float v1, float v2, float v3, float v4, float& a8, float& a10) {
  const float v5 = v1 - v3;
  const float v6 = v5 * v4;
  const float v7 = v0 * v2;
  const float v9 = v7 * v6;
  a8 = v7;
  a10 = v9;
}

__device__ __forceinline__ void ef_270a5f29761ab0e5_stage1(const ef_270a5f29761ab0e5_params& p, float v0, float v1, float v2, float v3, float v4, float v8, float v10, float& o0, float& c1, float& c2) {
  const float v5 = v1 - v3;
  const float v6 = v5 * v4;
  const float v7 = v0 * v2;
  const float v11 = v7 - v8;
  const float v12 = v6 * v10;
  const float v13 = v11 - v12;
  const float v14 = v13 * v4;
  const float v15 = v0 * v6;
  o0 = v14;
  c1 = v15;
  c2 = v0;
}

constexpr int THREADS = 512, VEC = 8, ITEMS = 2;
constexpr int GROUP = 512;         // threads of a block on one row
constexpr int CLUSTER = 8;     // blocks on one row
constexpr int ROWS = THREADS / GROUP;   // rows a block walks at once
constexpr int LANES = GROUP * CLUSTER;  // threads on one row
constexpr int RED_VALUES = 2;  // the most values one reduction call combines


// probe: a cluster reducer whose send and wait are apart (four buffers), for a row pipeline
template <int THREADS_, int CLUSTER_, int VALUES_, int BUFS>
struct PipeRed {
  static constexpr int WARPS = THREADS_ / 32;
  float* slots;                 // BUFS * VALUES * WARPS * CLUSTER
  unsigned long long* bars;     // BUFS
  __device__ __forceinline__ unsigned bar(int b) const { return (unsigned)__cvta_generic_to_shared(bars + b); }
  __device__ __forceinline__ void arm(int b) const {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar(b)), "r"((unsigned)(WARPS * CLUSTER_ * VALUES_ * 4)) : "memory");
  }
  __device__ __forceinline__ void start() const {
    if (threadIdx.x == 0) {
      for (int b = 0; b < BUFS; ++b) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar(b)) : "memory");
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
      for (int b = 0; b < BUFS; ++b) arm(b);
    }
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
  }
  // the warp's sums of v into every block's buffer i % BUFS
  __device__ __forceinline__ void send(long long i, float (&v)[VALUES_]) const {
    const int b = (int)(i % BUFS), warp = threadIdx.x / 32, lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < VALUES_; ++k)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v[k] += ef_shfl_xor(v[k], o);
    const float* s = slots + b * VALUES_ * WARPS * CLUSTER_;
    if (lane < CLUSTER_) {
#pragma unroll
      for (int k = 0; k < VALUES_; ++k) {
        const unsigned local = (unsigned)__cvta_generic_to_shared(s + (k * WARPS + warp) * CLUSTER_ + ef_row_cluster_rank());
        asm volatile("{\n\t.reg .b32 ra, rb;\n\tmapa.shared::cluster.u32 ra, %0, %2;\n\tmapa.shared::cluster.u32 rb, %1, %2;\n\t"
                     "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [ra], %3, [rb];\n}\n" ::"r"(local),
                     "r"(bar(b)), "r"((unsigned)lane), "r"(__float_as_uint(v[k])) : "memory");
      }
    }
  }
  __device__ __forceinline__ void finish(long long i, float (&v)[VALUES_]) const {
    const int b = (int)(i % BUFS), lane = threadIdx.x & 31;
    const unsigned par = (unsigned)((i / BUFS) & 1);
    asm volatile("{\n\t.reg .pred done;\nPIPE_WAIT_%=:\n\tmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n\t"
                 "@!done bra PIPE_WAIT_%=;\n}\n" ::"r"(bar(b)), "r"(par) : "memory");
    if (threadIdx.x == 0) arm(b);
    const float* s = slots + b * VALUES_ * WARPS * CLUSTER_;
#pragma unroll
    for (int k = 0; k < VALUES_; ++k) {
      float w = 0.0f;
#pragma unroll
      for (int x = lane; x < WARPS * CLUSTER_; x += 32) w += s[k * WARPS * CLUSTER_ + x];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) w += ef_shfl_xor(w, o);
      v[k] = w;
    }
  }
};

extern "C" __global__ void __launch_bounds__(THREADS) __cluster_dims__(8, 1, 1) ef_270a5f29761ab0e5(const ef_270a5f29761ab0e5_params p) {
  __shared__ float scratch[2 * RED_VALUES * (THREADS / EF_WARP)];
  __shared__ float cluster_slots[1];
  __shared__ __align__(8) unsigned long long cluster_bars[1];
  EfRowReducer<THREADS, GROUP, CLUSTER, RED_VALUES> red{scratch, cluster_slots, cluster_bars};  // unit() and units() only
  constexpr int BUFS = 4;
  __shared__ float pipe_slots[BUFS * RED_VALUES * (THREADS / 32) * CLUSTER];
  __shared__ __align__(8) unsigned long long pipe_bars[BUFS];
  PipeRed<THREADS, CLUSTER, RED_VALUES, BUFS> pr{pipe_slots, pipe_bars};
  pr.start();
  constexpr int RING = 3, RING_STAGE = 4 * ITEMS * THREADS * VEC;
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) unsigned long long ring_bars[RING];
  const int chunk = (int)(p.n / CLUSTER), col0 = (int)ef_row_cluster_rank() * chunk;
  auto ring_bar = [&](int s) { return (unsigned)__cvta_generic_to_shared(ring_bars + s); };
  auto ring_issue = [&](long long r, int s) {
    const unsigned bar = ring_bar(s), base_smem = (unsigned)__cvta_generic_to_shared(ring + s * RING_STAGE);
    ef_mbar_expect_tx(bar, (unsigned)chunk * 4u);
    ef_bulk_load(base_smem + 0 * ITEMS * THREADS * VEC, p.in0 + r * p.n + col0, (unsigned)chunk * 2u, bar);
    ef_bulk_load(base_smem + 2 * ITEMS * THREADS * VEC, p.in1 + r * p.n + col0, (unsigned)chunk * 2u, bar);
  };
  const long long u0 = red.unit(), us = red.units();
  if (threadIdx.x == 0) {
    for (int s = 0; s < RING; ++s) ef_mbar_init(ring_bar(s), 1);
    ef_mbar_init_fence();
    for (int s = 0; s < RING - 1; ++s)
      if (u0 + s * us < p.m) ring_issue(u0 + s * us, s);
  }
  __syncthreads();
  float cs[2][ITEMS][VEC];
#pragma unroll
  for (int k = 0; k < 2; ++k)
#pragma unroll
    for (int it = 0; it < ITEMS; ++it)
#pragma unroll
      for (int j = 0; j < VEC; ++j) cs[k][it][j] = 0.0f;
  // stage 0 of the block's i-th row: its sums sent to buffer i
  auto stage0 = [&](long long i, long long row) {
    const int slot = (int)(i % RING);
    ef_mbar_wait(ring_bar(slot), (unsigned)(i / RING) & 1u);
    const ef_bf16* in0_s = reinterpret_cast<const ef_bf16*>(ring + slot * RING_STAGE + 0 * ITEMS * THREADS * VEC);
    const ef_bf16* in1_s = reinterpret_cast<const ef_bf16*>(ring + slot * RING_STAGE + 2 * ITEMS * THREADS * VEC);
    const float in3_r = p.in3[row], in4_r = p.in4[row];
    float acc8 = 0.0f, acc10 = 0.0f;
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const int c = (it * THREADS + (int)threadIdx.x) * VEC;
      if (c >= chunk) continue;
      const int c0 = col0 + c;
      float in0_v[VEC], in1_v[VEC], in2_v[VEC];
      ef_load_vec<ef_bf16, VEC>(in0_s + c, in0_v);
      ef_load_vec<ef_bf16, VEC>(in1_s + c, in1_v);
      ef_load_vec<ef_bf16, VEC>(p.in2 + c0, in2_v);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        float a8, a10;
        ef_270a5f29761ab0e5_stage0(p, in0_v[j], in1_v[j], in2_v[j], in3_r, in4_r, a8, a10);
        acc8 += a8;
        acc10 += a10;
      }
    }
    float r2[2] = {acc8, acc10};
    pr.send(i, r2);
  };
  if (u0 < p.m) stage0(0, u0);
  long long i = 0;
  for (long long row = u0; row < p.m; row += us, ++i) {
    __syncthreads();  // the slot refilled next was read by the row before
    if (threadIdx.x == 0 && row + 2 * us < p.m) ring_issue(row + 2 * us, (int)((i + 2) % RING));
    if (row + us < p.m) stage0(i + 1, row + us);
    float r2[2];
    pr.finish(i, r2);
    const float v8 = (float)((double)r2[0] * p.n_inv);
    const float v10 = (float)((double)r2[1] * p.n_inv);
    const int slot = (int)(i % RING);
    const ef_bf16* in0_s = reinterpret_cast<const ef_bf16*>(ring + slot * RING_STAGE + 0 * ITEMS * THREADS * VEC);
    const ef_bf16* in1_s = reinterpret_cast<const ef_bf16*>(ring + slot * RING_STAGE + 2 * ITEMS * THREADS * VEC);
    const float in3_r = p.in3[row], in4_r = p.in4[row];
    const long long base = row * p.n;
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const int c = (it * THREADS + (int)threadIdx.x) * VEC;
      if (c >= chunk) continue;
      const int c0 = col0 + c;
      float in0_v[VEC], in1_v[VEC], in2_v[VEC], out0_v[VEC];
      ef_load_vec<ef_bf16, VEC>(in0_s + c, in0_v);
      ef_load_vec<ef_bf16, VEC>(in1_s + c, in1_v);
      ef_load_vec<ef_bf16, VEC>(p.in2 + c0, in2_v);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        float c1, c2;
        ef_270a5f29761ab0e5_stage1(p, in0_v[j], in1_v[j], in2_v[j], in3_r, in4_r, v8, v10, out0_v[j], c1, c2);
        cs[0][it][j] += c1;
        cs[1][it][j] += c2;
      }
      ef_store_vec<ef_bf16, VEC>(p.out0 + base + c0, out0_v);
    }
  }
  // The [N] outputs: the block's column sums, then the grid's tree (Note [Column sums]).
  __shared__ float col_buf[ROWS > 1 ? 2 * ITEMS * GROUP * VEC : 1];
  __shared__ unsigned col_flag;
  auto col_of = [&](int it) -> long long {
    const int c = (it * THREADS + (int)threadIdx.x) * VEC;
    return c < chunk ? (long long)(col0 + c) : -1ll;
  };
  auto col_store = [&](int k, long long col, const float (&v)[VEC]) {
    if (k == 0) ef_store_vec<float, VEC>(p.out1 + col, v);
    if (k == 1) ef_store_vec<float, VEC>(p.out2 + col, v);
  };
  ef_col_sums_finish<2, ITEMS, VEC, THREADS, GROUP, 16>(cs, col_buf, &col_flag, p.col_counters, p.col_partials, p.n,
      red.unit(), red.units(), (int)ef_row_cluster_rank(), CLUSTER, col_of, col_store);
}
