// epifuse elementwise kernel: add -> gelu_tanh -> dropout -> add | out f16
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

struct ef_42956066b3252711_params {
  const ef_half* in0;
  const ef_half* in1;
  const ef_half* in2;
  ef_half* out0;
  long long m;
  long long n;
  double n_inv;
  unsigned long long seed;
  unsigned long long offset;
  const unsigned long long* rng_state;
  int vectorized;
};

// The fused epilogue of one element: straight-line SSA from the op table.
__device__ __forceinline__ void ef_42956066b3252711_epilogue(const ef_42956066b3252711_params& p, float v0, float v1, float v2, unsigned d0, float& o0) {
  const float v3 = v0 + v1;
  const float v4 = ef_gelu_tanh_fast(v3);
  const float v5 = v4 * (ef_triton_keep(d0, 0.25f) ? 1.3333334f : 0.0f);
  const float v6 = v5 + v2;
  o0 = v6;
}

extern "C" __global__ void __launch_bounds__(256) ef_42956066b3252711(const ef_42956066b3252711_params p) {
  constexpr int VEC = 8;
  // Indices are 32-bit when M*N < 2^30 (cheaper index math), else 64-bit.
  const int total = (int)(p.m * p.n);
  const int nvec = (total + VEC - 1) / VEC;
  const int stride = (int)gridDim.x * blockDim.x;
  for (int vi = (int)blockIdx.x * blockDim.x + threadIdx.x; vi < nvec; vi += stride) {
    const int e0 = vi * VEC;
    const bool whole = p.vectorized && e0 + VEC <= total;
    const int n = (int)p.n;
    int r0 = (int)((double)e0 * p.n_inv), c0 = e0 - r0 * n;
    if (c0 < 0) { --r0; c0 += n; } else if (c0 >= n) { ++r0; c0 -= n; }
    float in0_v[VEC], in1_v[VEC], in2_v[VEC];
    if (whole) {
      int row[VEC], col[VEC];
      ef_element_coords<VEC>(r0, c0, n, row, col);
      ef_load_vec<ef_half, VEC>(p.in0 + e0, in0_v);
#pragma unroll
      for (int j = 0; j < VEC; ++j) in1_v[j] = ef_to_float(p.in1[col[j]]);
      ef_load_vec<ef_half, VEC>(p.in2 + e0, in2_v);
    } else {
      int row[VEC], col[VEC];
      ef_element_coords<VEC>(r0, c0, n, row, col);
#pragma unroll
      for (int j = 0; j < VEC; ++j) in0_v[j] = e0 + j < total ? ef_to_float(p.in0[e0 + j]) : 0.0f;
#pragma unroll
      for (int j = 0; j < VEC; ++j) in1_v[j] = ef_to_float(p.in1[col[j]]);
#pragma unroll
      for (int j = 0; j < VEC; ++j) in2_v[j] = e0 + j < total ? ef_to_float(p.in2[e0 + j]) : 0.0f;
    }
    const ef_rng_state rng = ef_rng_read(p);  // read once (Note [Seeds on the device])
    unsigned d0[VEC];  // dropout stream 0 (triton)
#pragma unroll
    for (int j = 0; j < VEC; ++j) d0[j] = ef_triton_draw(rng.seed, rng.offset, (unsigned long long)(e0 + j));
    float out0_v[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      ef_42956066b3252711_epilogue(p, in0_v[j], in1_v[j], in2_v[j], d0[j], out0_v[j]);
    if (whole) {
      ef_store_vec<ef_half, VEC>(p.out0 + e0, out0_v);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        if (e0 + j < total) p.out0[e0 + j] = ef_from_float<ef_half>(out0_v[j]);
      }
    }
  }
}
