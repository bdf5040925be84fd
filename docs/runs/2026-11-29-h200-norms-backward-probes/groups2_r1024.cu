// epifuse-variant: shared_bytes=196608
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

struct ef_7a0afa75822c1171_params {
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
__device__ __forceinline__ void ef_7a0afa75822c1171_stage0(const ef_7a0afa75822c1171_params& p, float v0, float v1, float v2, float v3, float v4, float& a8, float& a10) {
  const float v5 = v1 - v3;
  const float v6 = v5 * v4;
  const float v7 = v0 * v2;
  const float v9 = v7 * v6;
  a8 = v7;
  a10 = v9;
}

__device__ __forceinline__ void ef_7a0afa75822c1171_stage1(const ef_7a0afa75822c1171_params& p, float v0, float v1, float v2, float v3, float v4, float v8, float v10, float& o0, float& c1, float& c2) {
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

constexpr int THREADS = 1024, VEC = 8, ITEMS = 1;
constexpr int GROUP = 1024;         // threads of a block on one row
constexpr int CLUSTER = 8;     // blocks on one row
constexpr int ROWS = THREADS / GROUP;   // rows a block walks at once
constexpr int LANES = GROUP * CLUSTER;  // threads on one row
constexpr int RED_VALUES = 2;  // the most values one reduction call combines


// probe: two row groups a block (512 threads each, a row each), sharing one set of
// column sums in shared memory, added in row order (group 0's row, then group 1's)
namespace probe {
constexpr int G = 512, R = 2, GI = 2;             // threads a group, groups, items a thread
constexpr int WG = G / 32;                        // warps a group
constexpr int STAGE = 4 * GI * G * VEC;           // a ring row: two bf16 inputs of G*GI*VEC columns
constexpr int GRING = 2;                          // ring rows a group
constexpr int CS_FLOATS = 2 * GI * VEC * G;       // two sums
__device__ __forceinline__ void group_sync(int g) { asm volatile("bar.sync %0, %1;" ::"r"(1 + g), "r"(G) : "memory"); }
__device__ __forceinline__ void turn_wait(int id) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(2 * G) : "memory"); }
__device__ __forceinline__ void turn_pass(int id) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(2 * G) : "memory"); }
}  // namespace probe

extern "C" __global__ void __launch_bounds__(THREADS) __cluster_dims__(8, 1, 1) ef_7a0afa75822c1171(const ef_7a0afa75822c1171_params p) {
  using namespace probe;
  static_assert(THREADS == R * G, "the tile's block holds R groups");
  const int g = (int)threadIdx.x / G, tg = (int)threadIdx.x % G, warp = tg / 32, wl = tg & 31;
  __shared__ float slots[R * 2 * 2 * WG * CLUSTER];          // [group][half][value][warp][rank]
  __shared__ __align__(8) unsigned long long xbars[R * 2];  // [group][half]
  __shared__ __align__(8) unsigned long long ring_bars[R * GRING];
  extern __shared__ __align__(128) unsigned char ring[];     // [group][GRING] stages, then the column sums
  float4* cs_s = reinterpret_cast<float4*>(ring + R * GRING * STAGE) + tg;
  const unsigned rank = ef_row_cluster_rank();
  const long long u = ef_row_cluster_id(), U = ef_row_cluster_count();
  const int chunk = (int)(p.n / CLUSTER), col0 = (int)rank * chunk;
  auto xbar = [&](int h) { return (unsigned)__cvta_generic_to_shared(xbars + g * 2 + h); };
  auto arm = [&](int h) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(xbar(h)), "r"((unsigned)(WG * CLUSTER * 2 * 4)) : "memory");
  };
  auto ring_bar = [&](int s) { return (unsigned)__cvta_generic_to_shared(ring_bars + g * GRING + s); };
  auto ring_issue = [&](long long r, int s) {
    const unsigned bar = ring_bar(s), base = (unsigned)__cvta_generic_to_shared(ring + (g * GRING + s) * STAGE);
    ef_mbar_expect_tx(bar, (unsigned)chunk * 4u);
    ef_bulk_load(base, p.in0 + r * p.n + col0, (unsigned)chunk * 2u, bar);
    ef_bulk_load(base + 2 * GI * G * VEC, p.in1 + r * p.n + col0, (unsigned)chunk * 2u, bar);
  };
  auto row_of = [&](long long k) { return (k * U + u) * R + g; };
  if (tg == 0) {
    for (int h = 0; h < 2; ++h) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(xbar(h)) : "memory");
    for (int s = 0; s < GRING; ++s) ef_mbar_init(ring_bar(s), 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    for (int h = 0; h < 2; ++h) arm(h);
    for (int s = 0; s < GRING - 1; ++s)
      if (row_of(s) < p.m) ring_issue(row_of(s), s);
  }
  if (g == 0)
