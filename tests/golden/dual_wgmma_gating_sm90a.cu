// epifuse GEMM kernel (wgmma + TMA, sm_90a): dual_gemm f16:row x f16:row -> add -> sigmoid -> add -> mul | out f16
// Generated from templates/gemm_sm90.cu.in (docs/hopper.md). A persistent grid
// walks BM x BN tiles of C = A * B. Warpgroup 0 is the producer: one thread
// issues TMA copies of A and B tiles (128-byte rows of K: BK = 64 16-bit or
// 32 tf32 elements; 128-byte swizzle) into a
// STAGES-deep ring, each stage guarded by a `full` and an `empty` mbarrier.
// Warpgroups 1 and 2 are consumers: each multiplies its BM/2 rows of the tile
// with wgmma into fp32 accumulator registers, hands each stage back as soon
// as its products are done, then runs the fused epilogue on the registers and
// stores each output element once, while the producer already fills the ring
// with the next tile's stages. With a cluster of two, the blocks take
// vertically adjacent tiles (one column of B) together: each producer copies
// its own A tile and half of the B tile, multicast into both blocks, and a
// stage is refilled only when the consumers of both blocks have released it.
// A dual GEMM (DUAL) copies a B1 tile (p.tma_b1) after each B tile and keeps a
// second accumulator, acc1, of the same A rows (docs/dual-gemm.md).
#include "common/numeric.cuh"
#include "common/activations.cuh"
#include "common/philox.cuh"
#include "common/mma.cuh"
#include "common/hopper.cuh"

typedef ef_half T;

struct ef_1c91027d9a367a82_params {
  const ef_half* a;
  const ef_half* b;
  const ef_half* b1;
  const ef_half* in0;
  const ef_half* in1;
  ef_half* out0;
  long long m;
  long long n;
  long long k;
  unsigned long long seed;
  unsigned long long offset;
  alignas(64) ef_tensor_map tma_a;
  alignas(64) ef_tensor_map tma_b;
  alignas(64) ef_tensor_map tma_b1;
};

// The fused epilogue of one element: straight-line SSA from the op table.
__device__ __forceinline__ void ef_1c91027d9a367a82_epilogue(const ef_1c91027d9a367a82_params& p, float v0, float v1, float v2, float v3, float& o0) {
  const float v4 = v0 + v2;
  const float v5 = ef_sigmoid_fast(v4);
  const float v6 = v1 + v3;
  const float v7 = v5 * v6;
  o0 = v7;
}

constexpr int BM = 128, BN = 64, BK = 64, STAGES = 6, GROUP_M = 8, CLUSTER = 1;
constexpr bool DUAL = true;
// Cooperative: both consumer warpgroups on one tile, BM/2 rows each. Ping-pong:
// each warpgroup on every other tile of the block, all BM rows, so one runs
// its epilogue while the other's wgmma keep the tensor cores busy.
constexpr bool PINGPONG = true;
constexpr int CONSUMERS = 2, WG_M = PINGPONG ? BM : BM / CONSUMERS, MI = WG_M / 64, NI = BN / 8;
constexpr int RELEASERS = (PINGPONG ? 1 : CONSUMERS) * 4;  // consumer warps that read each stage
constexpr int THREADS = 128 * (CONSUMERS + 1);
constexpr bool A_KMAJOR = true;  // A row-major: tile [BM][BK]; else BM/64 blocks of [64 k][64 m]
constexpr bool B_KMAJOR = false;  // B col-major: tile [BN][BK]; else BN/64 blocks of [64 k][64 n]
// tf32 (f32 operands, rounded by the copy engine: docs/hopper.md): wgmma reads
// tf32 K-major only, so the family sends other layouts to mma.sync.
constexpr bool TF32 = sizeof(T) == 4;
static_assert(BK * sizeof(T) == 128 && (!TF32 || (A_KMAJOR && B_KMAJOR)), "a row of a stage is 128 bytes of K");
// wgmma steps a stage: each reads 32 bytes of K (k16 of 16-bit, k8 of tf32).
constexpr int KSTEPS = 4;
constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128, STAGE_BYTES = A_BYTES + (DUAL ? 2 : 1) * B_BYTES;
constexpr int BLOCK_BYTES = 64 * 64 * 2;  // one [64][64] block of an MN-major tile
// The epilogue's staging area after the ring: per consumer warp, 16 rows of
// CHUNK fp32 columns padded by 4 floats (Note [Staged wgmma epilogue]).
constexpr int CHUNK = 32, SROW = CHUNK + 4, STAGE_WARP_FLOATS = 16 * SROW;
// Note [Fragment epilogue]: a chain with one 16-bit output and no dropout runs
// on the accumulator registers, and only its outputs go through the same
// staging area, as 16-bit pairs: 16 rows of 64 columns padded by 8.
constexpr bool FRAGMENT_EPILOGUE = false;
constexpr int F16_SROW = 64 + 8;
static_assert(16 * F16_SROW * 2 <= STAGE_WARP_FLOATS * 4, "a warp's 16-bit chunk fits its staging area");
static_assert(WG_M % 64 == 0 && BN % 64 == 0 && BN <= 256 && (BN % (64 * CLUSTER) == 0 || (BN == 64 && CLUSTER == 2)),
              "tile shape");
