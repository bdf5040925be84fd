// Row reductions of the row family (templates/row.cu.in): the partial values
// of a row's threads combined into one value every one of them gets. A group
// of up to 32 threads: warp shuffles alone. A whole block: shuffles, one slot
// per warp in shared memory, then warp 0. A cluster of blocks: each warp's
// value is stored into every block's shared memory (distributed shared
// memory, sm_90) with st.async, completing bytes on that block's mbarrier; a
// block waits on its own mbarrier alone (no block or cluster barrier), and
// every warp combines the WARPS x CLUSTER values in the same order, so that
// every block of the cluster gets the same bits.
#pragma once

#define EF_NEG_INF __int_as_float(0xff800000)

// ef_max_nan (common/activations.cuh): max that propagates NaN, as the reference's row_max.
struct EfSum {
  static __device__ __forceinline__ float combine(float a, float b) { return a + b; }
  static __device__ __forceinline__ float identity() { return 0.0f; }
};
struct EfMax {
  static __device__ __forceinline__ float combine(float a, float b) { return ef_max_nan(a, b); }
  static __device__ __forceinline__ float identity() { return EF_NEG_INF; }
};

#if !EF_HIP  // clusters and distributed shared memory: sm_90 (the family refuses them elsewhere)
// Cluster special registers (read only by cluster kernels, sm_90).
__device__ __forceinline__ unsigned ef_row_cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned ef_row_cluster_id() {
  unsigned r;
  asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned ef_row_cluster_count() {
  unsigned r;
  asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(r));
  return r;
}
#endif

// `scratch`: 2 * VALUES * (THREADS / EF_WARP) floats; `cluster_slots`: 2 *
// VALUES * (THREADS / 32) * CLUSTER floats; `cluster_bars`: two mbarriers.
// VALUES is the most values one call reduces (a stage's independent
// reductions go together, Note [Reductions of a stage] in emit_row_sums.cpp).
// Block: each warp stores its partials into one half of `scratch`, one
// barrier, then every warp combines all the warps' values itself, in the same
// order, so every thread gets the same bits (those warp 0 alone got before).
// The halves alternate: a warp stores into a half for call k + 2 only after
// the barrier of call k + 1, which every warp passes only after it read that
// half's values of call k. Cluster: the slots and mbarriers alternate between
// two halves in the same way; a block writes a peer's half for call k + 2
// only after it got every value of call k + 1, which each of the peer's warps
// sends only after it read that half's values of call k. Thread 0 re-arms a
// half's mbarrier (expecting the next call's bytes: every call sends VALUES
// values a warp, the ones past its count as padding) as soon as its wait on
// it returns, before its warp sends anything of the next call, so no byte of
// call k + 2 comes before the arming.
template <int THREADS, int GROUP, int CLUSTER, int VALUES = 1>
struct EfRowReducer {
  static constexpr int WARPS = THREADS / EF_WARP;
  static_assert(GROUP <= EF_WARP || GROUP == THREADS, "a group of more than a warp is the whole block");
#if EF_HIP
  static_assert(CLUSTER == 1, "thread-block clusters are an sm_90 feature");
#endif
  float* scratch;
  float* cluster_slots;
  unsigned long long* cluster_bars;
  unsigned phase = 0, parity = 0;  // the half used next; each cluster half's mbarrier parity (bits 0 and 1)

  // This thread's index among the row's threads, the first row unit (block or
  // cluster) this block takes, and how many units the grid has.
  __device__ __forceinline__ int lane() const {
#if !EF_HIP
    if constexpr (CLUSTER > 1) return (int)threadIdx.x + (int)ef_row_cluster_rank() * THREADS;
#endif
    return (int)threadIdx.x % GROUP;
  }
  __device__ __forceinline__ long long unit() const {
#if !EF_HIP
    if constexpr (CLUSTER > 1) return ef_row_cluster_id();
#endif
    return blockIdx.x;
  }
  __device__ __forceinline__ long long units() const {
#if !EF_HIP
    if constexpr (CLUSTER > 1) return ef_row_cluster_count();
#endif
    return gridDim.x;
  }

