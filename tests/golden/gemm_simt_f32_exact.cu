// epifuse GEMM kernel (exact fp32, FFMA): gemm f32:row x f32:col -> mul -> cast | out f32 f16
// Generated from templates/gemm_simt.cu.in (docs/gemm.md, "Exact fp32"). f32
// operands are multiplied exactly as PyTorch's default fp32 matmul does: fp32
// FMA, no tf32. 256 threads as a 16 x 16 grid; each computes TM x TN outputs of
// the block's BM x BN tile in blocks of 4 rows (columns) strided by 64, from two
// shared tiles stored K-major (As[k][m], Bs[k][n], padded): the next K tile is
// loaded into registers while the current one is multiplied (the classic SGEMM
// pipeline), 16-byte loads where the operands allow them. A dual GEMM (DUAL)
// keeps a third shared tile (B1 = p.b1) and a second accumulator, acc1
// (docs/dual-gemm.md).
#include "common/numeric.cuh"
#include "common/activations.cuh"
#include "common/philox.cuh"

struct ef_03fbe65b93a877ec_params {
  const float* a;
  const float* b;
  const float* in0;
  float* out0;
  ef_half* out1;
  long long m;
  long long n;
  long long k;
  unsigned long long seed;
  unsigned long long offset;
};

// The fused epilogue of one element: straight-line SSA from the op table.
__device__ __forceinline__ void ef_03fbe65b93a877ec_epilogue(const ef_03fbe65b93a877ec_params& p, float v0, float v1, float& o0, float& o1) {
  const float v2 = v0 * v1;
  const float v3 = ef_round_to<ef_bf16>(v2);
  o0 = v3;
  o1 = v0;
}

constexpr int BM = 64, BN = 64, BK = 8, THREADS = 256;
constexpr bool DUAL = false;
constexpr int TM = BM / 16, TN = BN / 16, PAD = 4;
constexpr bool A_KMAJOR = true;  // A row-major
constexpr bool B_KMAJOR = true;  // B col-major
static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "tile shape");

// Guarded loads: zero where `valid` is false, and no memory access. One
// predicated instruction each: a C++ `valid ? load : 0` is a branch, and NVVM
// sank such branches (loads included) below the FMAs, next to their shared
// stores, so that every tile waited a whole memory latency (the first version
// of this kernel, docs/gemm.md "Exact fp32").
__device__ __forceinline__ float4 ef_simt_ldg4(const float* p, bool valid) {
  float4 v;
  asm volatile(
      "{\n\t.reg .pred g;\n\tsetp.ne.b32 g, %5, 0;\n\tmov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\tmov.b32 %2, 0;\n\t"
      "mov.b32 %3, 0;\n\t@g ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];\n\t}\n"
      : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
      : "l"(p), "r"((int)valid));
  return v;
}
// Element J of a chunk: loaded where J < limit (the chunk's elements inside
// the operand). The compare is inside the asm so that no predicate lives
// across the K loop: four loop-invariant predicates per chunk spilled.
template <int J>
__device__ __forceinline__ float ef_simt_ldg1(const float* p, int limit) {
  float v;
  asm volatile("{\n\t.reg .pred g;\n\tsetp.lt.s32 g, %2, %3;\n\tmov.b32 %0, 0;\n\t@g ld.global.nc.f32 %0, [%1];\n\t}\n"
               : "=f"(v)
               : "l"(p + J), "n"(J), "r"(limit));
  return v;
}

// One operand's share of a BK-deep tile on its way from global to shared
// memory. The operand's element (mn, k) of the tile is at tile[mn * ld + k]
// (K-major: A row-major, B col-major) or tile[k * ld + mn] (MN-major); shared
// memory holds it at S[k][mn] either way. A thread moves chunks of four
// consecutive elements of the contiguous dimension, consecutive threads
// consecutive chunks: one 16-byte load each where `vec` (that dimension a
// multiple of 4 and the operand 16-byte aligned, so a chunk is wholly in or
// out), else four element loads with their own bounds. A tile goes in PARTS
// slices of SUB_K k steps, one chunk per thread each: one chunk and one
// pointer per operand in registers, whatever BK.
template <int MN, bool KMAJOR>
struct SimtTileLoader {
  static constexpr int PARTS = (MN * BK / 4 + THREADS - 1) / THREADS, SUB_K = BK / PARTS;
  static constexpr int CHUNKS = MN * SUB_K / 4;  // per slice
  static_assert(BK % PARTS == 0 && SUB_K % 4 == 0 && CHUNKS <= THREADS, "slices");
  const float* g;  // this thread's chunk in the next slice to load
  long long step;  // elements from one slice to the next
  int mn, k;       // the chunk's first element within its slice
  int mn_in;       // rows (columns) of the tile inside the operand, at most MN
  bool active;     // the thread has a chunk (a slice may have fewer chunks than threads)
  float r[4];

