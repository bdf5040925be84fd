// Hopper (sm_90a) building blocks for the wgmma GEMM mainloop (docs/hopper.md):
// mbarriers, TMA tile copies, wgmma shared-memory descriptors and the
// wgmma fence/commit/wait, register reallocation. Inline PTX only, so NVRTC
// needs no toolkit header.
#pragma once

/// A CUtensorMap as a kernel parameter: 128 opaque bytes, 64-byte aligned,
/// filled by the host (cuTensorMapEncodeTiled) and read by the copy engine.
struct __align__(64) ef_tensor_map {
  unsigned long long words[16];
};

// ---- mbarriers (shared-state-space addresses) ----

__device__ __forceinline__ void ef_mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
/// Makes initialised barriers visible to the copy engine (the async proxy).
__device__ __forceinline__ void ef_mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/// Orders this thread's generic-proxy accesses to shared memory before later
/// async-proxy ones (a bulk copy refilling bytes the thread wrote).
__device__ __forceinline__ void ef_fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/// Arrives once and expects `bytes` more from the copy engine in this phase.
__device__ __forceinline__ void ef_mbar_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void ef_mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/// Waits until the phase of parity `parity` has completed. The suspend-time
/// hint (10 ms, far above any wait here) lets the hardware park the thread
/// until the phase completes instead of returning to spin: measured neutral on
/// time at 4096^3 (docs/perf/gemm.md), fewer instructions issued.
__device__ __forceinline__ void ef_mbar_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n\t.reg .pred done;\n"
      "EF_WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, 10000000;\n\t"
      "@!done bra EF_WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// ---- TMA ----

