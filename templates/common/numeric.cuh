// Storage <-> fp32 conversion for the three storage dtypes. Every op computes
// in fp32; a value is rounded to its storage dtype once, at the store, with
// round-to-nearest-even.
//
// Note [No toolkit headers in kernels]
// cuda_fp16.h and cuda_bf16.h are large: parsing them is most of NVRTC's
// time for a small kernel. Kernels only need storage types and the two
// conversions, so those are defined here as 16-bit wrappers over one PTX
// instruction each (cvt.rn.f16.f32 and cvt.rn.bf16.f32 need sm_80+, which
// every target epifuse builds for has). Kernels then compile with no -I.
#pragma once
#include "common/platform.cuh"

struct __align__(2) ef_half { unsigned short bits; };
struct __align__(2) ef_bf16 { unsigned short bits; };

template <class T> struct ef_is_bf16 { static constexpr bool value = false; };
template <> struct ef_is_bf16<ef_bf16> { static constexpr bool value = true; };

__device__ __forceinline__ float ef_to_float(float v) { return v; }
__device__ __forceinline__ float ef_to_float(ef_half v) {
#if EF_HIP
  return (float)__builtin_bit_cast(_Float16, v.bits);
#else
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
#endif
}
// bf16 is the upper half of an fp32: widening is a shift.
__device__ __forceinline__ float ef_to_float(ef_bf16 v) {
  return __uint_as_float(((unsigned int)v.bits) << 16);
}

template <class T> __device__ __forceinline__ T ef_from_float(float v);
template <> __device__ __forceinline__ float ef_from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ ef_half ef_from_float<ef_half>(float v) {
  ef_half h;
#if EF_HIP
  h.bits = ef_f16_bits_rn(v);
#else
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));
#endif
  return h;
}
template <> __device__ __forceinline__ ef_bf16 ef_from_float<ef_bf16>(float v) {
  ef_bf16 h;
#if EF_HIP
  h.bits = ef_bf16_bits_rn(v);
#else
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));
#endif
  return h;
}

// cast op: round to T and back (the explicit rounding point of the IR).
template <class T> __device__ __forceinline__ float ef_round_to(float v) {
  return ef_to_float(ef_from_float<T>(v));
}

// Read-only loads of one element (ld.global.nc): a kernel never writes the
// tensors it reads, and saying so lets the compiler hoist the epilogue's loads
// above earlier stores, which it must not do for plain loads (the output
// pointers could alias them). Used where elements are read one by one.
#if EF_HIP
template <class T> __device__ __forceinline__ float ef_ldg_float(const T* p) { return ef_to_float(*p); }
#else
__device__ __forceinline__ float ef_ldg_float(const float* p) {
  float v;
  asm("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ float ef_ldg_float(const ef_half* p) {
  ef_half h;
  asm("ld.global.nc.u16 %0, [%1];" : "=h"(h.bits) : "l"(p));
  return ef_to_float(h);
}
__device__ __forceinline__ float ef_ldg_float(const ef_bf16* p) {
  ef_bf16 h;
  asm("ld.global.nc.u16 %0, [%1];" : "=h"(h.bits) : "l"(p));
  return ef_to_float(h);
}
#endif
