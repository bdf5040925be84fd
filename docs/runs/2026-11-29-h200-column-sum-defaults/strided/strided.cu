// epifuse elementwise kernel: add -> gelu_tanh -> dropout -> add | out bf16
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

struct ef_d5a12e0f169a6767_params {
  const ef_bf16* in0;
  const ef_bf16* in1;
  const ef_bf16* in2;
  ef_bf16* out0;
  long long m;
  long long n;
  double n_inv;
  unsigned long long n_magic;
  long long ld_in0;
  long long ld_in2;
  long long ld_out0;
  unsigned long long seed;
  unsigned long long offset;
  const unsigned long long* rng_state;
};

// The fused epilogue of one element: straight-line SSA from the op table.
__device__ __forceinline__ void ef_d5a12e0f169a6767_epilogue(const ef_d5a12e0f169a6767_params& p, float v0, float v1, float v2, unsigned d0, float& o0) {
  const float v3 = v0 + v1;
  const float v4 = ef_gelu_tanh_fast(v3);
  const float v5 = v4 * ef_dropout_factor(d0, 429496832u, 1.1111112f);
  const float v6 = v5 + v2;
  o0 = v6;
}

extern "C" __global__ void __launch_bounds__(256) ef_d5a12e0f169a6767(const ef_d5a12e0f169a6767_params p) {
  constexpr int VEC = 16;
  // Indices are 32-bit when M*N < 2^30 (cheaper index math), else 64-bit.
  const int total = (int)(p.m * p.n);
  const int nvec = (total + VEC - 1) / VEC;
  const int stride = (int)gridDim.x * blockDim.x;
  for (int vi = (int)blockIdx.x * blockDim.x + threadIdx.x; vi < nvec; vi += stride) {
    const int e0 = vi * VEC;
    // vector-only: M*N % VEC == 0, and the host checked every pointer's alignment
    const int n = (int)p.n;
    const int r0 = (int)(__umulhi((unsigned)e0 << 1, (unsigned)p.n_magic) >> (unsigned)(p.n_magic >> 32)), c0 = e0 - r0 * n;
    float in0_v[VEC], in1_v[VEC], in2_v[VEC];
    {
      ef_load_vec<ef_bf16, VEC>(p.in0 + r0 * (int)p.ld_in0 + c0, in0_v);
      ef_load_vec<ef_bf16, VEC>(p.in1 + c0, in1_v);
      ef_load_vec<ef_bf16, VEC>(p.in2 + r0 * (int)p.ld_in2 + c0, in2_v);
    }
    const ef_rng_state rng = ef_rng_read(p);  // read once (Note [Seeds on the device])
    unsigned d0[VEC];  // dropout stream 0 (philox4)
#pragma unroll
    for (int j = 0; j < VEC; j += 4) {  // one Philox call, four draws
      const ef_u32x4 w = ef_philox4_draws(rng.seed, rng.offset, 0u, (unsigned long long)((unsigned)(e0 + j)) >> 2);
      d0[j] = w.x;
      d0[j + 1] = w.y;
      d0[j + 2] = w.z;
      d0[j + 3] = w.w;
    }
    float out0_v[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      ef_d5a12e0f169a6767_epilogue(p, in0_v[j], in1_v[j], in2_v[j], d0[j], out0_v[j]);
    {
      ef_store_vec<ef_bf16, VEC>(p.out0 + r0 * (int)p.ld_out0 + c0, out0_v);
    }
  }
}
