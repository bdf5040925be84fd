// epifuse GEMM kernel (mma.sync, sm_80+): gemm f16:row x f16:row -> add -> relu -> dropout | out f16
// Generated from templates/gemm_mma.cu.in (docs/gemm.md). One block computes a
// BM x BN tile of C = A * B with WARPS_M x WARPS_N warps, each a WTM x WTN
// warp tile of m16n8k16 tensor-core ops with fp32 accumulators. K is walked in
// BK steps through a STAGES-deep ring of swizzled shared-memory tiles filled by
// cp.async; fragments come from ldmatrix. The fused epilogue then runs on the
// accumulator registers and each output element is stored once. A dual GEMM
// (DUAL) multiplies each A tile by two B tiles (B0 = p.b, B1 = p.b1) into two
// accumulators, acc and acc1 (docs/dual-gemm.md).
#include "common/numeric.cuh"
#include "common/activations.cuh"
#include "common/philox.cuh"
#include "common/mma.cuh"

typedef ef_half T;
// Operands are moved as raw bits: E is T's storage (16-bit halves, or the
// 32-bit words of f32 operands that the tensor cores read as tf32).
typedef unsigned short E;
constexpr int ES = sizeof(E), CE = 16 / ES;  // bytes per element, elements per 16-byte chunk
constexpr bool TF32 = ES == 4;                // m16n8k8 tf32 mma, else m16n8k16
constexpr int KMMA = TF32 ? 8 : 16;           // K of one mma: 32 bytes of K either way

struct ef_e2a1a33ae96514f0_params {
  const ef_half* a;
  const ef_half* b;
  const ef_half* in0;
  ef_half* out0;
  long long m;
  long long n;
  long long k;
  long long batch;
  long long batch_stride_a;
  long long batch_stride_b;
  unsigned long long seed;
  unsigned long long offset;
  const unsigned long long* rng_state;
};

// The fused epilogue of one element: straight-line SSA from the op table.
__device__ __forceinline__ void ef_e2a1a33ae96514f0_epilogue(const ef_e2a1a33ae96514f0_params& p, float v0, float v1, unsigned d0, float& o0) {
  const float v2 = v0 + v1;
  const float v3 = ef_relu(v2);
  const float v4 = v3 * ef_dropout_factor(d0, 429496832u, 1.1111112f);
  o0 = v4;
}

constexpr int BM = 64, BN = 64, BK = 32, STAGES = 4, SPLIT_K = 1;
constexpr bool DUAL = false;
constexpr int WARPS_M = 2, WARPS_N = 4, THREADS = WARPS_M * WARPS_N * 32;
constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N, MI = WTM / 16, NI = WTN / 8;
constexpr bool A_KMAJOR = true;  // A row-major: tile [BM][BK]; else [BK][BM]
constexpr bool B_KMAJOR = false;  // B col-major: tile [BN][BK]; else [BK][BN]
constexpr int A_COLS = A_KMAJOR ? BK : BM, A_ROWS = A_KMAJOR ? BM : BK;
constexpr int B_COLS = B_KMAJOR ? BK : BN, B_ROWS = B_KMAJOR ? BN : BK;
// A stage: the A tile, the B tile, and a dual GEMM's B1 tile after it.
constexpr int A_BYTES = BM * BK * ES, B_BYTES = BN * BK * ES, STAGE_BYTES = A_BYTES + (DUAL ? 2 : 1) * B_BYTES;
static_assert(NI % 2 == 0 && MI >= 1 && BK % 16 == 0, "tile shape");

/// Byte offset of element (row, col) in a swizzled shared tile of COLS elements per row.
template <int COLS>
__device__ __forceinline__ int tile_offset(int row, int col) {
  return ef_swizzled_offset<COLS * ES>(row, col * ES);
}