static_assert(16 * CHUNK / 4 == 4 * 32, "a lane walks four quads of a chunk");
static_assert(!DUAL || BN <= 128, "a dual GEMM's two products are one wgmma of 2 BN <= 256 columns");

// D[MI=1 row block][NI][4] += A (64 x 32 bytes of K) * B (32 bytes of K x BN) on the tensor cores.
__device__ __forceinline__ void ef_wgmma(float (&d)[NI][4], float (&d1)[NI][4], unsigned long long da, unsigned long long db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 1, 1, 1, 0, 1;\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d1[0][0]), "+f"(d1[0][1]), "+f"(d1[0][2]), "+f"(d1[0][3]), "+f"(d1[1][0]), "+f"(d1[1][1]), "+f"(d1[1][2]), "+f"(d1[1][3]), "+f"(d1[2][0]), "+f"(d1[2][1]), "+f"(d1[2][2]), "+f"(d1[2][3]), "+f"(d1[3][0]), "+f"(d1[3][1]), "+f"(d1[3][2]), "+f"(d1[3][3]), "+f"(d1[4][0]), "+f"(d1[4][1]), "+f"(d1[4][2]), "+f"(d1[4][3]), "+f"(d1[5][0]), "+f"(d1[5][1]), "+f"(d1[5][2]), "+f"(d1[5][3]), "+f"(d1[6][0]), "+f"(d1[6][1]), "+f"(d1[6][2]), "+f"(d1[6][3]), "+f"(d1[7][0]), "+f"(d1[7][1]), "+f"(d1[7][2]), "+f"(d1[7][3])
      : "l"(da), "l"(db));
}

// Byte offset, within a stage, of the 64-row slice of A for rows r0..r0+63
// (r0 a multiple of 64) at wgmma step kk. K-major: 128-byte rows, 8-row groups
// 1024 bytes apart (SBO); a step is 32 bytes along the row. M-major (16-bit
// only): [64 k][64 m] blocks, a k16 step 16 rows of 128 bytes; LBO the block stride.
__device__ __forceinline__ constexpr unsigned a_offset(int r0, int kk) {
  return A_KMAJOR ? r0 * 128 + kk * 32 : (r0 / 64) * BLOCK_BYTES + kk * 2048;
}
__device__ __forceinline__ constexpr unsigned b_offset(int kk) { return A_BYTES + (B_KMAJOR ? kk * 32 : kk * 2048); }
// Note [Uniform descriptors]: every descriptor of the mainloop is one of two
// base descriptors (stage 0, offset 0) plus (byte offset >> 4) in its 14-bit
// start-address field: shared memory is below 256 KB, so the sum never carries
// out of the field. With the warpgroup index made warp-uniform (a shuffle from
// lane 0), ptxas keeps the descriptors in uniform registers and a k step is its
// HGMMAs and a few uniform adds. Built per wgmma from the address (mask, shift,
// or, then R2UR), the descriptors took ~100 instructions a k step, and a
// neighbouring warp's epilogue delayed them enough to starve the tensor cores
// (docs/perf/gemm.md, "Uniform descriptors").
__device__ __forceinline__ unsigned long long a_desc_base(unsigned sbase) {
  return ef_wgmma_desc(sbase, A_KMAJOR ? 16 : BLOCK_BYTES, 1024);
}
__device__ __forceinline__ unsigned long long b_desc_base(unsigned sbase) {
  return ef_wgmma_desc(sbase, B_KMAJOR ? 16 : BLOCK_BYTES, 1024);
}

