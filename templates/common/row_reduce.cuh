// Row reductions of the row family (templates/row.cu.in): the partial values
// of a row's threads combined into one value every one of them gets. A group
// of up to 32 threads: warp shuffles alone. A whole block: shuffles, one slot
// per warp in shared memory, then warp 0. A cluster of blocks: each block's
// value is stored into every block's shared memory (distributed shared
// memory, sm_90), and after a cluster barrier each block combines them in
// rank order, so that every block of the cluster gets the same bits.
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

// `scratch`: THREADS / 32 + 1 floats; `cluster_slots`: 2 * CLUSTER floats.
// Block: two barriers a call; a call right after another is safe, since a
// warp writes its slot only after every thread passed the barrier after which
// the last result was read. Cluster: one cluster barrier a call, the slots
// alternating between two halves; a block writes a peer's half only after
// the barrier that the peer reaches only after reading that half's last values.
template <int THREADS, int GROUP, int CLUSTER>
struct EfRowReducer {
  float* scratch;
  float* cluster_slots;
  unsigned phase = 0;

  // This thread's index among the row's threads, the first row unit (block or
  // cluster) this block takes, and how many units the grid has.
  __device__ __forceinline__ int lane() const {
    if constexpr (CLUSTER > 1)
      return (int)threadIdx.x + (int)ef_row_cluster_rank() * THREADS;
    else
      return (int)threadIdx.x % GROUP;
  }
  __device__ __forceinline__ long long unit() const {
    if constexpr (CLUSTER > 1)
      return ef_row_cluster_id();
    else
      return blockIdx.x;
  }
  __device__ __forceinline__ long long units() const {
    if constexpr (CLUSTER > 1)
      return ef_row_cluster_count();
    else
      return gridDim.x;
  }

  // Before a block stores into a peer's shared memory the peer must be
  // running: one cluster barrier at the start (without it, a cluster of 8
  // blocks of 128 threads faulted on the first store).
  __device__ __forceinline__ void start() const {
    if constexpr (CLUSTER > 1) asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
  }

  template <class Op>
  __device__ __forceinline__ float reduce(float v) {
    constexpr int width = GROUP < 32 ? GROUP : 32;
#pragma unroll
    for (int o = width / 2; o > 0; o >>= 1) v = Op::combine(v, __shfl_xor_sync(0xffffffffu, v, o));
    if constexpr (GROUP > 32) {
      const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
      if (lane == 0) scratch[warp] = v;
      __syncthreads();
      if (warp == 0) {
        float w = lane < THREADS / 32 ? scratch[lane] : Op::identity();
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) w = Op::combine(w, __shfl_xor_sync(0xffffffffu, w, o));
        if (lane == 0) scratch[THREADS / 32] = w;
      }
      __syncthreads();
      v = scratch[THREADS / 32];
    }
    if constexpr (CLUSTER > 1) {
      float* slots = cluster_slots + phase * CLUSTER;
      phase ^= 1u;
      if (threadIdx.x < CLUSTER) {
        const unsigned local = (unsigned)__cvta_generic_to_shared(slots + ef_row_cluster_rank());
        asm volatile(
            "{\n\t.reg .b32 remote;\n\tmapa.shared::cluster.u32 remote, %0, %1;\n\t"
            "st.shared::cluster.f32 [remote], %2;\n}\n" ::"r"(local),
            "r"((unsigned)threadIdx.x), "f"(v)
            : "memory");
      }
      asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
      v = slots[0];
#pragma unroll
      for (int r = 1; r < CLUSTER; ++r) v = Op::combine(v, slots[r]);
    }
    return v;
  }
  __device__ __forceinline__ float max(float v) { return reduce<EfMax>(v); }
  __device__ __forceinline__ float sum(float v) { return reduce<EfSum>(v); }
};