// Loads of one operand's tiles, ROWS x COLS 16-bit elements with COLS
// contiguous in global memory and in shared memory. Every address a thread
// needs is worked out once (Note: recomputing them per k step cost ~5
// instructions per mma, docs/perf/gemm.md); a k step only moves the pointers.
// `vec`: 16-byte cp.async with zero fill past the edges (pointer 16-byte
// aligned, ld and the edges multiples of 8); else element loads with bounds
// checks (any alignment; the general kernel).
template <int ROWS, int COLS, bool KMAJOR>
struct TileLoader {
  static constexpr int CHUNKS = ROWS * COLS / CE, PER_THREAD = (CHUNKS + THREADS - 1) / THREADS;
  // Rows one pass of THREADS chunks covers. When a pass is whole rows, chunk i
  // of a thread sits i passes below chunk 0: its pointer and k are chunk 0's
  // plus a constant, and so is its shared offset when a pass is a multiple of
  // the swizzle's 8-row period (else it is worked out from chunk 0's row).
  // Only chunk 0's are kept: registers are what bounds a 64x64 warp tile
  // (docs/perf/gemm.md).
  static constexpr int PASS_ROWS = THREADS / (COLS / CE);
  static constexpr bool REGULAR = THREADS % (COLS / CE) == 0 && CHUNKS % THREADS == 0;
  static constexpr bool SAME_SWIZZLE = PASS_ROWS % 8 == 0;
  static constexpr int KEPT = REGULAR ? 1 : PER_THREAD;
  static_assert(PER_THREAD <= 32, "fixed_ok holds one bit per chunk");
  const E* ptr[KEPT];  // this thread's chunks at the current k step
  int smem_off[KEPT];
  int kpos[KEPT];                   // the chunk's k within the tile
  unsigned fixed_ok;                // bit i: chunk i is inside the operand along M (or N)
  bool all_in;                      // every chunk is (the tiles inside the matrix: nearly all)
  long long ld, k_step, pass_step, cols_left_fixed, rows_left_fixed;