// Grouped raster: GROUP_M row tiles share each column tile, for L2 reuse of B.
// 32-bit: the host keeps tile counts below 2^31, and the producer's registers
// are few (setmaxnreg), so 64-bit divisions there would spill.
// A unit of work is CLUSTER vertically adjacent tiles; block `rank` of the
// cluster takes the unit's row tile CLUSTER * unit_row + rank.
__device__ __forceinline__ void tile_origin(int id, int units_m, int tiles_n, int rank, int& m0, int& n0) {
  const int per_group = GROUP_M * tiles_n;
  const int first_m = (id / per_group) * GROUP_M;
  const int group_rows = units_m - first_m < GROUP_M ? units_m - first_m : GROUP_M;
  m0 = ((first_m + (id % per_group) % group_rows) * CLUSTER + rank) * BM;
  n0 = ((id % per_group) / group_rows) * BN;
}

// The producer's copy of one B tile (B, or a dual GEMM's B1) of k step k0 into
// `sb`: whole, or with a cluster this block's share, multicast to both blocks.
__device__ __forceinline__ void load_b(unsigned sb, const ef_tensor_map* map, unsigned full, int k0, int n0, int rank) {
  if constexpr (CLUSTER == 1 && B_KMAJOR) {
    ef_tma_load_2d(sb, map, full, k0, n0);
  } else if constexpr (CLUSTER == 1) {
#pragma unroll
    for (int j = 0; j < BN / 64; ++j) ef_tma_load_2d(sb + j * BLOCK_BYTES, map, full, n0 + 64 * j, k0);
  } else if constexpr (B_KMAJOR) {  // rows [rank * BN/2, +BN/2) of the [BN][64] tile
    constexpr int HALF = BN / CLUSTER;
    ef_tma_load_2d_multicast(sb + rank * HALF * 128, map, full, k0, n0 + rank * HALF, (1u << CLUSTER) - 1);
  } else if constexpr (BN / 64 < CLUSTER) {  // one [64 k][64 n] block: k rows [rank * 32, +32) of it
    constexpr int KPART = BK / CLUSTER;
    ef_tma_load_2d_multicast(sb + rank * KPART * 128, map, full, n0, k0 + rank * KPART, (1u << CLUSTER) - 1);
  } else {  // this block's share of the [64 k][64 n] blocks
    constexpr int PER = BN / 64 / CLUSTER;
#pragma unroll
    for (int j = rank * PER; j < (rank + 1) * PER; ++j)
      ef_tma_load_2d_multicast(sb + j * BLOCK_BYTES, map, full, n0 + 64 * j, k0, (1u << CLUSTER) - 1);
  }
}

// Hands stage `s` back: to this block's producer, and with a cluster to the
// peer's too (its multicast writes this block's copy of the stage).
__device__ __forceinline__ void release_stage(unsigned empty) {
  if constexpr (CLUSTER == 1) {
    ef_mbar_arrive(empty);
  } else {
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) ef_mbar_arrive_cluster(empty, r);
  }
}

