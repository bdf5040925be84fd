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