  // g: the tile's origin at k = 0; ld: elements between rows; rows_left and
  // cols_left: how far the operand extends from the origin (K included).
  __device__ __forceinline__ TileLoader(const T* g, long long ld_, long long rows_left, long long cols_left) : ld(ld_) {
    const E* gs = reinterpret_cast<const E*>(g);
    k_step = KMAJOR ? BK : BK * ld;
    pass_step = PASS_ROWS * ld;
    rows_left_fixed = rows_left;
    cols_left_fixed = cols_left;
    fixed_ok = 0;
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
      const int chunk = threadIdx.x + i * THREADS;
      const int r = chunk / (COLS / CE), c = (chunk % (COLS / CE)) * CE;
      if (i < KEPT) {
        ptr[i] = gs + r * ld + c;
        smem_off[i] = tile_offset<COLS>(r, c);
        kpos[i] = KMAJOR ? c : r;
      }
      const bool ok = (CHUNKS % THREADS == 0 || chunk < CHUNKS) && (KMAJOR ? r < rows_left : c < cols_left);
      fixed_ok |= (ok ? 1u : 0u) << i;
    }
    all_in = fixed_ok == (PER_THREAD == 32 ? 0xffffffffu : (1u << PER_THREAD) - 1u);
  }

  __device__ __forceinline__ const E* chunk_ptr(int i) const {
    return REGULAR ? ptr[0] + i * pass_step : ptr[i];
  }
  __device__ __forceinline__ int chunk_smem(int i) const {
    if (!REGULAR) return smem_off[i];
    if (SAME_SWIZZLE) return smem_off[0] + i * PASS_ROWS * COLS * ES;
    const int chunk = threadIdx.x + i * THREADS;
    return tile_offset<COLS>(chunk / (COLS / CE), (chunk % (COLS / CE)) * CE);
  }
  __device__ __forceinline__ int chunk_k(int i) const { return REGULAR ? kpos[0] + (KMAJOR ? 0 : i * PASS_ROWS) : kpos[i]; }
  __device__ __forceinline__ bool chunk_ok(int i) const { return (fixed_ok >> i) & 1u; }

  // The tile at k0 (k_left = K - k0) into `tile` (generic) / `stile` (shared
  // address). A tile wholly inside K (k_left >= BK, all but the last) checks
  // only the M/N edge.
  __device__ __forceinline__ void load(char* tile, unsigned stile, long long k_left, bool vec) const {
    if (vec && all_in && k_left >= BK) {  // the steady state: no bounds, no selects (docs/perf/gemm.md)
#pragma unroll
      for (int i = 0; i < PER_THREAD; ++i) {
        if (CHUNKS % THREADS != 0 && threadIdx.x + i * THREADS >= CHUNKS) break;
        ef_cp_async16_s(stile + chunk_smem(i), chunk_ptr(i), true);
      }
      return;
    }
    if (vec && k_left >= BK) {
#pragma unroll
      for (int i = 0; i < PER_THREAD; ++i) {
        if (CHUNKS % THREADS != 0 && threadIdx.x + i * THREADS >= CHUNKS) break;
        ef_cp_async16_s(stile + chunk_smem(i), chunk_ok(i) ? (const void*)chunk_ptr(i) : (const void*)ptr[0],
                        chunk_ok(i));
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
      if (CHUNKS % THREADS != 0 && threadIdx.x + i * THREADS >= CHUNKS) break;
      if (vec) {
        const bool ok = chunk_ok(i) && chunk_k(i) < k_left;
        ef_cp_async16_s(stile + chunk_smem(i), ok ? (const void*)chunk_ptr(i) : (const void*)ptr[0], ok);
      } else {
        load_elements(tile + chunk_smem(i), i, k_left);
      }
    }
  }

  __device__ __forceinline__ void advance() {
#pragma unroll
    for (int i = 0; i < KEPT; ++i) ptr[i] += k_step;
  }

  // The general path: a chunk's CE elements, each bounds-checked along both dimensions.
  __device__ __forceinline__ void load_elements(char* dst, int i, long long k_left) const {
    E v[CE];
    const int chunk = threadIdx.x + i * THREADS;
    const int r = chunk / (COLS / CE), c = (chunk % (COLS / CE)) * CE;
    const long long rows_left = KMAJOR ? rows_left_fixed : k_left;
    const long long cols_left = KMAJOR ? k_left : cols_left_fixed;
    const E* src = chunk_ptr(i);
#pragma unroll
    for (int j = 0; j < CE; ++j) v[j] = (r < rows_left && c + j < cols_left) ? src[j] : (E)0;
    unsigned w[4];  // packed in registers (a uint4 view of v would put v on the stack)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      w[j] = ES == 4 ? (unsigned)v[j % CE] : (unsigned)v[(2 * j) % CE] | ((unsigned)v[(2 * j + 1) % CE] << 16);
    *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
  }
};

// Fragments of one k16 step of the warp tile, from the stage's shared tiles.
struct Fragments {
  unsigned a[MI][4], b[NI][2], b1[NI][2];  // b1: a dual GEMM's B1 (never touched otherwise)
};

constexpr int KSTEPS = BK / KMMA;  // mma steps per BK slice
static_assert(KSTEPS % 2 == 0, "the two fragment sets alternate within a stage");

// ldmatrix addresses: a thread's row and the XOR of its swizzle are the same
// for every fragment of the warp tile (fragment rows start at multiples of 16),
// so only the 16-byte chunk of each k step changes; worked out once. In bytes,
// a k step is 32 bytes of K for both mma shapes (k16 of 16-bit elements, k8 of
// tf32), so the K-major addressing is one code for both.
struct FragmentAddresses {
  int a_row, b_row;  // K-major tiles: byte offset of this lane's row (fragment 0)
  int a_chunk[KSTEPS], b_chunk[KSTEPS];  // K-major tiles: byte offset of its chunk per k step
  // MN-major 16-bit tiles: the XOR mixes the fragment's column into the chunk,
  // so every (fragment, step) offset is kept. (MN-major tf32 tiles have no
  // transposing ldmatrix for 32-bit elements: load_fragments reads words.)
  static constexpr bool A_TRANS = !A_KMAJOR && !TF32, B_TRANS = !B_KMAJOR && !TF32;
  int a_mn[A_TRANS ? MI : 1][A_TRANS ? KSTEPS : 1];
  int b_mn[B_TRANS ? NI / 2 : 1][B_TRANS ? KSTEPS : 1];

