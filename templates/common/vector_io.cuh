// Vector loads and stores of VEC consecutive elements of a storage type T,
// as 16-byte (or smaller, when VEC*sizeof(T) < 16) memory instructions.
// The caller guarantees the address is aligned to min(16, VEC*sizeof(T)).
#pragma once
#include "common/numeric.cuh"

template <int kBytes> struct EfChunk;
template <> struct EfChunk<16> { typedef uint4 type; };
template <> struct EfChunk<8> { typedef uint2 type; };
template <> struct EfChunk<4> { typedef unsigned int type; };
template <> struct EfChunk<2> { typedef unsigned short type; };

template <class T, int VEC>
__device__ __forceinline__ void ef_load_vec(const T* __restrict__ ptr, float (&out)[VEC]) {
  if constexpr (ef_is_bf16<T>::value && VEC % 2 == 0) {
    // bf16 pairs from 32-bit words: the low element is the word shifted up,
    // the high one the word with its low half cleared: one instruction each.
    constexpr int kBytes = VEC * 2 >= 16 ? 16 : VEC * 2;
    typedef typename EfChunk<kBytes>::type Chunk;
#pragma unroll
    for (int c = 0; c < VEC * 2 / kBytes; ++c) {
      const Chunk raw = reinterpret_cast<const Chunk*>(ptr)[c];
      const unsigned int* words = reinterpret_cast<const unsigned int*>(&raw);
#pragma unroll
      for (int w = 0; w < kBytes / 4; ++w) {
        out[c * kBytes / 2 + 2 * w] = __uint_as_float(words[w] << 16);
        out[c * kBytes / 2 + 2 * w + 1] = __uint_as_float(words[w] & 0xFFFF0000u);
      }
    }
  } else {
    constexpr int kBytes = VEC * (int)sizeof(T) >= 16 ? 16 : VEC * (int)sizeof(T);
    constexpr int kPer = kBytes / (int)sizeof(T);
    typedef typename EfChunk<kBytes>::type Chunk;
#pragma unroll
    for (int c = 0; c < VEC / kPer; ++c) {
      const Chunk raw = reinterpret_cast<const Chunk*>(ptr)[c];
      const T* elems = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < kPer; ++j) out[c * kPer + j] = ef_to_float(elems[j]);
    }
  }
}

// Two fp32 values rounded (nearest even) into one 32-bit word of 16-bit
// storage with a single cvt.rn.{bf16,f16}x2.f32; `lo` is the element at the
// lower address.
__device__ __forceinline__ unsigned int ef_pack2(ef_bf16*, float lo, float hi) {
#if EF_HIP
  return (unsigned int)ef_bf16_bits_rn(lo) | ((unsigned int)ef_bf16_bits_rn(hi) << 16);
#else
  unsigned int r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#endif
}
__device__ __forceinline__ unsigned int ef_pack2(ef_half*, float lo, float hi) {
#if EF_HIP
  return (unsigned int)ef_f16_bits_rn(lo) | ((unsigned int)ef_f16_bits_rn(hi) << 16);
#else
  unsigned int r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#endif
}

template <class T, int VEC>
__device__ __forceinline__ void ef_store_vec(T* __restrict__ ptr, const float (&in)[VEC]) {
  constexpr int kBytes = VEC * (int)sizeof(T) >= 16 ? 16 : VEC * (int)sizeof(T);
  constexpr int kPer = kBytes / (int)sizeof(T);
  typedef typename EfChunk<kBytes>::type Chunk;
#pragma unroll
  for (int c = 0; c < VEC / kPer; ++c) {
    Chunk raw;
    if constexpr (sizeof(T) == 2 && kPer % 2 == 0) {
      unsigned int* words = reinterpret_cast<unsigned int*>(&raw);
#pragma unroll
      for (int j = 0; j < kPer; j += 2)
        words[j / 2] = ef_pack2((T*)nullptr, in[c * kPer + j], in[c * kPer + j + 1]);
    } else {
      T* elems = reinterpret_cast<T*>(&raw);
#pragma unroll
      for (int j = 0; j < kPer; ++j) elems[j] = ef_from_float<T>(in[c * kPer + j]);
    }
    reinterpret_cast<Chunk*>(ptr)[c] = raw;
  }
}

// W fp32 values at `p` (aligned to 4 * W bytes; W = 1, 2 or 4) to or from
// v[0..W): the row family's values kept in a ring's bytes.
template <int W>
__device__ __forceinline__ void ef_load_floats(const unsigned char* p, float* v) {
  typedef typename EfChunk<4 * W>::type Chunk;
  const Chunk raw = *reinterpret_cast<const Chunk*>(p);
  const unsigned int* words = reinterpret_cast<const unsigned int*>(&raw);
#pragma unroll
  for (int j = 0; j < W; ++j) v[j] = __uint_as_float(words[j]);
}
template <int W>
__device__ __forceinline__ void ef_store_floats(unsigned char* p, const float* v) {
  typedef typename EfChunk<4 * W>::type Chunk;
  Chunk raw;
  unsigned int* words = reinterpret_cast<unsigned int*>(&raw);
#pragma unroll
  for (int j = 0; j < W; ++j) words[j] = __float_as_uint(v[j]);
  *reinterpret_cast<Chunk*>(p) = raw;
}

// Row and column of each of VEC consecutive elements starting at (r0, c0) of
// an [M,N] tensor; a vector may wrap rows (when N % VEC != 0, or N < VEC).
template <int VEC, class I>
__device__ __forceinline__ void ef_element_coords(I r0, I c0, I n, I (&row)[VEC], I (&col)[VEC]) {
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    row[j] = r0;
    col[j] = c0;
    if (++c0 == n) {
      c0 = 0;
      ++r0;
    }
  }
}

/// Four consecutive outputs in one store: 16 bytes of f32, or 8 of 16-bit
/// values (the pointer aligned to that, as the launch checked).
__device__ __forceinline__ void ef_store4(float* p, const float (&v)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
template <class S>
__device__ __forceinline__ void ef_store4(S* p, const float (&v)[4]) {
  static_assert(sizeof(S) == 2, "16-bit storage");
  const unsigned lo = ef_from_float<S>(v[0]).bits | ((unsigned)ef_from_float<S>(v[1]).bits << 16);
  const unsigned hi = ef_from_float<S>(v[2]).bits | ((unsigned)ef_from_float<S>(v[3]).bits << 16);
  *reinterpret_cast<uint2*>(p) = make_uint2(lo, hi);
}

#if !EF_HIP && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// Staged loads (Note [Staged column loads] in
// src/codegen/elementwise/elementwise.hpp): a thread copies 16 bytes of its
// own into shared memory with cp.async and reads them back itself after the
// wait, so the bytes in flight hold no registers and need no block barrier.
// The "memory" clobbers keep the compiler from moving the thread's shared
// reads of a slot across the copy that refills it.
__device__ __forceinline__ void ef_stage16(void* smem, const void* gmem) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void ef_stage_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void ef_stage_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif
