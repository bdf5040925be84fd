#pragma once
/// Tile configurations: how a kernel family lays its work over the GPU. Each
/// kernel family has its own tile type (Note [Kernel families] in
/// docs/architecture.md); TileConfig is the closed set of them, so cache keys
/// compare and hash tiles without knowing the family. "No tile chosen" is
/// std::nullopt at the API (Jit::compile), never a sentinel value.
#include <cstdint>
#include <string>
#include <variant>

namespace epifuse {

/// Elementwise family: a grid-stride loop of VEC consecutive elements per thread.
struct ElementwiseTile {
  int threads = 256;      ///< threads per block
  int vec = 0;            ///< elements per thread per step; 0: 16 bytes of the narrowest full tensor
  int blocks_per_sm = 0;  ///< grid: 0 covers every vector once; k > 0 is a grid-stride grid of k*SMs blocks
  int stages = 0;  ///< column-sum kernels: rows of shared-memory slots its 16-bit loads run ahead through (2-4); 0 loads into registers
  friend bool operator==(const ElementwiseTile&, const ElementwiseTile&) = default;
  std::string str() const;  ///< "t256v8g4", "t256v8g0s3"
};

/// GEMM family (mma.sync mainloop): a BM x BN block tile walked over K in BK
/// steps through a `stages`-deep shared-memory ring, warps_m x warps_n warps.
struct GemmTile {
  int bm = 128, bn = 128, bk = 32;
  int warps_m = 2, warps_n = 2;
  int stages = 4;
  int group_m = 8;  ///< raster: this many row tiles share each column tile (L2 reuse)
  int split_k = 1;  ///< K cut into this many slices, one block each, summed in order (docs/gemm.md)
  friend bool operator==(const GemmTile&, const GemmTile&) = default;
  std::string str() const;  ///< "128x128x32w2x2s4g8", "...g8k4" with split-K
};

/// GEMM family, Hopper mainloop (sm_90a only; docs/hopper.md): a persistent
/// grid of BM x BN tiles; TMA fills a `stages`-deep ring of BK = 64 tiles, one
/// producer warp issues the copies and two consumer warpgroups (BM/2 rows each)
/// the wgmma ops; the epilogue runs on their accumulator registers.
struct WgmmaTile {
  int bm = 128, bn = 256, bk = 64;
  int stages = 4;
  int group_m = 8;  ///< raster: this many row tiles share each column tile (L2 reuse)
  int cluster = 1;  ///< 2: two blocks on vertically adjacent tiles load half of their shared B tile each, multicast
  int pingpong = 0;  ///< 1: each consumer warpgroup takes every other tile whole (its epilogue overlaps the other's wgmma)
  friend bool operator==(const WgmmaTile&, const WgmmaTile&) = default;
  std::string str() const;  ///< "h128x256x64s4g8"; "c2" appended for a cluster of 2, then "p" for ping-pong
};

/// Row family (graphs with row reductions; docs/row-reductions.md): `group`
/// threads of a block per row (a block walks threads/group rows at once; a
/// group of up to 32 reduces with warp shuffles alone), or with `cluster` > 1
/// (sm_90) the `cluster` blocks of a thread-block cluster per row, reducing
/// through distributed shared memory. VEC elements a vector. A thread keeps its
/// `regs` vectors of each full input in registers (the row is read once); with
/// regs 0 it streams the row again for every reduction stage. The grid is
/// persistent (multiprocessors x the kernel's occupancy blocks walk the rows)
/// or, with persistent 0, one block (group, cluster) per row.
struct RowTile {
  int threads = 256;
  int vec = 0;         ///< 0: 16 bytes of the narrowest full tensor, lowered until it divides N
  int regs = -1;       ///< vectors a thread holds; -1: as many as the row needs if that fits, else 0 (stream)
  int persistent = 1;  ///< 1: grid of multiprocessors x occupancy; 0: one block per row
  int group = 0;       ///< threads per row: 0 (the whole block), or a power of two up to 32
  int cluster = 1;     ///< blocks per row: 1, or 2, 4, 8 (a thread-block cluster, sm_90; group 0)
  /// 0, or the stages of a shared-memory ring (sm_90, group 0): a block's part
  /// of a row is copied in by the bulk-copy engine, `ring - 1` rows ahead of
  /// the one it reduces, and read from shared memory by every stage; `regs`
  /// then sizes the ring (threads x vec x regs elements a block a row).
  int ring = 0;
  /// 1: a value a stage computes is kept in registers for the later stages
  /// that use it, instead of recomputed from the inputs (rows in registers
  /// or a ring only; docs/row-reductions.md); 2 (ring tiles): kept in the
  /// ring's own bytes, over inputs no later stage reads
  int keep = 0;
  /// 0, or P >= 2 (ring tiles): the ring is copied in pieces, a P-th of the
  /// block's part of a row each, and `ring` counts piece slots (more than P):
  /// a stage waits for each piece as it reaches it, a slot is refilled as soon
  /// as the row's last stage has read it, and ring - P pieces of the next rows
  /// are in flight while a row is reduced (docs/row-reductions.md, "Ring pieces")
  int pieces = 0;
  /// 0, or B >= 1 (NVIDIA targets): `__launch_bounds__(threads, B)`, so that the
  /// compiler keeps the registers a thread to what B blocks a multiprocessor
  /// leave (spilling if it must); the persistent grid takes as many blocks as
  /// then fit (docs/row-reductions.md, "Blocks a multiprocessor")
  int min_blocks = 0;
  /// 1 (ring tiles with column sums, one row a block): the column sums' tree
  /// works through the ring's shared memory after the last row, one (sum,
  /// item) pair at a time, instead of in registers beside the block's sums
  /// (Note [Column sums]); the same bits on the same grid, fewer registers
  int tree = 0;
  friend bool operator==(const RowTile&, const RowTile&) = default;
  /// "r256v8x2"; then "g32" for a group, "c4" for a cluster, "s2" for a ring ("s5p4": 5 slots of quarter
  /// rows), "m2" for two blocks a multiprocessor, "t" for the tree in shared memory, "k" to keep ("kr":
  /// in the ring), "b" for one block per row
  std::string str() const;
  int group_threads() const { return group > 0 ? group : threads; }  ///< threads of a block on one row
  int row_threads() const { return group_threads() * cluster; }      ///< threads on one row in all
};

/// GEMM family, matrix-instruction waves (templates/gemm_wave.cu.in, docs/amd.md):
/// the AMD mainloop. A block of waves_m x waves_n waves (wavefronts) computes
/// BM x BN; each wave a grid of the instruction's fragments: `op` 0 is MFMA
/// 32x32x8 (64 lanes; gfx90a, gfx942), 1 is WMMA 16x16x16 (32 lanes; gfx11).
/// With `fma` 1 the same fragment layout is computed with FMAs on any GPU: the
/// portable fallback (gfx1030, gfx1201, exact f32), and how the NVIDIA GPU
/// suite runs the AMD kernels' shared code.
struct WaveTile {
  int bm = 128, bn = 128, bk = 32;
  int waves_m = 2, waves_n = 2;
  int group_m = 8;  ///< raster: this many row tiles share each column tile (L2 reuse)
  int op = 0;       ///< 0 MFMA 32x32x8, 1 WMMA 16x16x16
  int fma = 0;      ///< 1: the op's fragment layout computed with FMAs (portable)
  friend bool operator==(const WaveTile&, const WaveTile&) = default;
  std::string str() const;  ///< "m128x128x32w2x2g8.mfma", "m64x64x32w2x2g8.wmma-fma"
  int lanes() const { return op == 0 ? 64 : 32; }  ///< lanes of a wave: the instruction's
};

/// One alternative per kernel family or mainloop (a new one adds its tile type here).
using TileConfig = std::variant<ElementwiseTile, GemmTile, WgmmaTile, RowTile, WaveTile>;

/// "128x128x32w2x2s4g8" or "...g8k2" (GemmTile::str's form) as a GemmTile; UserError naming
/// the expected form otherwise. Fields are checked by the family, not here.
GemmTile parse_gemm_tile(const std::string& text);
/// "h128x256x64s4g8" (WgmmaTile::str's form) as a WgmmaTile; UserError otherwise.
WgmmaTile parse_wgmma_tile(const std::string& text);
/// "r256v8x2", "r256v8x4g32", "r512v8x8c8s2k" (RowTile::str's form, "x-1" auto) as a RowTile; UserError otherwise.
RowTile parse_row_tile(const std::string& text);
/// "m128x128x32w2x2g8.mfma" (WaveTile::str's form) as a WaveTile; UserError otherwise.
WaveTile parse_wave_tile(const std::string& text);
/// "t256v8g0" (ElementwiseTile::str's form) as an ElementwiseTile; UserError otherwise.
ElementwiseTile parse_elementwise_tile(const std::string& text);
/// "t..." an ElementwiseTile, "h..." a WgmmaTile, "r..." a RowTile, "m..." a WaveTile,
/// anything else parse_gemm_tile.
TileConfig parse_tile(const std::string& text);

/// "t256v8g4": the tile's own str().
std::string to_string(const TileConfig& tile);
/// A hash of the family and every field (for cache keys; equality compares fields).
std::uint64_t tile_hash(const TileConfig& tile);

}  // namespace epifuse