  __device__ __forceinline__ FragmentAddresses(int wm, int wn, int lane) {
#pragma unroll
    for (int step = 0; step < KSTEPS; ++step) {
      const int kk = step * KMMA;
      // A: (row m, k) in a [BM][BK] tile, or (row k, m) in a [BK][BM] tile (trans).
      const int ar = A_KMAJOR ? wm + (lane & 7) + ((lane >> 3) & 1) * 8 : kk + (lane & 7) + (lane >> 4) * 8;
      const int ac = A_KMAJOR ? kk + (lane >> 4) * CE : wm + ((lane >> 3) & 1) * 8;
      const int br = B_KMAJOR ? wn + (lane & 7) + (lane >> 4) * 8 : kk + (lane & 7) + ((lane >> 3) & 1) * 8;
      const int bc = B_KMAJOR ? kk + ((lane >> 3) & 1) * CE : wn + (lane >> 4) * 8;
      if (step == 0) {
        a_row = A_KMAJOR ? ar * A_COLS * ES : 0;
        b_row = B_KMAJOR ? br * B_COLS * ES : 0;
      }
      a_chunk[step] = A_KMAJOR ? tile_offset<A_COLS>(ar, ac) - ar * A_COLS * ES : 0;
      b_chunk[step] = B_KMAJOR ? tile_offset<B_COLS>(br, bc) - br * B_COLS * ES : 0;
      if constexpr (A_TRANS)
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) a_mn[mi][step] = tile_offset<A_COLS>(ar, ac + mi * 16);
      if constexpr (B_TRANS)
#pragma unroll
        for (int nj = 0; nj < NI / 2; ++nj) b_mn[nj][step] = tile_offset<B_COLS>(br, bc + nj * 16);
    }
  }
};

// One B operand's fragments (B0, or a dual GEMM's B1 from the tile after it)
// of k16 step `step`, tf32-rounded where the operands are f32.
template <int N>
__device__ __forceinline__ void load_b_fragments(unsigned (&b)[N][2], unsigned sb, const FragmentAddresses& ad,
                                                 int step, int wn, int lane) {
  const int g = lane >> 2, t = lane & 3, kk = step * KMMA;
#pragma unroll
  for (int nj = 0; nj < NI / 2; ++nj) {
    unsigned r[4];
    if (B_KMAJOR) {
      ef_ldmatrix_x4_s(r, sb + ad.b_row + nj * 16 * B_COLS * ES + ad.b_chunk[step]);
    } else if (!TF32) {
      ef_ldmatrix_x4_trans_s(r, sb + ad.b_mn[nj][step]);
    } else {  // tf32 B (k = t, n = g), (t + 4, g) of two n8 fragments from a [BK][BN] tile
      const int n = wn + nj * 16 + g;
      r[0] = ef_lds32_s(sb + tile_offset<B_COLS>(kk + t, n));
      r[1] = ef_lds32_s(sb + tile_offset<B_COLS>(kk + t + 4, n));
      r[2] = ef_lds32_s(sb + tile_offset<B_COLS>(kk + t, n + 8));
      r[3] = ef_lds32_s(sb + tile_offset<B_COLS>(kk + t + 4, n + 8));
    }
    b[2 * nj][0] = r[0];
    b[2 * nj][1] = r[1];
    b[2 * nj + 1][0] = r[2];
    b[2 * nj + 1][1] = r[3];
  }
  if constexpr (TF32) {  // round each f32 operand to tf32 (nearest, ties to even), as the reference does
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int j = 0; j < 2; ++j) b[ni][j] = ef_round_tf32_bits(b[ni][j]);
  }
}