#pragma unroll
    for (int q = 0; q < 2 * GI * VEC / 4; ++q) cs_s[q * G] = make_float4(0.f, 0.f, 0.f, 0.f);
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
  __syncthreads();
  long long k = 0;
  for (; (k * U + u) * R < p.m; ++k) {  // rounds: group 0's row exists
    const long long row = row_of(k);
    const bool live = row < p.m;
    const int slot = (int)(k % GRING);
    const unsigned parity = (unsigned)(k / GRING) & 1u;
    float csv[2][GI][VEC];
    if (live) {
      group_sync(g);  // the slot refilled next was read in the last row
      if (tg == 0 && row_of(k + GRING - 1) < p.m) ring_issue(row_of(k + GRING - 1), (slot + GRING - 1) % GRING);
      ef_mbar_wait(ring_bar(slot), parity);
      const ef_bf16* in0_s = reinterpret_cast<const ef_bf16*>(ring + (g * GRING + slot) * STAGE);
      const ef_bf16* in1_s = reinterpret_cast<const ef_bf16*>(ring + (g * GRING + slot) * STAGE + 2 * GI * G * VEC);
      const float in3_r = p.in3[row], in4_r = p.in4[row];
      float acc[2] = {0.0f, 0.0f};
#pragma unroll
      for (int it = 0; it < GI; ++it) {
        const int c = (it * G + tg) * VEC;
        if (c >= chunk) continue;
        float in0_v[VEC], in1_v[VEC], in2_v[VEC];
        ef_load_vec<ef_bf16, VEC>(in0_s + c, in0_v);
        ef_load_vec<ef_bf16, VEC>(in1_s + c, in1_v);
        ef_load_vec<ef_bf16, VEC>(p.in2 + col0 + c, in2_v);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          float a8, a10;
          ef_7a0afa75822c1171_stage0(p, in0_v[j], in1_v[j], in2_v[j], in3_r, in4_r, a8, a10);
          acc[0] += a8;
          acc[1] += a10;
        }
      }
      // the group's exchange across the cluster (each group its own halves)
      const int h = (int)(k & 1);
#pragma unroll
      for (int v = 0; v < 2; ++v)
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[v] += ef_shfl_xor(acc[v], o);
      const float* s = slots + (g * 2 + h) * 2 * WG * CLUSTER;
      if (wl < CLUSTER) {
#pragma unroll
        for (int v = 0; v < 2; ++v) {
          const unsigned local = (unsigned)__cvta_generic_to_shared(s + (v * WG + warp) * CLUSTER + rank);
          asm volatile("{\n\t.reg .b32 ra, rb;\n\tmapa.shared::cluster.u32 ra, %0, %2;\n\tmapa.shared::cluster.u32 rb, %1, %2;\n\t"
                       "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [ra], %3, [rb];\n}\n" ::"r"(local),
                       "r"(xbar(h)), "r"((unsigned)wl), "r"(__float_as_uint(acc[v])) : "memory");
        }
      }
      asm volatile("{\n\t.reg .pred done;\nPROBE_WAIT_%=:\n\tmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n\t"
                   "@!done bra PROBE_WAIT_%=;\n}\n" ::"r"(xbar(h)), "r"((unsigned)((k >> 1) & 1)) : "memory");
      if (tg == 0) arm(h);
      float tot[2];
#pragma unroll
      for (int v = 0; v < 2; ++v) {
        float w = 0.0f;
        for (int x = wl; x < WG * CLUSTER; x += 32) w += s[v * WG * CLUSTER + x];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) w += ef_shfl_xor(w, o);
        tot[v] = w;
      }
      const float v8 = (float)((double)tot[0] * p.n_inv), v10 = (float)((double)tot[1] * p.n_inv);
      const long long base = row * p.n;