  __device__ __forceinline__ SimtTileLoader(const float* base, long long mn0, long long mn_size, long long ld,
                                            int tid)
      : step(KMAJOR ? SUB_K : SUB_K * ld), mn_in(mn_size - mn0 < MN ? (int)(mn_size - mn0) : MN),
        active(CHUNKS == THREADS || tid < CHUNKS) {
    if (KMAJOR) { mn = tid / (SUB_K / 4); k = tid % (SUB_K / 4) * 4; } else { k = tid / (MN / 4); mn = tid % (MN / 4) * 4; }
    g = base + (KMAJOR ? (mn0 + mn) * ld + k : k * ld + mn0 + mn);
  }

  // Slice `part` of the tile into registers, and on to the next slice; k_in:
  // the tile's k steps inside K (at most BK; zero or less past K: zeros).
  __device__ __forceinline__ void load(int part, int k_in, bool vec) {
    if (!active) return;
    const int kk = part * SUB_K + k;
    if (vec) {
      const float4 x = ef_simt_ldg4(g, mn < mn_in && kk < k_in);
      r[0] = x.x; r[1] = x.y; r[2] = x.z; r[3] = x.w;
    } else {
      // Elements inside the operand along the chunk: K-major k_in - kk, MN-major mn_in - mn.
      const int limit = KMAJOR ? (mn < mn_in ? k_in - kk : 0) : (kk < k_in ? mn_in - mn : 0);
      r[0] = ef_simt_ldg1<0>(g, limit);
      r[1] = ef_simt_ldg1<1>(g, limit);
      r[2] = ef_simt_ldg1<2>(g, limit);
      r[3] = ef_simt_ldg1<3>(g, limit);
    }
    g += step;
  }

  __device__ __forceinline__ void store(int part, float (*s)[MN + PAD]) const {
    if (!active) return;
    const int kk = part * SUB_K + k;
    if (KMAJOR) {  // transposed: four rows of S (the padding spreads them over the banks)
#pragma unroll
      for (int j = 0; j < 4; ++j) s[kk + j][mn] = r[j];
    } else {
      *reinterpret_cast<float4*>(&s[kk][mn]) = make_float4(r[0], r[1], r[2], r[3]);
    }
  }
};

