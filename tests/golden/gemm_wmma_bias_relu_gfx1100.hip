// epifuse GEMM kernel (matrix-instruction waves): gemm f16:row x f16:row -> add -> relu | out f16
// Generated from templates/gemm_wave.cu.in (docs/amd.md). The AMD mainloop,
// in dialect-neutral code: one block computes a BM x BN tile of C = A * B
// with WAVES_M x WAVES_N waves of Op::LANES lanes, each wave a WTM x WTN grid
// of the matrix instruction's fragments (common/wave_mma.cuh: MFMA on CDNA,
// WMMA on RDNA3, or their layouts computed with FMAs anywhere). K is walked in
// BK steps through two shared-memory buffers: the next tile is read into
// registers while the current one is multiplied. The epilogue is staged
// through shared memory (Note [Staged epilogue], templates/gemm_mma.cu.in), so
// it depends on the instruction only through Op::row and Op::col. A dual GEMM
// (DUAL) multiplies each A tile by two B tiles (B0 = p.b, B1 = p.b1) into acc
// and acc1 (docs/dual-gemm.md).
#include "common/numeric.cuh"
#include "common/vector_io.cuh"
#include "common/activations.cuh"
#include "common/philox.cuh"
#include "common/wave_mma.cuh"

typedef ef_half T;
typedef unsigned short E;  // T's bits: the loaders move raw 16- or 32-bit elements
typedef EfWmma16<T, true> Op;

struct ef_9fe748a9769623f8_params {
  const ef_half* a;
  const ef_half* b;
  const ef_half* in0;
  ef_half* out0;
  long long m;
  long long n;
  long long k;
  unsigned long long seed;
  unsigned long long offset;
};

// The fused epilogue of one element: straight-line SSA from the op table.
__device__ __forceinline__ void ef_9fe748a9769623f8_epilogue(const ef_9fe748a9769623f8_params& p, float v0, float v1, float& o0) {
  const float v2 = v0 + v1;
  const float v3 = ef_relu(v2);
  o0 = v3;
}

constexpr int BM = 64, BN = 64, BK = 32, GROUP_M = 8;
constexpr bool DUAL = false;
constexpr bool TF32 = false;  // f32 operands rounded to tf32 as they enter shared memory (as the reference does)
constexpr int WAVES_M = 2, WAVES_N = 2, LANES = Op::LANES, THREADS = WAVES_M * WAVES_N * LANES;
constexpr int WTM = BM / WAVES_M, WTN = BN / WAVES_N, FMI = WTM / Op::M, FNI = WTN / Op::N;
constexpr bool A_KMAJOR = true;  // A row-major: K contiguous in global memory
constexpr bool B_KMAJOR = false;  // B col-major: K contiguous in global memory
// Shared tiles are [row][k] for A and [col][k] for B, K contiguous, rows padded
// by 16 bytes; a buffer holds A, B and a dual GEMM's B1.
constexpr int CE = 16 / (int)sizeof(T);  // elements of a 16-byte chunk
constexpr int SK = BK + CE;
constexpr int A_ELEMS = BM * SK, B_ELEMS = BN * SK, BUF_ELEMS = A_ELEMS + (DUAL ? 2 : 1) * B_ELEMS;
static_assert(WTM % Op::M == 0 && WTN % Op::N == 0 && BK % Op::K == 0 && BK % CE == 0, "tile shape");