// One warp's CHUNK columns of 16 rows of an accumulator (its fragments of
// chunk c) into its staging area, between two __syncwarp (the previous
// chunk's reads are done; this chunk's writes are visible).
__device__ __forceinline__ void stage_chunk(float* stage, const float (&acc)[NI][4], int c, int lane) {
  __syncwarp();
#pragma unroll
  for (int f = 0; f < CHUNK / 8; ++f)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<float2*>(stage + ((lane >> 2) + h * 8) * SROW + f * 8 + (lane & 3) * 2) =
          make_float2(acc[c * (CHUNK / 8) + f][2 * h], acc[c * (CHUNK / 8) + f][2 * h + 1]);
  __syncwarp();
}
// Chunk u (fragment row mi = u / (BN / CHUNK), chunk c = u % (BN / CHUNK))
// staged, u warp-uniform and not a constant: registers cannot be indexed, so
// one branch per chunk, each with constant indices (Note [Chunk loop]).
__device__ __forceinline__ void stage_unit(float* stage, const float (&acc)[MI][NI][4], int u, int lane) {
#pragma unroll
  for (int v = 0; v < MI * (BN / CHUNK); ++v)
    if (v == u) stage_chunk(stage, acc[v / (BN / CHUNK)], v % (BN / CHUNK), lane);
}

