// The matrix-instruction layer of templates/gemm_wave.cu.in (docs/amd.md):
// one struct per instruction, each giving its fragment shape (M x N x K), the
// lanes of a wave it runs on, and where accumulator element r of lane `lane`
// sits in the M x N fragment (row(lane, r), col(lane)). The epilogue reads
// only that mapping; the mainloop only calls mma().
//
// mma(acc, a, b, lane) adds A[0..M)[0..K) * B[0..K)[0..N) to acc. `a` points at
// the fragment's element (row 0, k 0) in a shared tile stored [row][k] with SK
// elements between rows; `b` at (col 0, k 0) of a tile stored [col][k]. K is
// contiguous in both, so a lane's operand registers are one vector load.
//
// NATIVE: the AMD instruction (the family asks for it only on its targets);
// otherwise the same layout is computed with FMAs from shared memory: the
// portable fallback, and how the NVIDIA GPU suite runs this code.
#pragma once
#include "common/tf32.cuh"

#if EF_HIP && (defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__))
#define EF_HAS_MFMA 1
#else
#define EF_HAS_MFMA 0
#endif
#if EF_HIP && (defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || defined(__gfx1103__))
#define EF_HAS_WMMA 1
#else
#define EF_HAS_WMMA 0
#endif

#if EF_HAS_MFMA || EF_HAS_WMMA
typedef _Float16 ef_f16x4 __attribute__((ext_vector_type(4)));
typedef _Float16 ef_f16x16 __attribute__((ext_vector_type(16)));
typedef short ef_i16x4 __attribute__((ext_vector_type(4)));
typedef short ef_i16x16 __attribute__((ext_vector_type(16)));
typedef float ef_f32x8 __attribute__((ext_vector_type(8)));
typedef float ef_f32x16 __attribute__((ext_vector_type(16)));
#endif

// The FMA form of any layout: element r of the lane is the dot product of
// its row of A and its column of B over the fragment's K, walked k by k (one
// B value, ACC A values a step; unrolled, clang-19 hoisted a whole WMMA
// fragment's 8 x 16 A values and gfx1100 spilled).
template <class Op, class T, int SK>
__device__ __forceinline__ void ef_wave_mma_fma(float (&acc)[Op::ACC], const T* a, const T* b, int lane) {
  const T* bc = b + Op::col(lane) * SK;
#pragma unroll 1
  for (int k = 0; k < Op::K; ++k) {
    const float bk = ef_to_float(bc[k]);
#pragma unroll
    for (int r = 0; r < Op::ACC; ++r) acc[r] = fmaf(ef_to_float(a[Op::row(lane, r) * SK + k]), bk, acc[r]);
  }
}

// v_mfma_f32_32x32x8{f16,bf16_1k} (CDNA2/3, wave64). Lane l holds A's row
// l % 32 and B's column l % 32 at k = 4 (l / 32) .. + 3; accumulator element
// r is row 8 (r / 4) + 4 (l / 32) + r % 4 of column l % 32.
template <class T, bool NATIVE>
struct EfMfma32 {
  static constexpr int LANES = 64, M = 32, N = 32, K = 8, ACC = 16;
  static __device__ __forceinline__ int row(int lane, int r) { return 8 * (r >> 2) + 4 * (lane >> 5) + (r & 3); }
  static __device__ __forceinline__ int col(int lane) { return lane & 31; }
  template <int SK>
  static __device__ __forceinline__ void mma(float (&acc)[ACC], const T* a, const T* b, int lane) {
#if EF_HAS_MFMA
    if constexpr (NATIVE && sizeof(T) == 2) {
      const int at = (lane & 31) * SK + 4 * (lane >> 5);
      ef_f32x16 c;
#pragma unroll
      for (int r = 0; r < ACC; ++r) c[r] = acc[r];
      if constexpr (ef_is_bf16<T>::value)
        c = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(*reinterpret_cast<const ef_i16x4*>(a + at),
                                                     *reinterpret_cast<const ef_i16x4*>(b + at), c, 0, 0, 0);
      else
        c = __builtin_amdgcn_mfma_f32_32x32x8f16(*reinterpret_cast<const ef_f16x4*>(a + at),
                                                 *reinterpret_cast<const ef_f16x4*>(b + at), c, 0, 0, 0);
#pragma unroll
      for (int r = 0; r < ACC; ++r) acc[r] = c[r];
      return;
    }
#endif
    static_assert(!NATIVE || EF_HAS_MFMA, "MFMA: gfx90a or gfx942 only (the family asks for it there)");
    ef_wave_mma_fma<EfMfma32, T, SK>(acc, a, b, lane);
  }
};

// v_wmma_f32_16x16x16_{f16,bf16} (RDNA3, wave32). Lane l holds A's row l % 16
// and B's column l % 16, all 16 k (lanes 16..31 repeat lanes 0..15);
// accumulator element r is row 2 r + l / 16 of column l % 16.
template <class T, bool NATIVE>
struct EfWmma16 {
  static constexpr int LANES = 32, M = 16, N = 16, K = 16, ACC = 8;
  static __device__ __forceinline__ int row(int lane, int r) { return 2 * r + (lane >> 4); }
  static __device__ __forceinline__ int col(int lane) { return lane & 15; }
  template <int SK>
  static __device__ __forceinline__ void mma(float (&acc)[ACC], const T* a, const T* b, int lane) {
#if EF_HAS_WMMA
    if constexpr (NATIVE && sizeof(T) == 2) {
      const int at = (lane & 15) * SK;
      ef_f32x8 c;
#pragma unroll
      for (int r = 0; r < ACC; ++r) c[r] = acc[r];
      if constexpr (ef_is_bf16<T>::value)
        c = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(*reinterpret_cast<const ef_i16x16*>(a + at),
                                                        *reinterpret_cast<const ef_i16x16*>(b + at), c);
      else
        c = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(*reinterpret_cast<const ef_f16x16*>(a + at),
                                                       *reinterpret_cast<const ef_f16x16*>(b + at), c);
#pragma unroll
      for (int r = 0; r < ACC; ++r) acc[r] = c[r];
      return;
    }
#endif
    static_assert(!NATIVE || EF_HAS_WMMA, "WMMA: gfx11 only (the family asks for it there)");
    ef_wave_mma_fma<EfWmma16, T, SK>(acc, a, b, lane);
  }
};
