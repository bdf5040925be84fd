// Tensor-core building blocks for the mma.sync GEMM mainloop (sm_80+):
// cp.async copies into shared memory, the XOR swizzle that keeps ldmatrix free
// of bank conflicts, ldmatrix, and mma.sync.m16n8k16 with fp32 accumulation.
// See docs/gemm.md for the fragment layouts these produce.
#pragma once
#include "common/tf32.cuh"
#include "common/vector_io.cuh"  // ef_store4

// ---- global -> shared ----

/// The shared-state-space address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned ef_smem_addr(const void* p) {
  unsigned s;
  asm("{\n\t.reg .u64 t;\n\tcvta.to.shared.u64 t, %1;\n\tcvt.u32.u64 %0, t;\n\t}" : "=r"(s) : "l"(p));
  return s;
}

/// 16 bytes from global to shared; when `valid` is false the 16 bytes are
/// zero-filled (src-size 0) and nothing is read.
__device__ __forceinline__ void ef_cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = ef_smem_addr(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
/// The same with a shared-state-space address (no generic-to-shared conversion per copy).
__device__ __forceinline__ void ef_cp_async16_s(unsigned smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void ef_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void ef_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---- shared-memory layout ----

/// Shared tiles are rows of CHUNKS 16-byte chunks. ldmatrix reads one chunk
/// column of 8 consecutive rows: XOR-ing the chunk index with bits of the row
/// spreads those 8 reads over all 8 bank groups (one 128-byte line).
template <int CHUNKS>
__device__ __forceinline__ int ef_swizzle(int row, int chunk) {
  if constexpr (CHUNKS >= 8) return chunk ^ (row & 7);
  else if constexpr (CHUNKS == 4) return chunk ^ ((row >> 1) & 3);
  else if constexpr (CHUNKS == 2) return chunk ^ ((row >> 2) & 1);
  else return chunk;
}

/// Byte offset of byte `col` of row `row` in a swizzled tile of ROW_BYTES bytes per row.
template <int ROW_BYTES>
__device__ __forceinline__ int ef_swizzled_offset(int row, int col) {
  return row * ROW_BYTES + ef_swizzle<ROW_BYTES / 16>(row, col >> 4) * 16 + (col & 15);
}

// ---- fragments ----

__device__ __forceinline__ void ef_ldmatrix_x4(unsigned (&r)[4], const void* smem) {
  const unsigned s = ef_smem_addr(smem);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
__device__ __forceinline__ void ef_ldmatrix_x4_trans(unsigned (&r)[4], const void* smem) {
  const unsigned s = ef_smem_addr(smem);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

/// ldmatrix from shared-state-space addresses.
__device__ __forceinline__ void ef_ldmatrix_x4_s(unsigned (&r)[4], unsigned s) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
__device__ __forceinline__ void ef_ldmatrix_x4_trans_s(unsigned (&r)[4], unsigned s) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

/// D = A * B + D for one m16n8k16 tile; T selects f16 or bf16 operands. Not
/// volatile: a register-only op, so the compiler may schedule it between the
/// (volatile, shared-memory-reading) ldmatrix loads.
template <class T>
__device__ __forceinline__ void ef_mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (ef_is_bf16<T>::value) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// ---- split-K ----

/// Spins until *flag == value (acquire: the writes released with it are visible).
__device__ __forceinline__ void ef_wait_flag(const unsigned* flag, unsigned value) {
  unsigned v;
  do {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(flag) : "memory");
  } while (v != value);
}
/// *flag = value, after this thread's earlier writes (and, through the barrier
/// before it, its block's) are visible.
__device__ __forceinline__ void ef_release_flag(unsigned* flag, unsigned value) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(flag), "r"(value) : "memory");
}

/// One 32-bit word from a shared-state-space address.
__device__ __forceinline__ unsigned ef_lds32_s(unsigned s) {
  unsigned v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(s));
  return v;
}

/// D = A * B + D for one m16n8k8 tile of tf32 operands (fragments as m16n8k16's,
/// each register one tf32 instead of two 16-bit values).
__device__ __forceinline__ void ef_mma_1688_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- epilogue helpers ----

/// The philox4 draws of one m16n8 accumulator fragment (docs/design.md §4), one Philox
/// call per four elements although a thread holds two consecutive columns of
/// two rows: the lane pair (2j, 2j+1) covers columns 4j..4j+3 of rows g and
/// g+8; the even lane computes row g's call, the odd lane row g+8's, and each
/// hands the other the two words it needs. `i_g` is the element index of
/// (row g, first column of the four), `i_g8` of row g+8; N % 4 == 0 makes both
/// multiples of 4. d[e] is the draw of accumulator element e.
__device__ __forceinline__ void ef_mma_philox4_draws(unsigned (&d)[4], unsigned long long seed,
                                                     unsigned long long offset, unsigned stream,
                                                     unsigned long long i_g, unsigned long long i_g8) {
  const bool odd = threadIdx.x & 1;
  const ef_u32x4 w = ef_philox4_draws(seed, offset, stream, (odd ? i_g8 : i_g) >> 2);
  const unsigned send0 = odd ? w.x : w.z, send1 = odd ? w.y : w.w;
  const unsigned recv0 = __shfl_xor_sync(0xffffffffu, send0, 1);
  const unsigned recv1 = __shfl_xor_sync(0xffffffffu, send1, 1);
  d[0] = odd ? recv0 : w.x;  // row g, column 2t
  d[1] = odd ? recv1 : w.y;  // row g, column 2t + 1
  d[2] = odd ? w.z : recv0;  // row g + 8
  d[3] = odd ? w.w : recv1;
}