__device__ __forceinline__ void load_fragments(Fragments& f, unsigned sa, unsigned sb, const FragmentAddresses& ad,
                                               int step, int wm, int wn, int lane) {
  const int g = lane >> 2, t = lane & 3, kk = step * KMMA;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
    if (A_KMAJOR) {
      ef_ldmatrix_x4_s(f.a[mi], sa + ad.a_row + mi * 16 * A_COLS * ES + ad.a_chunk[step]);
    } else if (!TF32) {
      ef_ldmatrix_x4_trans_s(f.a[mi], sa + ad.a_mn[mi][step]);
    } else {  // tf32 A (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4) from a [BK][BM] tile
      const int m = wm + mi * 16 + g;
      f.a[mi][0] = ef_lds32_s(sa + tile_offset<A_COLS>(kk + t, m));
      f.a[mi][1] = ef_lds32_s(sa + tile_offset<A_COLS>(kk + t, m + 8));
      f.a[mi][2] = ef_lds32_s(sa + tile_offset<A_COLS>(kk + t + 4, m));
      f.a[mi][3] = ef_lds32_s(sa + tile_offset<A_COLS>(kk + t + 4, m + 8));
    }
  }
  load_b_fragments(f.b, sb, ad, step, wn, lane);
  if constexpr (DUAL) load_b_fragments(f.b1, sb + B_BYTES, ad, step, wn, lane);
  if constexpr (TF32) {  // round each f32 operand to tf32 (nearest, ties to even), as the reference does
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int j = 0; j < 4; ++j) f.a[mi][j] = ef_round_tf32_bits(f.a[mi][j]);
  }
}