/// Copies the box at (c0 inner, c1 outer) elements of `map`'s tensor into
/// shared memory at `smem`, completing `bytes` of transaction on `bar`; the
/// parts of the box past the tensor's edges are zero-filled.
__device__ __forceinline__ void ef_tma_load_2d(unsigned smem, const ef_tensor_map* map, unsigned bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          smem),
      "l"(map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

/// ef_tma_load_2d of a 3-D map's box at (c0, c1) in its plane c2: a batched
/// GEMM's operand, the batch outermost (Note [Batched GEMM]).
__device__ __forceinline__ void ef_tma_load_3d(unsigned smem, const ef_tensor_map* map, unsigned bar, int c0, int c1,
                                               int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(
          smem),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

/// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from
/// global memory to shared memory at `smem`, completing them on `bar`.
__device__ __forceinline__ void ef_bulk_load(unsigned smem, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(smem),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// ---- wgmma ----

/// A wgmma shared-memory matrix descriptor with the 128-byte swizzle: start
/// address, leading and stride byte offsets (each >> 4), layout type 1 (bits
/// 62-63). docs/hopper.md gives the offsets for K-major and MN-major tiles.
__device__ __forceinline__ unsigned long long ef_wgmma_desc(unsigned addr, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((lbo & 0x3FFFF) >> 4) << 16) |
         ((unsigned long long)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void ef_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void ef_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void ef_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/// Keeps the compiler from moving a register's reads or writes across this
/// point (accumulators of in-flight wgmma ops).
__device__ __forceinline__ void ef_fence_register(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// ---- register reallocation (needs __launch_bounds__(threads, 1)) ----

template <int N>
__device__ __forceinline__ void ef_setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void ef_setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// ---- thread-block clusters ----

__device__ __forceinline__ unsigned ef_cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
/// Every thread of every block of the cluster: writes before are visible to
/// reads after, in all the cluster's blocks.
__device__ __forceinline__ void ef_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
/// Arrives on the mbarrier at shared address `bar` of the cluster's block
/// `rank`. CTA scope: what it orders is the wgmma reads of the stage, not
/// memory the peer reads, and a cluster-scope release fences every arrival
/// (measured: membar stalls made a cluster-of-2 kernel 2x slower).
__device__ __forceinline__ void ef_mbar_arrive_cluster(unsigned bar, unsigned rank) {
  asm volatile(
      "{\n\t.reg .b32 remote;\n\tmapa.shared::cluster.u32 remote, %0, %1;\n\t"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}
/// ef_tma_load_2d into the same shared offset of every block in `mask`, each
/// block's mbarrier at `bar` completing the bytes it receives.
__device__ __forceinline__ void ef_tma_load_2d_multicast(unsigned smem, const ef_tensor_map* map, unsigned bar, int c0,
                                                         int c1, unsigned short mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, "
      "%4}], [%2], %5;\n" ::"r"(smem),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}
/// ef_tma_load_2d_multicast of a 3-D map's box in plane c2 (ef_tma_load_3d).
__device__ __forceinline__ void ef_tma_load_3d_multicast(unsigned smem, const ef_tensor_map* map, unsigned bar, int c0,
                                                         int c1, int c2, unsigned short mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, "
      "%4, %5}], [%2], %6;\n" ::"r"(smem),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "h"(mask)
      : "memory");
}
/// Named barrier `id` (1..15; 0 is __syncthreads') over `threads` threads, a
/// multiple of 32: the consumer warps of one tile meet without the producer
/// (Note [GEMM column sums]).
__device__ __forceinline__ void ef_named_barrier_sync(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- epilogue inputs loaded ahead (Note [Prefetched epilogue inputs], templates/gemm_sm90.cu.in) ----

/// A 16-bit storage value (ef_half, ef_bf16) from its bits, half `hi` of a 32-bit word.
template <class E>
__device__ __forceinline__ float ef_word_half(unsigned w, int hi) {
  E x;
  x.bits = (unsigned short)(hi ? w >> 16 : w);
  return ef_to_float(x);
}
/// A warp's 16 rows x 64 columns of a 16-bit [M,N] tensor from (row0, col0),
/// its rows `ld` elements apart (N, or a strided tensor's ld: Note [Strided
/// epilogue tensors]): lane `lane` holds rows 4i + lane/8 (i < 4), columns
/// 8 (lane % 8) .. +7, as four 16-byte vectors. Rows past M read row M - 1 and
/// columns past N column N - 1 (their results are never stored). `vec`
/// (warp-uniform: ld % 8 == 0 and the tensor 16-byte aligned) takes one load a
/// vector, else eight 2-byte ones.
__device__ __forceinline__ void ef_prefetch_rows16(unsigned (&v)[4][4], const unsigned short* t, long long row0,
                                                   long long col0, long long m, long long n, long long ld, bool vec,
                                                   int lane) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    long long row = row0 + 4 * i + (lane >> 3);
    row = row < m ? row : m - 1;
    const long long col = col0 + (lane & 7) * 8;
    if (vec && col + 7 < n) {
      asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
          : "=r"(v[i][0]), "=r"(v[i][1]), "=r"(v[i][2]), "=r"(v[i][3])
          : "l"(t + row * ld + col));
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        unsigned short lo, hi;
        const long long c0 = col + 2 * j < n ? col + 2 * j : n - 1, c1 = col + 2 * j + 1 < n ? col + 2 * j + 1 : n - 1;
        asm("ld.global.nc.u16 %0, [%1];" : "=h"(lo) : "l"(t + row * ld + c0));
        asm("ld.global.nc.u16 %0, [%1];" : "=h"(hi) : "l"(t + row * ld + c1));
        v[i][j] = (unsigned)lo | (unsigned)hi << 16;
      }
    }
  }
}
/// A dense tensor's: rows N apart.
__device__ __forceinline__ void ef_prefetch_rows16(unsigned (&v)[4][4], const unsigned short* t, long long row0,
                                                   long long col0, long long m, long long n, bool vec, int lane) {
  ef_prefetch_rows16(v, t, row0, col0, m, n, n, vec, lane);
}
/// ef_prefetch_rows16's vectors, through a warp's staging area `st` (rows of
/// SROW 16-bit slots), into the accumulator fragment layout: f[c][h] holds
/// columns 8c + 2 (lane % 4) + {0, 1} of row lane/4 + 8h. The staging area is
/// free before and after (a __syncwarp each side of the reads).
template <int SROW>
__device__ __forceinline__ void ef_rows16_to_fragments(unsigned (&f)[8][2], const unsigned (&v)[4][4],
                                                       unsigned short* st, int lane) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
    *reinterpret_cast<uint4*>(st + (4 * i + (lane >> 3)) * SROW + (lane & 7) * 8) = make_uint4(v[i][0], v[i][1], v[i][2], v[i][3]);
  __syncwarp();
#pragma unroll
  for (int c = 0; c < 8; ++c)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      f[c][h] = *reinterpret_cast<const unsigned*>(st + ((lane >> 2) + 8 * h) * SROW + 8 * c + (lane & 3) * 2);
  __syncwarp();
}
/// A lane's four quads of a warp's 16 rows x 32 columns of an [M,N] tensor
/// with W-word quads (W = 2: 16-bit, 4: f32), the staged epilogue's walk:
/// quad i at row 4i + lane/8, columns 4 (lane % 8) .. +3, rows `ld` elements
/// apart. Clamped as ef_prefetch_rows16; `vec` (ld % 4 == 0, the tensor
/// aligned to a quad) takes one load a quad.
template <int W>
__device__ __forceinline__ void ef_prefetch_quads(unsigned (&v)[4][W], const void* t, long long row0, long long col0,
                                                  long long m, long long n, long long ld, bool vec, int lane) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    long long row = row0 + 4 * i + (lane >> 3);
    row = row < m ? row : m - 1;
    const long long col = col0 + (lane & 7) * 4;
    if (vec && col + 3 < n) {
      if constexpr (W == 2)
        asm("ld.global.nc.v2.u32 {%0, %1}, [%2];"
            : "=r"(v[i][0]), "=r"(v[i][1])
            : "l"(static_cast<const unsigned short*>(t) + row * ld + col));
      else
        asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(v[i][0]), "=r"(v[i][1]), "=r"(v[i][2]), "=r"(v[i][3])
            : "l"(static_cast<const float*>(t) + row * ld + col));
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const long long c = col + e < n ? col + e : n - 1;
        if constexpr (W == 2) {
          unsigned short h;
          asm("ld.global.nc.u16 %0, [%1];" : "=h"(h) : "l"(static_cast<const unsigned short*>(t) + row * ld + c));
          v[i][e / 2] = e % 2 ? (v[i][e / 2] & 0xffffu) | (unsigned)h << 16 : (unsigned)h;
        } else {
          asm("ld.global.nc.u32 %0, [%1];" : "=r"(v[i][e]) : "l"(static_cast<const float*>(t) + row * ld + c));
        }
      }
    }
  }
}
/// A dense tensor's: rows N apart.
template <int W>
__device__ __forceinline__ void ef_prefetch_quads(unsigned (&v)[4][W], const void* t, long long row0, long long col0,
                                                  long long m, long long n, bool vec, int lane) {
  ef_prefetch_quads<W>(v, t, row0, col0, m, n, n, vec, lane);
}