  // Before a block stores into a peer's shared memory the peer must be
  // running and its mbarriers armed: one cluster barrier at the start
  // (without it, a cluster of 8 blocks of 128 threads faulted on the first store).
  __device__ __forceinline__ void start() const {
#if !EF_HIP
    if constexpr (CLUSTER > 1) {
      if (threadIdx.x == 0) {
        for (int h = 0; h < 2; ++h)
          asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar(h)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        for (int h = 0; h < 2; ++h) arm(h);
      }
      asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
    }
#endif
  }
#if !EF_HIP
  __device__ __forceinline__ unsigned bar(int h) const { return (unsigned)__cvta_generic_to_shared(cluster_bars + h); }
  // One arrival, expecting the bytes a call brings: VALUES floats from each warp of each block.
  __device__ __forceinline__ void arm(int h) const {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar(h)),
                 "r"((unsigned)(WARPS * CLUSTER * VALUES * 4))
                 : "memory");
  }
#endif

  // Reduces each of v[0..K) over the row's threads; every thread gets the results.
  template <class Op, int K>
  __device__ __forceinline__ void reduce_n(float (&v)[K]) {
    static_assert(K >= 1 && K <= VALUES, "a call reduces at most VALUES values");
    constexpr int width = GROUP < EF_WARP ? GROUP : EF_WARP;
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int o = width / 2; o > 0; o >>= 1) v[k] = Op::combine(v[k], ef_shfl_xor(v[k], o));
#if !EF_HIP
    if constexpr (CLUSTER > 1) {
      // Lane r of every warp sends the warp's values to rank r's half: value k
      // of warp w at slot (k * WARPS + w) * CLUSTER + the sender's rank.
      const int h = (int)phase, warp = threadIdx.x / 32, lane = threadIdx.x & 31;
      phase ^= 1u;
      const float* slots = cluster_slots + h * VALUES * WARPS * CLUSTER;
      if (lane < CLUSTER) {
#pragma unroll
        for (int k = 0; k < VALUES; ++k) {
          const float value = k < K ? v[k < K ? k : 0] : Op::identity();  // padding past K: the bytes the mbarrier expects
          const unsigned local =
              (unsigned)__cvta_generic_to_shared(slots + (k * WARPS + warp) * CLUSTER + ef_row_cluster_rank());
          asm volatile(
              "{\n\t.reg .b32 ra, rb;\n\t"
              "mapa.shared::cluster.u32 ra, %0, %2;\n\t"
              "mapa.shared::cluster.u32 rb, %1, %2;\n\t"
              "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [ra], %3, [rb];\n}\n" ::"r"(local),
              "r"(bar(h)), "r"((unsigned)lane), "r"(__float_as_uint(value))
              : "memory");
        }
      }
      const unsigned par = (parity >> h) & 1u;
      parity ^= 1u << h;
      asm volatile(
          "{\n\t.reg .pred done;\n"
          "EF_RED_WAIT_%=:\n\t"
          "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n\t"
          "@!done bra EF_RED_WAIT_%=;\n}\n" ::"r"(bar(h)),
          "r"(par)
          : "memory");
      if (threadIdx.x == 0) arm(h);
      // The same combine in every warp of every block: lane l takes values l, l + 32, ...
#pragma unroll
      for (int k = 0; k < K; ++k) {
        float w = Op::identity();
#pragma unroll
        for (int i = lane; i < WARPS * CLUSTER; i += 32) w = Op::combine(w, slots[k * WARPS * CLUSTER + i]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) w = Op::combine(w, ef_shfl_xor(w, o));
        v[k] = w;
      }
      return;
    }