// One k step of the warp tile: MI x NI mma.sync, columns outer (each B
// fragment feeds MI products in a row: 582 against 566 TFLOP/s for rows outer
// in the register-only microbenchmark, tools/perf/mma_ceiling.cu, H100).
// A dual GEMM's acc1 takes the same A fragments with B1's.
__device__ __forceinline__ void mma_step(float (&acc)[MI][NI][4], float (&acc1)[MI][NI][4], const Fragments& c) {
#pragma unroll
  for (int ni = 0; ni < NI; ++ni)
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      if constexpr (TF32)
        ef_mma_1688_tf32(acc[mi][ni], c.a[mi], c.b[ni][0], c.b[ni][1]);
      else
        ef_mma_16816<T>(acc[mi][ni], c.a[mi], c.b[ni][0], c.b[ni][1]);
      if constexpr (DUAL && TF32)
        ef_mma_1688_tf32(acc1[mi][ni], c.a[mi], c.b1[ni][0], c.b1[ni][1]);
      else if constexpr (DUAL)
        ef_mma_16816<T>(acc1[mi][ni], c.a[mi], c.b1[ni][0], c.b1[ni][1]);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) ef_e2a1a33ae96514f0(const ef_e2a1a33ae96514f0_params p) {
  extern __shared__ __align__(128) char smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = (warp % WARPS_M) * WTM, wn = (warp / WARPS_M) * WTN;
  const ef_rng_state rng = ef_rng_read(p);  // read once (Note [Seeds on the device])
  // Grouped raster: GROUP_M row tiles share each column tile, for L2 reuse of B.
  const long long tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
  constexpr int GROUP_M = 8;
  const long long id = blockIdx.x, per_group = (long long)GROUP_M * tiles_n;
  const long long first_m = (id / per_group) * GROUP_M;
  const long long group_rows = tiles_m - first_m < GROUP_M ? tiles_m - first_m : GROUP_M;
  const long long m0 = (first_m + (id % per_group) % group_rows) * BM;
  const long long n0 = ((id % per_group) / group_rows) * BN;
  constexpr bool vec = true;  // the host checked A and B are 16-byte aligned
  // Note [Batched GEMM]: the batch; its operands and full tensors, and its first
  // dropout element (batch b's elements come after b*M*N others).
  const long long batch = (long long)blockIdx.z, batch_base = batch * p.m * p.n;
  const auto a_bat = p.a + batch * p.batch_stride_a;
  const auto b_bat = p.b + batch * p.batch_stride_b;
  const auto out0_bat = p.out0 + batch_base;

  float acc[MI][NI][4], acc1[MI][NI][4];  // acc1: a dual GEMM's (dead code otherwise)
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = acc1[mi][ni][e] = 0.0f;

  // This block's slice of K: all of it, or with split-K (blockIdx.y) the
  // split's share of the BK steps (Note [Split-K in order]).
  long long k0 = 0, k_len = p.k;
  if constexpr (SPLIT_K > 1) {
    const long long per = ((p.k + BK - 1) / BK + SPLIT_K - 1) / SPLIT_K * BK;
    k0 = blockIdx.y * per < p.k ? blockIdx.y * per : p.k;
    k_len = p.k - k0 < per ? p.k - k0 : per;
  }
  // A [M,K] row-major: rows m, K contiguous; col-major: rows k, M contiguous.
  TileLoader<A_ROWS, A_COLS, A_KMAJOR> la = A_KMAJOR ? TileLoader<A_ROWS, A_COLS, A_KMAJOR>(a_bat + m0 * p.k + k0, p.k, p.m - m0, k_len)
                                                     : TileLoader<A_ROWS, A_COLS, A_KMAJOR>(a_bat + k0 * p.m + m0, p.m, k_len, p.m - m0);
  // B [K,N] row-major: rows k, N contiguous; col-major: rows n, K contiguous.
  TileLoader<B_ROWS, B_COLS, B_KMAJOR> lb = B_KMAJOR ? TileLoader<B_ROWS, B_COLS, B_KMAJOR>(b_bat + n0 * p.k + k0, p.k, p.n - n0, k_len)
                                                     : TileLoader<B_ROWS, B_COLS, B_KMAJOR>(b_bat + k0 * p.n + n0, p.n, k_len, p.n - n0);
  // A dual GEMM's B1: B's layout and origin in the other weight matrix (a single GEMM's is never used).
  TileLoader<B_ROWS, B_COLS, B_KMAJOR> lb1 = B_KMAJOR ? TileLoader<B_ROWS, B_COLS, B_KMAJOR>(b_bat + n0 * p.k + k0, p.k, p.n - n0, k_len)
                                                      : TileLoader<B_ROWS, B_COLS, B_KMAJOR>(b_bat + k0 * p.n + n0, p.n, k_len, p.n - n0);
  const FragmentAddresses addresses(wm, wn, lane);
  const unsigned sbase = ef_smem_addr(smem);  // 32-bit shared addresses from here on
  const long long KT = (k_len + BK - 1) / BK;
  long long k_left = k_len;
  // Not unrolled: the prologue runs once, and STAGES - 1 copies of both
  // loaders' three paths were a third of the kernel's NVRTC time.
#pragma unroll 1
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < KT) {
      la.load(smem + s * STAGE_BYTES, sbase + s * STAGE_BYTES, k_left, vec);
      lb.load(smem + s * STAGE_BYTES + A_BYTES, sbase + s * STAGE_BYTES + A_BYTES, k_left, vec);
      if constexpr (DUAL) {
        lb1.load(smem + s * STAGE_BYTES + A_BYTES + B_BYTES, sbase + s * STAGE_BYTES + A_BYTES + B_BYTES, k_left, vec);
        lb1.advance();
      }
      la.advance();
      lb.advance();
      k_left -= BK;
    }
    ef_cp_async_commit();
  }
  // The epilogue's inputs, loaded under the mainloop's first loads (Note [Early loads]).
  float in0_e[NI][2];