// Element j of a 16-byte chunk, and a chunk from CE elements, as bits. Shifts
// and constant word indices only: a chunk stays in registers (taking its
// address to read 16-bit pieces put the loaders' chunks in scratch on gfx90a).
__device__ __forceinline__ unsigned chunk_word(const uint4& c, int w) {
  return w == 0 ? c.x : w == 1 ? c.y : w == 2 ? c.z : c.w;
}
__device__ __forceinline__ E chunk_element(const uint4& c, int j) {
  if constexpr (sizeof(E) == 4) return chunk_word(c, j);
  return (E)(chunk_word(c, j >> 1) >> (16 * (j & 1)));
}
__device__ __forceinline__ uint4 make_chunk(const E (&e)[CE]) {
  if constexpr (sizeof(E) == 4) return make_uint4(e[0], e[1], e[2], e[3]);
  unsigned w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) w[i] = (unsigned)e[2 * i] | ((unsigned)e[2 * i + 1] << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// One operand's ROWS x BK tile (ROWS of M or N). Global element (r, k) is at
// g[r * ld + k] (KMAJOR) or g[k * ld + r]; either way a chunk of CE elements
// along the contiguous dimension starts at g + outer * ld + inner. fetch()
// reads this thread's chunks into registers, store() writes them to a shared
// tile: a 16-byte store when K is the contiguous dimension, else CE element
// stores down a column. `vec`: 16-byte global loads (shape class ld8: the
// contiguous extent is a multiple of CE; the host checked the alignment);
// else element loads. Past the edges, zeros.
template <int ROWS, bool KMAJOR>
struct WaveTileLoader {
  static constexpr int CONTIG = KMAJOR ? BK : ROWS;  // elements along the contiguous dimension
  static constexpr int CHUNKS = ROWS * BK / CE, PER_THREAD = (CHUNKS + THREADS - 1) / THREADS;
  const E* g;
  long long ld, rows_left;  // rows_left: how far the operand extends along M (or N) from the tile
  uint4 v[PER_THREAD];

  __device__ __forceinline__ void fetch(long long k_left, bool vec) {
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
      const int chunk = threadIdx.x + i * THREADS;
      if (CHUNKS % THREADS != 0 && chunk >= CHUNKS) break;
      const int outer = chunk / (CONTIG / CE), inner = chunk % (CONTIG / CE) * CE;
      const long long outer_left = KMAJOR ? rows_left : k_left, inner_left = (KMAJOR ? k_left : rows_left) - inner;
      const E* src = g + outer * ld + inner;
      if (vec) {  // the contiguous extent is a multiple of CE: a chunk is wholly inside or outside
        v[i] = outer < outer_left && inner_left > 0 ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
      } else {
        E e[CE];
#pragma unroll
        for (int j = 0; j < CE; ++j) e[j] = outer < outer_left && j < inner_left ? src[j] : (E)0;
        v[i] = make_chunk(e);
      }
    }
  }
  __device__ __forceinline__ void store(T* tile) {
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
      const int chunk = threadIdx.x + i * THREADS;
      if (CHUNKS % THREADS != 0 && chunk >= CHUNKS) break;
      const int outer = chunk / (CONTIG / CE), inner = chunk % (CONTIG / CE) * CE;
      if constexpr (TF32) {
        v[i].x = ef_round_tf32_bits(v[i].x);
        v[i].y = ef_round_tf32_bits(v[i].y);
        v[i].z = ef_round_tf32_bits(v[i].z);
        v[i].w = ef_round_tf32_bits(v[i].w);
      }
      if constexpr (KMAJOR) {
        *reinterpret_cast<uint4*>(tile + outer * SK + inner) = v[i];
      } else {
#pragma unroll
        for (int j = 0; j < CE; ++j) reinterpret_cast<E*>(tile)[(inner + j) * SK + outer] = chunk_element(v[i], j);
      }
    }
  }
  __device__ __forceinline__ void advance() { g += KMAJOR ? BK : BK * ld; }
};