#endif
    if constexpr (GROUP > EF_WARP) {
      const int warp = threadIdx.x / EF_WARP, lane = threadIdx.x % EF_WARP;
      float* half = scratch + phase * VALUES * WARPS;
      phase ^= 1u;
      if (lane == 0)
#pragma unroll
        for (int k = 0; k < K; ++k) half[k * WARPS + warp] = v[k];
      __syncthreads();
#pragma unroll
      for (int k = 0; k < K; ++k) {
        float w = lane < WARPS ? half[k * WARPS + lane] : Op::identity();
#pragma unroll
        for (int o = EF_WARP / 2; o > 0; o >>= 1) w = Op::combine(w, ef_shfl_xor(w, o));
        v[k] = w;
      }
    }
  }
  template <int K>
  __device__ __forceinline__ void max_n(float (&v)[K]) { reduce_n<EfMax>(v); }
  template <int K>
  __device__ __forceinline__ void sum_n(float (&v)[K]) { reduce_n<EfSum>(v); }
  __device__ __forceinline__ float max(float v) {
    float a[1] = {v};
    reduce_n<EfMax>(a);
    return a[0];
  }
  __device__ __forceinline__ float sum(float v) {
    float a[1] = {v};
    reduce_n<EfSum>(a);
    return a[0];
  }
};

// Note [Column sums] (src/codegen/row/emit_row_sums.cpp): an [N] output sums a
// full value over all M rows (a norm's weight and bias gradients). Each
// thread adds up its columns over the rows its block takes (`cs`, C sums of
// ITEMS x VEC floats); the groups of a block combine through shared memory
// (`buf`, C * ITEMS * GROUP * VEC floats), last group first; then the grid's
// partial rows meet in a tree of fan-in F over the row units (blocks, or
// clusters: each cluster rank has its own columns and its own tree). At each
// node the children publish their sums in the workspace (`partials`, a row of
// N floats per unit and sum) and count themselves in (`counters`, zeroed);
// the last child to arrive resets the counter, adds the F children in child
// order and goes on up, the others stop. The sums do not depend on which
// block arrives last, so two launches on one GPU (one grid) give the same
// bits; the adds are spread over the units of each level, and the last block
// does at most log_F(units) nodes. Returns after storing through `store` at
// the root (every column this block owns), or early.
// The partial rows go through L2 (ef_col_partial_store and _load, common/platform.cuh).

// VEC floats of a partial row (16-byte pieces where VEC allows: a partial
// row starts at a multiple of N floats, and VEC divides N).
template <int VEC>
__device__ __forceinline__ void ef_col_partial_load_vec(const float* p, float (&v)[VEC]) {
#if !EF_HIP
  if constexpr (VEC % 4 == 0) {
#pragma unroll
    for (int j = 0; j < VEC; j += 4) {
      const float4 w = __ldcg(reinterpret_cast<const float4*>(p + j));
      v[j] = w.x;
      v[j + 1] = w.y;
      v[j + 2] = w.z;
      v[j + 3] = w.w;
    }
    return;
  }
#endif
#pragma unroll
  for (int j = 0; j < VEC; ++j) v[j] = ef_col_partial_load(p + j);
}

template <int VEC>
__device__ __forceinline__ void ef_col_partial_store_vec(float* p, const float (&v)[VEC]) {
#if !EF_HIP
  if constexpr (VEC % 4 == 0) {
#pragma unroll
    for (int j = 0; j < VEC; j += 4) __stcg(reinterpret_cast<float4*>(p + j), make_float4(v[j], v[j + 1], v[j + 2], v[j + 3]));
    return;
  }
#endif
#pragma unroll
  for (int j = 0; j < VEC; ++j) ef_col_partial_store(p + j, v[j]);
}