#pragma unroll
  for (int ni = 0; ni < NI; ++ni)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const long long c = n0 + wn + ni * 8 + (lane & 3) * 2 + j;
      in0_e[ni][j] = ef_ldg_float(p.in0 + (c < p.n ? c : p.n - 1));
    }
  // Every fragment's dropout draws, while the first tiles load (Note [Early draws]).
  unsigned dd0[MI][NI][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
      const long long row_g = m0 + wm + mi * 16 + (lane >> 2);
      const long long col0 = n0 + wn + ni * 8 + (lane & 3) * 2;
      ef_mma_philox4_draws(dd0[mi][ni], rng.seed, rng.offset, 0u, (unsigned long long)(batch_base + row_g * p.n + (col0 & ~3LL)),
                           (unsigned long long)(batch_base + (row_g + 8) * p.n + (col0 & ~3LL)));
    }
  // Note [Fragments cross the barrier]: the fragments of k16 step s + 1 are
  // loaded while step s's mma ops issue, and that includes the first step of
  // the next stage: the barrier that makes stage kt + 1 visible sits between
  // the last two steps of stage kt, so the tensor cores still hold step
  // KSTEPS - 2's products while the warps wait on it (docs/perf/gemm.md).
  // Stage kt + STAGES - 1 is written into the slot stage kt - 1 was read from:
  // every warp finished reading it before that barrier of iteration kt - 1.
  ef_cp_async_wait<STAGES - 2>();
  __syncthreads();
  int read_stage = 0, write_stage = STAGES - 1;
  unsigned read_base = sbase;
  Fragments f[2];
  load_fragments(f[0], read_base, read_base + A_BYTES, addresses, 0, wm, wn, lane);
  for (long long kt = 0; kt < KT; ++kt) {
#pragma unroll
    for (int step = 0; step < KSTEPS; ++step) {
      if (step == 0) {
        if (kt + STAGES - 1 < KT) {
          la.load(smem + write_stage * STAGE_BYTES, sbase + write_stage * STAGE_BYTES, k_left, vec);
          lb.load(smem + write_stage * STAGE_BYTES + A_BYTES, sbase + write_stage * STAGE_BYTES + A_BYTES, k_left, vec);
          if constexpr (DUAL) {
            const int b1 = write_stage * STAGE_BYTES + A_BYTES + B_BYTES;
            lb1.load(smem + b1, sbase + b1, k_left, vec);
            lb1.advance();
          }
          la.advance();
          lb.advance();
          k_left -= BK;
        }
        ef_cp_async_commit();
        write_stage = write_stage + 1 == STAGES ? 0 : write_stage + 1;
      }
      if (step + 1 < KSTEPS) {
        load_fragments(f[(step + 1) & 1], read_base, read_base + A_BYTES, addresses, step + 1, wm, wn, lane);
      } else {
        ef_cp_async_wait<STAGES - 2>();
        __syncthreads();  // stage kt + 1 is visible to all
        read_stage = read_stage + 1 == STAGES ? 0 : read_stage + 1;
        read_base = sbase + read_stage * STAGE_BYTES;
        if (kt + 1 < KT) load_fragments(f[0], read_base, read_base + A_BYTES, addresses, 0, wm, wn, lane);
      }
      mma_step(acc, acc1, f[step & 1]);
    }
  }
  ef_cp_async_wait<0>();

  // Note [Split-K in order]: the splits of a tile add their partial sums in
  // split order through one fp32 BM x BN buffer, so the result does not depend
  // on which block finishes first, and only the last split runs the epilogue
  // (dropout draws once). Split s waits until the tile's flag says s; blocks
  // are dispatched in blockIdx order (split 0 of every tile first), so the
  // split it waits on is already running or done. The last split puts the
  // flag back to 0 for the next launch. (A preprocessor test: the flag and
  // partial fields exist only in a split kernel's parameters.)