#pragma unroll
      for (int it = 0; it < GI; ++it) {
        const int c = (it * G + tg) * VEC;
        if (c >= chunk) continue;
        float in0_v[VEC], in1_v[VEC], in2_v[VEC], out0_v[VEC];
        ef_load_vec<ef_bf16, VEC>(in0_s + c, in0_v);
        ef_load_vec<ef_bf16, VEC>(in1_s + c, in1_v);
        ef_load_vec<ef_bf16, VEC>(p.in2 + col0 + c, in2_v);
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          ef_7a0afa75822c1171_stage1(p, in0_v[j], in1_v[j], in2_v[j], in3_r, in4_r, v8, v10, out0_v[j], csv[0][it][j], csv[1][it][j]);
        ef_store_vec<ef_bf16, VEC>(p.out0 + base + col0 + c, out0_v);
      }
    }
    // the column sums in row order: group 0's row, then group 1's (named barriers 3 and 4)
    if (g == 0) { if (k > 0) turn_wait(4); } else { turn_wait(3); }
    if (live) {
#pragma unroll
      for (int v = 0; v < 2; ++v)
#pragma unroll
        for (int it = 0; it < GI; ++it) {
          if ((it * G + tg) * VEC >= chunk) continue;
#pragma unroll
          for (int q = 0; q < VEC / 4; ++q) {
            float4& sl = cs_s[((v * GI + it) * (VEC / 4) + q) * G];
            float4 a = sl;
            a.x += csv[v][it][4 * q]; a.y += csv[v][it][4 * q + 1]; a.z += csv[v][it][4 * q + 2]; a.w += csv[v][it][4 * q + 3];
            sl = a;
          }
        }
    }
    if (g == 0) turn_pass(3); else turn_pass(4);
  }
  if (g == 0 && k > 0) turn_wait(4);  // group 1's last pass
  __syncthreads();
  // The [N] outputs: group 0's threads carry the block's sums into the grid's tree.
  const bool owner = g == 0;
  long long idx = u, count = U, span = 1, off = 0;
  constexpr int F = 16, C2 = 2;
  auto col_of = [&](int it) -> long long { const int c = (it * G + tg) * VEC; return c < chunk ? (long long)(col0 + c) : -1ll; };
  auto slot_load = [&](int v, int it, float (&x)[VEC]) {
#pragma unroll
    for (int q = 0; q < VEC / 4; ++q) {
      const float4 w = cs_s[((v * GI + it) * (VEC / 4) + q) * G];
      x[4 * q] = w.x; x[4 * q + 1] = w.y; x[4 * q + 2] = w.z; x[4 * q + 3] = w.w;
    }
  };
  __shared__ unsigned col_flag;
  unsigned* counters = p.col_counters;
  float* partials = p.col_partials;
  const long long units = U;
  while (count > 1) {
    const long long q = idx / F;
    const int expect = (int)(count - q * F < F ? count - q * F : F);
    if (expect > 1) {
      if (owner)
        for (int vi = 0; vi < C2 * GI; ++vi) {
          const int v = vi / GI, it = vi % GI;
          const long long col = col_of(it);
          if (col < 0) continue;
          float x[VEC];
          slot_load(v, it, x);
          ef_col_partial_store_vec<VEC>(partials + (v * units + idx * span) * p.n + col, x);
        }
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) {
        unsigned* c = counters + (off + q) * CLUSTER + rank;
        const bool last = atomicAdd(c, 1u) == (unsigned)expect - 1;
        if (last) atomicExch(c, 0u);
        col_flag = last ? 1u : 0u;
        __threadfence();
      }
      __syncthreads();
      if (col_flag == 0) return;
      if (owner)
        for (int vi = 0; vi < C2 * GI; ++vi) {
          const int v = vi / GI, it = vi % GI;
          const long long col = col_of(it);
          if (col < 0) continue;
          float t[VEC];
#pragma unroll 4
          for (int ch = 0; ch < expect; ++ch) {
            const long long child = q * F + ch;
            float x[VEC];
            if (child == idx) slot_load(v, it, x);
            else ef_col_partial_load_vec<VEC>(partials + (v * units + child * span) * p.n + col, x);
#pragma unroll
            for (int j = 0; j < VEC; ++j) t[j] = ch == 0 ? x[j] : t[j] + x[j];
          }
#pragma unroll
          for (int qq = 0; qq < VEC / 4; ++qq)
            cs_s[((v * GI + it) * (VEC / 4) + qq) * G] = make_float4(t[4 * qq], t[4 * qq + 1], t[4 * qq + 2], t[4 * qq + 3]);
        }
    }
    off += (count + F - 1) / F;
    idx = q;
    span *= F;
    count = (count + F - 1) / F;
  }
  if (owner)
    for (int it = 0; it < GI; ++it) {
      const long long col = col_of(it);
      if (col < 0) continue;
      float x[VEC];
      slot_load(0, it, x);
      ef_store_vec<float, VEC>(p.out1 + col, x);
      slot_load(1, it, x);
      ef_store_vec<float, VEC>(p.out2 + col, x);
    }
}