// The tree's walk from this block's unit to the root, shared by both forms of
// the finish: at each node with siblings, `publish(idx, span)` writes this
// node's sums to its partial rows, the children count themselves in, and the
// last to arrive calls `combine(q, expect, idx, span)` (children q * F ...
// q * F + expect - 1 in order; child idx is this block's own, not yet in the
// workspace) and goes on up. Returns false where a sibling carries the sums up.
template <int F, class Publish, class Combine>
__device__ __forceinline__ bool ef_col_tree_climb(unsigned* flag, unsigned* counters, long long unit, long long units,
                                                  int rank, int cluster, Publish publish, Combine combine) {
  long long idx = unit, count = units, span = 1, off = 0;  // this block's node, the nodes of its level
  while (count > 1) {
    const long long q = idx / F;
    const int expect = (int)(count - q * F < F ? count - q * F : F);
    if (expect > 1) {
      publish(idx, span);
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) {
        unsigned* c = counters + (off + q) * cluster + rank;
        const bool last = atomicAdd(c, 1u) == (unsigned)expect - 1;
        if (last) atomicExch(c, 0u);  // left zero for the next launch
        *flag = last ? 1u : 0u;
        __threadfence();
      }
      __syncthreads();
      if (*flag == 0) return false;  // a sibling arrives later and carries the sum up
      combine(q, expect, idx, span);
    }
    off += (count + F - 1) / F;
    idx = q;
    span *= F;
    count = (count + F - 1) / F;
  }
  return true;
}

// The same tree with the block's sums staged in shared memory (a row tile's
// `t`, one row a block): after the last row the ring's bytes are free, so the
// sums move there (`slots`, C x ITEMS x VEC x THREADS floats, each thread's
// own and conflict-free) and the tree works on one (sum, item) pair at a
// time. The kernel then needs registers for the row loop's sums alone, not
// for the tree's C x ITEMS x VEC partial sums besides them, which can leave
// room for another block a multiprocessor. Children are added in the same
// order: the bits are those of ef_col_sums_finish.
template <int C, int ITEMS, int VEC, int THREADS, int F, class ColOf, class Store>
__device__ __forceinline__ void ef_col_sums_finish_shared(const float (&cs)[C][ITEMS][VEC], float* slots, unsigned* flag,
                                                          unsigned* counters, float* partials, long long n,
                                                          long long unit, long long units, int rank, int cluster,
                                                          ColOf col_of, Store store) {
  static_assert(VEC % 4 == 0, "a ring's vectors are 16 bytes of its narrowest input: 4, 8 or 16 floats");
  // Slot (k, it)'s VEC floats of this thread, four at a time, THREADS x 4 apart.
  auto slot = [&](int k, int it, int j) {
    return reinterpret_cast<float4*>(slots) + ((k * ITEMS + it) * (VEC / 4) + j / 4) * THREADS + (int)threadIdx.x;
  };
  auto put = [&](int k, int it, const float (&v)[VEC]) {
#pragma unroll
    for (int j = 0; j < VEC; j += 4) *slot(k, it, j) = make_float4(v[j], v[j + 1], v[j + 2], v[j + 3]);
  };
  auto get = [&](int k, int it, float (&v)[VEC]) {
#pragma unroll
    for (int j = 0; j < VEC; j += 4) {
      const float4 w = *slot(k, it, j);
      v[j] = w.x, v[j + 1] = w.y, v[j + 2] = w.z, v[j + 3] = w.w;
    }
  };
  __syncthreads();  // every thread has read the ring's last row
#pragma unroll
  for (int k = 0; k < C; ++k)
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) put(k, it, cs[k][it]);
  // f(k, it, col) for each (sum, item) pair whose columns this thread owns, one at a time.
  auto each_pair = [&](auto&& f) {
#pragma unroll 1
    for (int kit = 0; kit < C * ITEMS; ++kit) {
      const int k = kit / ITEMS, it = kit % ITEMS;
      const long long col = col_of(it);
      if (col >= 0) f(k, it, col);
    }
  };
  auto publish = [&](long long idx, long long span) {
    each_pair([&](int k, int it, long long col) {
      float v[VEC];
      get(k, it, v);
      ef_col_partial_store_vec<VEC>(partials + (k * units + idx * span) * n + col, v);
    });
  };
  auto combine = [&](long long q, int expect, long long idx, long long span) {
    each_pair([&](int k, int it, long long col) {
      float t[VEC];
#pragma unroll 4
      for (int ch = 0; ch < expect; ++ch) {
        const long long child = q * F + ch;
        float v[VEC];
        if (child == idx) get(k, it, v);
        else ef_col_partial_load_vec<VEC>(partials + (k * units + child * span) * n + col, v);
#pragma unroll
        for (int j = 0; j < VEC; ++j) t[j] = ch == 0 ? v[j] : t[j] + v[j];
      }
      put(k, it, t);
    });
  };
  if (!ef_col_tree_climb<F>(flag, counters, unit, units, rank, cluster, publish, combine)) return;
  each_pair([&](int k, int it, long long col) {
    float v[VEC];
    get(k, it, v);
    store(k, col, v);
  });
}