#if 1 > 1
  {
    const unsigned split = blockIdx.y;
    unsigned* flag = p.tile_flags + blockIdx.x;
    float* part = p.partials + (long long)blockIdx.x * (BM * BN);
    if (threadIdx.x == 0) ef_wait_flag(flag, split);
    __syncthreads();
    if (split > 0) {
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mi][ni][e] += __ldcg(part + ((mi * NI + ni) * 4 + e) * THREADS + threadIdx.x);
    }
    if (split + 1 < SPLIT_K) {
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) __stcg(part + ((mi * NI + ni) * 4 + e) * THREADS + threadIdx.x, acc[mi][ni][e]);
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) ef_release_flag(flag, split + 1);
      return;
    }
    if (threadIdx.x == 0) *flag = 0;  // every split of this launch has read it
  }
#endif

#if 0
  // Note [Staged epilogue]: a large warp tile's accumulators go through shared
  // memory (the ring is free now), and the warp then walks its tile four
  // consecutive columns per lane in a loop unrolled only twice: each lane's
  // four elements are one Philox call (no lane-pair exchange), the stores of a
  // warp cover whole row segments, and the kernel is a fraction of the size of
  // the unrolled fragment epilogue (NVRTC 1.07 s for 128x256 with dropout).
  // Rows are padded by 4 floats: the fragment writes hit 32 distinct banks.
  // A dual GEMM stages acc1 too, in a second warp tile after the first.
  constexpr int SROW = WTN + 4;
  __syncthreads();  // every warp is done with the ring
  float* stage = reinterpret_cast<float*>(smem) + warp * ((DUAL ? 2 : 1) * WTM * SROW);
  float* stage1 = stage + WTM * SROW;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int at = (mi * 16 + (lane >> 2) + h * 8) * SROW + ni * 8 + (lane & 3) * 2;
        *reinterpret_cast<float2*>(stage + at) = make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
        if constexpr (DUAL)
          *reinterpret_cast<float2*>(stage1 + at) = make_float2(acc1[mi][ni][2 * h], acc1[mi][ni][2 * h + 1]);
      }
  __syncwarp();
#pragma unroll 2
  for (int q = lane; q < WTM * WTN / 4; q += 32) {
    const int r = q / (WTN / 4), c4 = (q % (WTN / 4)) * 4;
    const float4 quad4 = *reinterpret_cast<const float4*>(stage + r * SROW + c4);
    const float quad[4] = {quad4.x, quad4.y, quad4.z, quad4.w};
    const float4 quad14 = DUAL ? *reinterpret_cast<const float4*>(stage1 + r * SROW + c4) : quad4;
    const float quad1[4] = {quad14.x, quad14.y, quad14.z, quad14.w};  // acc1 (dual GEMM)
    const long long row = m0 + wm + r, col0 = n0 + wn + c4;
    // (not staged)
    // (not staged)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const long long col = col0 + e;
      // (not staged)
      if (!guard_elements || (row < p.m && col < p.n)) {
        const long long at = row * p.n + col;
        // (not staged)
      }
    }
    // (not staged)
  }
#else
  // Epilogue: accumulator element e of fragment (mi, ni) sits at row
  // m0 + wm + mi*16 + lane/4 + (e/2)*8, column n0 + wn + ni*8 + (lane%4)*2 + e%2.
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
      const long long row_g = m0 + wm + mi * 16 + (lane >> 2);
      const long long col0 = n0 + wn + ni * 8 + (lane & 3) * 2;
      const unsigned (&d0)[4] = dd0[mi][ni];  // computed early
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const long long row = row_g + (e >> 1) * 8, col = col0 + (e & 1);
        const float in0_v = in0_e[ni][e & 1];
        if (row < p.m && col < p.n) {
          const long long at = row * p.n + col;
          float out0_v;
          ef_e2a1a33ae96514f0_epilogue(p, acc[mi][ni][e], in0_v, d0[e], out0_v);
          out0_bat[at] = ef_from_float<ef_half>(out0_v);
        }
      }
    }
#endif
}