extern "C" __global__ void __launch_bounds__(THREADS, 2) ef_03fbe65b93a877ec(const ef_03fbe65b93a877ec_params p) {
  __shared__ __align__(16) float As[2][BK][BM + PAD];
  __shared__ __align__(16) float Bs[2][BK][BN + PAD];
  __shared__ __align__(16) float Bs1[DUAL ? 2 : 1][DUAL ? BK : 1][BN + PAD];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  // no dropout draws: no seed to read
  const long long tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
  constexpr int GROUP_M = 8;
  const long long id = blockIdx.x, per_group = (long long)GROUP_M * tiles_n;
  const long long first_m = (id / per_group) * GROUP_M;
  const long long group_rows = tiles_m - first_m < GROUP_M ? tiles_m - first_m : GROUP_M;
  const long long m0 = (first_m + (id % per_group) % group_rows) * BM;
  const long long n0 = ((id % per_group) / group_rows) * BN;
  constexpr bool vec = true;  // the host checked A and B are 16-byte aligned

  float acc[TM][TN], acc1[TM][TN];  // acc1: a dual GEMM's (dead code otherwise)
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = acc1[i][j] = 0.0f;

  using LoaderA = SimtTileLoader<BM, A_KMAJOR>;
  using LoaderB = SimtTileLoader<BN, B_KMAJOR>;
  LoaderA la(p.a, m0, p.m, A_KMAJOR ? p.k : p.m, tid);
  LoaderB lb(p.b, n0, p.n, B_KMAJOR ? p.k : p.n, tid);
  LoaderB lb1(p.b, n0, p.n, B_KMAJOR ? p.k : p.n, tid);
  // A thread's fragments of one k: rows ty*4 + 64h .. +3, columns tx*4 + 64h .. +3.
  float fa[2][TM], fb[2][TN], fb1[2][TN];
  auto fragments = [&](int f, int buf, int k) {
#pragma unroll
    for (int h = 0; h < TM / 4; ++h) {
      const float4 v = *reinterpret_cast<const float4*>(&As[buf][k][h * 64 + ty * 4]);
      fa[f][h * 4] = v.x; fa[f][h * 4 + 1] = v.y; fa[f][h * 4 + 2] = v.z; fa[f][h * 4 + 3] = v.w;
    }
#pragma unroll
    for (int h = 0; h < TN / 4; ++h) {
      const float4 v = *reinterpret_cast<const float4*>(&Bs[buf][k][h * 64 + tx * 4]);
      fb[f][h * 4] = v.x; fb[f][h * 4 + 1] = v.y; fb[f][h * 4 + 2] = v.z; fb[f][h * 4 + 3] = v.w;
      if constexpr (DUAL) {
        const float4 w = *reinterpret_cast<const float4*>(&Bs1[buf][k][h * 64 + tx * 4]);
        fb1[f][h * 4] = w.x; fb1[f][h * 4 + 1] = w.y; fb1[f][h * 4 + 2] = w.z; fb1[f][h * 4 + 3] = w.w;
      }
    }
  };

  // The pipeline: tile t+1 is loaded into registers under tile t's FMAs, a
  // slice at a time (the first at k step 0, the next when the previous one is
  // stored, SUB_K steps later). At the last k step a thread stores the last
  // slice to the other buffer, passes the barrier and loads the next tile's
  // first fragments before that step's FMAs (their operands are already in
  // registers), so the barrier's wait and the shared latency hide under 64
  // FMAs. One barrier per tile: the buffer written during tile t was last read
  // before tile t-1's barrier. Past K the loads are zero and touch no memory,
  // so the loop body has no branch and the global loads issue early.
  long long k_left = p.k;
  {
    const int k_in = k_left < BK ? (int)k_left : BK;
#pragma unroll
    for (int part = 0; part < LoaderA::PARTS; ++part) {
      la.load(part, k_in, vec);
      la.store(part, As[0]);
    }
#pragma unroll
    for (int part = 0; part < LoaderB::PARTS; ++part) {
      lb.load(part, k_in, vec);
      lb.store(part, Bs[0]);
      if constexpr (DUAL) {
        lb1.load(part, k_in, vec);
        lb1.store(part, Bs1[0]);
      }
    }
  }
  __syncthreads();
  fragments(0, 0, 0);
  int cur = 0;
  while (k_left > 0) {
    k_left -= BK;
    const int k_in = k_left < BK ? (int)k_left : BK;  // > -BK
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const int f = k & 1;
      if (k % LoaderA::SUB_K == 0) la.load(k / LoaderA::SUB_K, k_in, vec);
      if (k % LoaderB::SUB_K == 0) lb.load(k / LoaderB::SUB_K, k_in, vec);
      if (DUAL && k % LoaderB::SUB_K == 0) lb1.load(k / LoaderB::SUB_K, k_in, vec);
      if (k + 1 < BK) fragments(f ^ 1, cur, k + 1);
      if (k % LoaderA::SUB_K == LoaderA::SUB_K - 1) la.store(k / LoaderA::SUB_K, As[cur ^ 1]);
      if (k % LoaderB::SUB_K == LoaderB::SUB_K - 1) lb.store(k / LoaderB::SUB_K, Bs[cur ^ 1]);
      if (DUAL && k % LoaderB::SUB_K == LoaderB::SUB_K - 1) lb1.store(k / LoaderB::SUB_K, Bs1[DUAL ? cur ^ 1 : 0]);
      if (k + 1 == BK) {
        __syncthreads();
        cur ^= 1;
        fragments(f ^ 1, cur, 0);
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          acc[i][j] = fmaf(fa[f][i], fb[f][j], acc[i][j]);
          if constexpr (DUAL) acc1[i][j] = fmaf(fa[f][i], fb1[f][j], acc1[i][j]);
        }
    }
  }

  // Epilogue, one accumulator row per pass: accumulator row r (column j) sits
  // at row m0 + (r/4)*64 + ty*4 + r%4, column n0 + (j/4)*64 + tx*4 + j%4, four
  // consecutive columns per group. The loop is not unrolled (the chain is
  // compiled once, not TM times: NVRTC time), so each pass reads the front row
  // acc[0] and then moves the rows up by one (registers need constant indices).
#pragma unroll 1
  for (int r = 0; r < TM; ++r) {
    const long long row = m0 + (r / 4) * 64 + ty * 4 + (r % 4);
#pragma unroll
    for (int jg = 0; jg < TN / 4; ++jg) {
      const long long col0 = n0 + jg * 64 + tx * 4;
      // no shared dropout draws
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const long long col = col0 + e;
        const float in0_v = ef_ldg_float(p.in0);
        if (row < p.m && col < p.n) {
          const long long at = row * p.n + col;
          float out0_v, out1_v;
          ef_03fbe65b93a877ec_epilogue(p, acc[0][jg * 4 + e], in0_v, out0_v, out1_v);
          p.out0[at] = ef_from_float<float>(out0_v);
          p.out1[at] = ef_from_float<ef_half>(out1_v);
        }
      }
    }
#pragma unroll
    for (int i = 0; i + 1 < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        acc[i][j] = acc[i + 1][j];
        if constexpr (DUAL) acc1[i][j] = acc1[i + 1][j];
      }
  }
}
