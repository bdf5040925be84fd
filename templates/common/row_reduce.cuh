// Block reductions of the row family (templates/row.cu.in): a row's partial
// values, one per thread, combined into one value every thread of the block
// gets. Warp shuffles, then one slot per warp in shared memory, then warp 0.
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

// `scratch` holds THREADS / 32 + 1 floats. Two barriers a call; a call right
// after another is safe: a warp writes its slot only after every thread passed
// the barrier after which the last result was read.
template <int THREADS, class Op>
__device__ __forceinline__ float ef_block_reduce(float v, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = Op::combine(v, __shfl_xor_sync(0xffffffffu, v, o));
  if constexpr (THREADS == 32) {
    return v;
  } else {
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
    return scratch[THREADS / 32];
  }
}

template <int THREADS>
__device__ __forceinline__ float ef_block_sum(float v, float* scratch) {
  return ef_block_reduce<THREADS, EfSum>(v, scratch);
}
template <int THREADS>
__device__ __forceinline__ float ef_block_max(float v, float* scratch) {
  return ef_block_reduce<THREADS, EfMax>(v, scratch);
}
