// epifuse elementwise kernel: add -> scale | out f32
// Generated from templates/elementwise.cu.in. Each thread handles VEC
// consecutive elements per step of a grid-stride loop: 16-byte loads and
// stores where every full tensor is aligned, 64-bit indexing where needed,
// one Philox call per 4 elements. A general kernel also has a scalar path for
// a ragged tail and misaligned pointers, chosen by a uniform branch on
// a flag the host sets (one kernel compiles in two thirds of the time of two); a
// vector-only kernel leaves it out (20% less NVRTC time, docs/perf/host.md).
#include "common/numeric.cuh"
#include "common/vector_io.cuh"
#include "common/activations.cuh"
#include "common/philox.cuh"

struct ef_acea25a6a8e86d35_params {
  const float* in0;
  const float* in1;
  float* out0;
  long long m;
  long long n;
  double n_inv;
  unsigned long long seed;
  unsigned long long offset;
  float alpha0;
  int vectorized;
};

// The fused epilogue of one element: straight-line SSA from the op table.
__device__ __forceinline__ void ef_acea25a6a8e86d35_epilogue(const ef_acea25a6a8e86d35_params& p, float v0, float v1, float& o0) {
  const float v2 = v0 + v1;
  const float v3 = p.alpha0 * v2;
  o0 = v3;
}

extern "C" __global__ void __launch_bounds__(256) ef_acea25a6a8e86d35(const ef_acea25a6a8e86d35_params p) {
  constexpr int VEC = 4;
  // Indices are 32-bit when M*N < 2^30 (cheaper index math), else 64-bit.
  const int total = (int)(p.m * p.n);
  const int nvec = (total + VEC - 1) / VEC;
  const int stride = (int)gridDim.x * blockDim.x;
  for (int vi = (int)blockIdx.x * blockDim.x + threadIdx.x; vi < nvec; vi += stride) {
    const int e0 = vi * VEC;
    const bool whole = p.vectorized && e0 + VEC <= total;
    // no broadcast operand: no coordinates
    float in0_v[VEC], in1_v[VEC];
    if (whole) {
      ef_load_vec<float, VEC>(p.in0 + e0, in0_v);
      ef_load_vec<float, VEC>(p.in1 + e0, in1_v);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) in0_v[j] = e0 + j < total ? ef_to_float(p.in0[e0 + j]) : 0.0f;
#pragma unroll
      for (int j = 0; j < VEC; ++j) in1_v[j] = e0 + j < total ? ef_to_float(p.in1[e0 + j]) : 0.0f;
    }
    // no dropout draws: no seed to read
    // no dropout: no draws
    float out0_v[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      ef_acea25a6a8e86d35_epilogue(p, in0_v[j], in1_v[j], out0_v[j]);
    if (whole) {
      ef_store_vec<float, VEC>(p.out0 + e0, out0_v);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        if (e0 + j < total) p.out0[e0 + j] = ef_from_float<float>(out0_v[j]);
      }
    }
  }
}