template <int C, int ITEMS, int VEC, int THREADS, int GROUP, int F, class ColOf, class Store>
__device__ __forceinline__ void ef_col_sums_finish(float (&cs)[C][ITEMS][VEC], float* buf, unsigned* flag,
                                                   unsigned* counters, float* partials, long long n, long long unit,
                                                   long long units, int rank, int cluster, ColOf col_of, Store store) {
  constexpr int ROWS = THREADS / GROUP;
  const bool owner = ROWS == 1 || (int)threadIdx.x < GROUP;  // group 0 holds the block's sums
  if constexpr (ROWS > 1) {
    const int grp = (int)threadIdx.x / GROUP, lane = (int)threadIdx.x % GROUP;
    for (int g = ROWS - 1; g > 0; --g) {
      if (grp == g) {
#pragma unroll
        for (int k = 0; k < C; ++k)
#pragma unroll
          for (int it = 0; it < ITEMS; ++it)
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
              float& b = buf[((k * ITEMS + it) * GROUP + lane) * VEC + j];
              b = g == ROWS - 1 ? cs[k][it][j] : cs[k][it][j] + b;
            }
      }
      __syncthreads();
    }
    if (grp == 0) {
#pragma unroll
      for (int k = 0; k < C; ++k)
#pragma unroll
        for (int it = 0; it < ITEMS; ++it)
#pragma unroll
          for (int j = 0; j < VEC; ++j) cs[k][it][j] += buf[((k * ITEMS + it) * GROUP + lane) * VEC + j];
    }
  }
  auto publish = [&](long long idx, long long span) {
    if (!owner) return;
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const long long col = col_of(it);
      if (col < 0) continue;
#pragma unroll
      for (int k = 0; k < C; ++k) ef_col_partial_store_vec<VEC>(partials + (k * units + idx * span) * n + col, cs[k][it]);
    }
  };
  auto combine = [&](long long q, int expect, long long idx, long long span) {
    if (!owner) return;
    // Children in order; the loads of one child (C x ITEMS vectors) and of
    // the next few are independent, so they are in flight together.
    float t[C][ITEMS][VEC] = {};
#pragma unroll 4
    for (int ch = 0; ch < expect; ++ch) {
      const long long child = q * F + ch;
#pragma unroll
      for (int it = 0; it < ITEMS; ++it) {
        const long long col = col_of(it);
        if (col < 0) continue;
#pragma unroll
        for (int k = 0; k < C; ++k) {
          float v[VEC];
          if (child == idx) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[j] = cs[k][it][j];
          } else {
            ef_col_partial_load_vec<VEC>(partials + (k * units + child * span) * n + col, v);
          }
#pragma unroll
          for (int j = 0; j < VEC; ++j) t[k][it][j] = ch == 0 ? v[j] : t[k][it][j] + v[j];
        }
      }
    }
#pragma unroll
    for (int k = 0; k < C; ++k)
#pragma unroll
      for (int it = 0; it < ITEMS; ++it)
#pragma unroll
        for (int j = 0; j < VEC; ++j) cs[k][it][j] = t[k][it][j];
  };
  if (!ef_col_tree_climb<F>(flag, counters, unit, units, rank, cluster, publish, combine) || !owner) return;
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    const long long col = col_of(it);
    if (col < 0) continue;
#pragma unroll
    for (int k = 0; k < C; ++k) store(k, col, cs[k][it]);
  }
}