// Note [Fragment epilogue]: fragment chunk u (row block mi = u / (BN / 64),
// 64 columns c = u % (BN / 64)) copied out of the accumulators, u
// warp-uniform: one branch per chunk with constant indices, so the chain is
// compiled once per chunk loop, not once per chunk. The empty volatile asm
// keeps each branch a branch: without it NVVM if-converts the copies into
// select chains, 128 FSEL a chunk for four chunks, 31% of the GEMM alone's
// epilogue instructions (SASS), where a taken branch is 32 moves.
__device__ __forceinline__ void fragment_chunk(float (&ch)[8][4], const float (&acc)[MI][NI][4], int u) {
#pragma unroll
  for (int v = 0; v < MI * (BN / 64); ++v)
    if (v == u) {
      asm volatile("");
#pragma unroll
      for (int f = 0; f < 8; ++f)
#pragma unroll
        for (int e = 0; e < 4; ++e) ch[f][e] = acc[v / (BN / 64)][(v % (BN / 64)) * 8 + f][e];
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)  ef_1c91027d9a367a82(const __grid_constant__ ef_1c91027d9a367a82_params p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 1024 bytes: stages start on that boundary.
  const unsigned raw = ef_smem_addr(smem_raw);
  const unsigned sbase = (raw + 1023u) & ~1023u;
  const unsigned bars = sbase + STAGES * STAGE_BYTES;  // full[STAGES], empty[STAGES], turn[2]
  const unsigned turns = bars + 16 * STAGES;            // ping-pong: whose mainloop is next
  float* const staging = reinterpret_cast<float*>(smem_raw + (bars - raw) + 16 * STAGES + 16);
  const int tiles_m = (int)((p.m + BM - 1) / BM), tiles_n = (int)((p.n + BN - 1) / BN);
  const int units_m = (tiles_m + CLUSTER - 1) / CLUSTER, units = units_m * tiles_n;
  const int first_unit = blockIdx.x / CLUSTER, unit_step = gridDim.x / CLUSTER;
  const int rank = CLUSTER > 1 ? (int)ef_cluster_rank() : 0;
  const int KT = (int)((p.k + BK - 1) / BK);
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      ef_mbar_init(bars + 8 * s, 1);                                    // the producer's expect_tx
      ef_mbar_init(bars + 8 * (STAGES + s), CLUSTER * RELEASERS);  // each reading warp of the cluster, once
    }
    ef_mbar_init(turns, 1);
    ef_mbar_init(turns + 8, 1);
    ef_mbar_init_fence();
  }
  // With a cluster, the peer may copy into this block or arrive on its
  // barriers as soon as it starts: both blocks initialise theirs first.
  if constexpr (CLUSTER > 1) ef_cluster_sync();
  else __syncthreads();

  if (threadIdx.x < 128) {
    // Producer: one thread walks this block's tiles and their k steps in the
    // order the consumers read them, STAGES ahead.
    ef_setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      int s = 0;
      unsigned phase = 0;  // of the ring's current lap
      for (int unit = first_unit; unit < units; unit += unit_step) {
        int m0, n0;
        tile_origin(unit, units_m, tiles_n, rank, m0, n0);
        for (int k0 = 0; k0 < KT * BK; k0 += BK) {
          const unsigned full = bars + 8 * s, empty = bars + 8 * (STAGES + s);
          ef_mbar_wait(empty, phase ^ 1u);  // the first lap finds every slot free
          ef_mbar_expect_tx(full, STAGE_BYTES);  // B whole: with a cluster, half comes from the peer
          const unsigned sa = sbase + s * STAGE_BYTES, sb = sa + A_BYTES;
          if constexpr (A_KMAJOR) {
            ef_tma_load_2d(sa, &p.tma_a, full, k0, m0);
          } else {
#pragma unroll
            for (int j = 0; j < BM / 64; ++j) ef_tma_load_2d(sa + j * BLOCK_BYTES, &p.tma_a, full, m0 + 64 * j, k0);
          }
          load_b(sb, &p.tma_b, full, k0, n0, rank);
          if constexpr (DUAL) load_b(sb + B_BYTES, &p.tma_b1, full, k0, n0, rank);
          if (++s == STAGES) {
            s = 0;
            phase ^= 1u;
          }
        }
      }
    }
  } else {
  // Consumers.
  ef_setmaxnreg_inc<232>();
  // no dropout draws: no seed to read
  // Warp-uniform to the compiler (a shuffle), so what derives from it can live
  // in uniform registers (Note [Uniform descriptors]).
  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0) - 1;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x & 31;
  const int wm = PINGPONG ? 0 : wg * WG_M;  // this warpgroup's first row in the tile
  const unsigned long long a_base = a_desc_base(sbase), b_base = b_desc_base(sbase);
  int local = -1;  // the block's tiles in order; the ring holds their k steps in that order
  unsigned turns_taken = 0;
  for (int unit = first_unit; unit < units; unit += unit_step) {
    ++local;
    if (PINGPONG && (local & 1) != wg) continue;  // the other warpgroup's tile
    // Where this tile's first k step sits in the ring (ping-pong skips the
    // other warpgroup's KT steps; 64-bit: local * KT may pass 2^31).
    const long long first = (long long)local * KT;
    int s = (int)(first % STAGES);
    unsigned phase = (unsigned)((first / STAGES) & 1);
    int m0_, n0_;
    tile_origin(unit, units_m, tiles_n, rank, m0_, n0_);
    const long long m0 = m0_, n0 = n0_;
    float acc[MI][NI][4], acc1[MI][NI][4];  // acc1: a dual GEMM's (dead code otherwise)
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = acc1[mi][ni][e] = 0.0f;
    // Note [Ping-pong turns]: a warpgroup starts a tile's mainloop only after
    // the other has waited on its last stage of the tile before. Parity waits
    // on a `full` barrier are only sound within one lap of it; without the
    // turn, a warpgroup could wait on a stage two laps ahead and pass on an
    // older phase. The turns also give the tensor cores to one warpgroup at a
    // time, so the other's epilogue overlaps them.
    if (PINGPONG && local > 0) {
      ef_mbar_wait(turns + 8 * wg, turns_taken & 1u);
      ++turns_taken;
    }
    int prev = -1;  // the stage whose products are still in flight
    for (int kt = 0; kt < KT; ++kt) {
      ef_mbar_wait(bars + 8 * s, phase);
      const unsigned st = (unsigned)s * (STAGE_BYTES >> 4), wa = a_offset(wm, 0) >> 4;
      ef_wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < KSTEPS; ++kk)
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          // Note [One wgmma for two products]: a dual GEMM's B1 tile follows B's
          // in the stage, and both descriptors stride the same way (K-major: 8-row
          // groups 1024 bytes apart; MN-major: [64 k][64 n] blocks BLOCK_BYTES
          // apart), so B and B1 read as one tile twice as wide: one m64n(2BN)
          // wgmma gives acc and acc1, reading A once.
          ef_wgmma(acc[mi], acc1[mi], a_base + (st + wa + (a_offset(mi * 64, kk) >> 4)),
                   b_base + (st + (b_offset(kk) >> 4)));
        }
      ef_wgmma_commit();
      // The previous step's products are done: its stage may be refilled.
      ef_wgmma_wait<1>();
      if (prev >= 0 && lane == 0) release_stage(bars + 8 * (STAGES + prev));
      prev = s;
      if (++s == STAGES) {
        s = 0;
        phase ^= 1u;
      }
    }
    if (PINGPONG && threadIdx.x % 128 == 0) ef_mbar_arrive(turns + 8 * (wg ^ 1));  // its turn
    ef_wgmma_wait<0>();
    if (prev >= 0 && lane == 0) release_stage(bars + 8 * (STAGES + prev));
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          ef_fence_register(acc[mi][ni][e]);
          if constexpr (DUAL) ef_fence_register(acc1[mi][ni][e]);
        }

    // Note [Staged wgmma epilogue]: a wgmma m64nN accumulator is the m16n8
    // fragment layout of mma.sync repeated over N: element e of fragment
    // (mi, ni) of lane l in warp w sits at row m0 + wm + 64*mi + 16*w + l/4 +
    // (e/2)*8, column n0 + 8*ni + (l%4)*2 + e%2. Stored from there, a warp's
    // 2-byte stores touch 8 rows each and the epilogue took ~18 us a tile at
    // 4096^3 (docs/perf/gemm.md). Instead each warp writes CHUNK columns
    // of its 16 rows to shared memory and walks them four consecutive columns
    // a lane: one Philox call per four elements, one 8- or 16-byte store, and
    // the chain compiled once per chunk, not once per fragment element.
    //
    // Note [Chunk loop]: the chunks are a loop, not unrolled: only the staging
    // names accumulator registers, so only it is unrolled (stage_unit, one
    // warp-uniform branch per chunk), and the chain, the draws and the stores
    // are compiled once instead of MI * BN / CHUNK times (ptxas spent 57% of
    // its time on those copies; docs/perf/gemm.md).
    if constexpr (FRAGMENT_EPILOGUE) {
      // (not this kernel's: Note [Fragment epilogue])
    } else {
    float* const stage = staging + (threadIdx.x / 32 - 4) * STAGE_WARP_FLOATS;
#pragma unroll 1
    for (int u = 0; u < MI * (BN / CHUNK); ++u) {
        const int mi = u / (BN / CHUNK), c = u % (BN / CHUNK);
        // A dual GEMM stages acc1's chunk first and keeps a lane's four
        // quads of it in registers (quad1), then stages acc's in its place.
        float held[DUAL ? 4 : 1][4];
        if constexpr (DUAL) {
          stage_unit(stage, acc1, u, lane);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int q = lane + 32 * i, r = q / (CHUNK / 4), c4 = (q % (CHUNK / 4)) * 4;
            const float4 v = *reinterpret_cast<const float4*>(stage + r * SROW + c4);
            held[i][0] = v.x, held[i][1] = v.y, held[i][2] = v.z, held[i][3] = v.w;
          }
        }
        stage_unit(stage, acc, u, lane);
        // Unrolled: the four quads' loads and Philox calls interleave (one
        // quad at a time, the epilogue was latency-bound: docs/perf/gemm.md).
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int q = lane + 32 * i, r = q / (CHUNK / 4), c4 = (q % (CHUNK / 4)) * 4;
          const float4 quad4 = *reinterpret_cast<const float4*>(stage + r * SROW + c4);
          const float quad[4] = {quad4.x, quad4.y, quad4.z, quad4.w};
          const float (&quad1)[4] = held[DUAL ? i : 0];
          const long long row = m0 + wm + mi * 64 + warp * 16 + r, col0 = n0 + c * CHUNK + c4;
    // no shared dropout draws
    constexpr bool guard_elements = false;  // the quad's store checks them (Note [Unguarded quads])
    float out0_q[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const long long col = col0 + e;
            const long long cc = col < p.n ? col : p.n - 1;
            const float in0_v = ef_ldg_float(p.in0 + cc);
            const float in1_v = ef_ldg_float(p.in1 + cc);
            if (!guard_elements || (row < p.m && col < p.n)) {
              const long long at = row * p.n + col;
              float out0_v;
              ef_1c91027d9a367a82_epilogue(p, quad[e], quad1[e], in0_v, in1_v, out0_v);
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
      }
    }
  }
  }
  // No block leaves while its peer may still copy into it or arrive on its barriers.
  if constexpr (CLUSTER > 1) ef_cluster_sync();
}