// One BK step of the wave tile: FMI x FNI instructions per Op::K of K. The K
// loop is not unrolled: unrolled, clang-19 hoisted every fragment load of the
// step above the first WMMA and gfx1100 spilled (256 VGPRs and 29-220 spilled
// against 156 and none; tests/compile/test_hiprtc.cpp checks the spill count).
__device__ __forceinline__ void wave_step(float (&acc)[FMI][FNI][Op::ACC], float (&acc1)[FMI][FNI][Op::ACC],
                                          const T* buf, int wm, int wn, int lane) {
  const T* as = buf;
  const T* bs = buf + A_ELEMS;
#pragma unroll 1
  for (int kk = 0; kk < BK; kk += Op::K)
#pragma unroll
    for (int fm = 0; fm < FMI; ++fm)
#pragma unroll
      for (int fn = 0; fn < FNI; ++fn) {
        const T* a = as + (wm + fm * Op::M) * SK + kk;
        const int b = (wn + fn * Op::N) * SK + kk;
        Op::template mma<SK>(acc[fm][fn], a, bs + b, lane);
        if constexpr (DUAL) Op::template mma<SK>(acc1[fm][fn], a, bs + B_ELEMS + b, lane);
      }
}

extern "C" __global__ void __launch_bounds__(THREADS) ef_9fe748a9769623f8(const ef_9fe748a9769623f8_params p) {
  extern __shared__ __align__(16) char smem[];
  T* const bufs = reinterpret_cast<T*>(smem);
  const int lane = threadIdx.x % LANES, wave = threadIdx.x / LANES;
  const int wm = (wave % WAVES_M) * WTM, wn = (wave / WAVES_M) * WTN;
  // no dropout draws: no seed to read
  // Grouped raster: GROUP_M row tiles share each column tile, for L2 reuse of B.
  const long long tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
  const long long id = blockIdx.x, per_group = (long long)GROUP_M * tiles_n;
  const long long first_m = (id / per_group) * GROUP_M;
  const long long group_rows = tiles_m - first_m < GROUP_M ? tiles_m - first_m : GROUP_M;
  const long long m0 = (first_m + (id % per_group) % group_rows) * BM;
  const long long n0 = ((id % per_group) / group_rows) * BN;
  constexpr bool vec = true;  // the host checked A and B are 16-byte aligned

  float acc[FMI][FNI][Op::ACC], acc1[FMI][FNI][Op::ACC];  // acc1: a dual GEMM's (dead code otherwise)
#pragma unroll
  for (int fm = 0; fm < FMI; ++fm)
#pragma unroll
    for (int fn = 0; fn < FNI; ++fn)
#pragma unroll
      for (int r = 0; r < Op::ACC; ++r) acc[fm][fn][r] = acc1[fm][fn][r] = 0.0f;

  // A [M,K] row-major: element (m, k) at m * K + k; col-major: at k * M + m.
  // B [K,N] row-major: element (n, k) at k * N + n; col-major: at n * K + k.
  const E* a = reinterpret_cast<const E*>(p.a);
  const E* b = reinterpret_cast<const E*>(p.b);
  const E* b1 = reinterpret_cast<const E*>(p.b);
  WaveTileLoader<BM, A_KMAJOR> la{a + (A_KMAJOR ? m0 * p.k : m0), A_KMAJOR ? p.k : p.m, p.m - m0};
  WaveTileLoader<BN, B_KMAJOR> lb{b + (B_KMAJOR ? n0 * p.k : n0), B_KMAJOR ? p.k : p.n, p.n - n0};
  // A dual GEMM's B1: B's layout and origin in the other weight matrix (a single GEMM's is never used).
  WaveTileLoader<BN, B_KMAJOR> lb1{b1 + (B_KMAJOR ? n0 * p.k : n0), B_KMAJOR ? p.k : p.n, p.n - n0};
  const long long KT = (p.k + BK - 1) / BK;
  long long k_left = p.k;
  // Buffer kt % 2 holds tile kt. Tile kt + 1 is written into the other buffer
  // after tile kt's products, while no wave reads it any more: every wave
  // passed the barrier after its products of tile kt - 1.
  if (KT > 0) {
    la.fetch(k_left, vec);
    lb.fetch(k_left, vec);
    if constexpr (DUAL) lb1.fetch(k_left, vec);
    la.store(bufs);
    lb.store(bufs + A_ELEMS);
    if constexpr (DUAL) lb1.store(bufs + A_ELEMS + B_ELEMS);
  }
  __syncthreads();
  for (long long kt = 0; kt < KT; ++kt) {
    const bool more = kt + 1 < KT;
    if (more) {
      k_left -= BK;
      la.advance();
      lb.advance();
      la.fetch(k_left, vec);
      lb.fetch(k_left, vec);
      if constexpr (DUAL) {
        lb1.advance();
        lb1.fetch(k_left, vec);
      }
    }
    wave_step(acc, acc1, bufs + (kt & 1) * BUF_ELEMS, wm, wn, lane);
    if (more) {
      T* next = bufs + ((kt + 1) & 1) * BUF_ELEMS;
      la.store(next);
      lb.store(next + A_ELEMS);
      if constexpr (DUAL) lb1.store(next + A_ELEMS + B_ELEMS);
    }
    __syncthreads();
  }

  // Note [Staged epilogue] (templates/gemm_mma.cu.in), one fragment row at a
  // time: each wave writes its fragments of rows fm * Op::M .. + Op::M of its
  // tile to its own staging area (rows padded by 4 floats), then walks them
  // four consecutive columns per lane: a lane's four elements are one Philox
  // call, and a wave's stores cover whole row segments. A dual GEMM stages
  // acc1 beside acc. A wave may span several hardware warps (64 lanes on
  // NVIDIA), so the staging is fenced by block barriers.
  constexpr int SROW = WTN + 4;
  float* stage = reinterpret_cast<float*>(smem) + wave * ((DUAL ? 2 : 1) * Op::M * SROW);
  float* stage1 = stage + Op::M * SROW;
#pragma unroll
  for (int fm = 0; fm < FMI; ++fm) {  // unrolled: acc is indexed by constants only (registers)
#pragma unroll
    for (int fn = 0; fn < FNI; ++fn)
#pragma unroll
      for (int r = 0; r < Op::ACC; ++r) {
        const int at = Op::row(lane, r) * SROW + fn * Op::N + Op::col(lane);
        stage[at] = acc[fm][fn][r];
        if constexpr (DUAL) stage1[at] = acc1[fm][fn][r];
      }
    __syncthreads();
#pragma unroll 2
    for (int q = lane; q < Op::M * WTN / 4; q += LANES) {
      const int r = q / (WTN / 4), c4 = (q % (WTN / 4)) * 4;
      const float* s = stage + r * SROW + c4;
      const float quad[4] = {s[0], s[1], s[2], s[3]};
      const float* s1 = DUAL ? stage1 + r * SROW + c4 : s;
      const float quad1[4] = {s1[0], s1[1], s1[2], s1[3]};  // acc1 (dual GEMM)
      const long long row = m0 + wm + fm * Op::M + r, col0 = n0 + wn + c4;
    // no shared dropout draws
    constexpr bool guard_elements = false;  // the quad's store checks them (Note [Unguarded quads])
    float out0_q[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const long long col = col0 + e;
        const long long cc = col < p.n ? col : p.n - 1;
        const float in0_v = ef_ldg_float(p.in0 + cc);
        if (!guard_elements || (row < p.m && col < p.n)) {
          const long long at = row * p.n + col;
          float out0_v;
          ef_9fe748a9769623f8_epilogue(p, quad[e], in0_v, out0_v);
          out0_q[e] = out0_v;
        }
      }
    if (row < p.m && col0 + 3 < p.n) {
      ef_store4(p.out0 + row * p.n + col0, out0_q);
    } else if (row < p.m) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (col0 + e < p.n) {
          p.out0[row * p.n + col0 + e] = ef_from_float<ef_half>(out0_q[e]);
        }
    }
    }
    __syncthreads();
  }
}
