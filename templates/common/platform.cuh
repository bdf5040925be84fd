// The dialect seam (docs/amd.md): the same kernel text compiles with NVRTC
// (CUDA) and hipRTC (HIP). EF_HIP selects the few forms that differ: what is
// inline PTX on NVIDIA (conversions, read-only loads, approximate math) is a
// clang builtin or plain C++ on AMD. Everything else is shared.
#pragma once

#if defined(__HIPCC_RTC__) || defined(__HIP_DEVICE_COMPILE__) || defined(__HIP__)
#define EF_HIP 1
#else
#define EF_HIP 0
#endif

// EF_WARP: the lanes that run in lock step and exchange values by shuffles
// (a warp; on AMD a wavefront: 64 on CDNA, 32 on RDNA). clang predefines the
// wavefront size for an amdgcn device compile.
#if EF_HIP
#if defined(__AMDGCN_WAVEFRONT_SIZE__)
#define EF_WARP __AMDGCN_WAVEFRONT_SIZE__
#elif defined(__AMDGCN_WAVEFRONT_SIZE)
#define EF_WARP __AMDGCN_WAVEFRONT_SIZE
#else
#define EF_WARP 64
#endif
#else
#define EF_WARP 32
#endif

// v from the lane whose index differs from this one's by the bits of `mask`
// (every lane of the warp takes part).
__device__ __forceinline__ float ef_shfl_xor(float v, int mask) {
#if EF_HIP
  return __shfl_xor(v, mask);
#else
  return __shfl_xor_sync(0xffffffffu, v, mask);
#endif
}
__device__ __forceinline__ unsigned ef_shfl_xor(unsigned v, int mask) {
#if EF_HIP
  return (unsigned)__shfl_xor((int)v, mask);
#else
  return __shfl_xor_sync(0xffffffffu, v, mask);
#endif
}

// A partial row of a column sum that another multiprocessor reads: stored
// and loaded through L2 (the row family's tree, the GEMM kernels' partials).
__device__ __forceinline__ void ef_col_partial_store(float* p, float v) {
#if EF_HIP
  *(volatile float*)p = v;
#else
  __stcg(p, v);
#endif
}
__device__ __forceinline__ float ef_col_partial_load(const float* p) {
#if EF_HIP
  return *(const volatile float*)p;
#else
  return __ldcg(p);
#endif
}

#if EF_HIP
// hipRTC's implicit runtime header has no __align__.
#ifndef __align__
#define __align__(n) __attribute__((aligned(n)))
#endif
// Round to nearest even into bf16 bits (NaN stays a quiet NaN of the same sign).
__device__ __forceinline__ unsigned short ef_bf16_bits_rn(float v) {
  const unsigned int u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ unsigned short ef_f16_bits_rn(float v) {
  return __builtin_bit_cast(unsigned short, (_Float16)v);
}
#endif
