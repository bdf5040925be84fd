#pragma once
// The GEMM kernel family (Note [Kernel families]; docs/gemm.md): C = A * B on
// tensor cores with mma.sync (sm_80+), the fused epilogue on the accumulator
// fragments. Registered twice: as `gemm`, and as `dual_gemm` (A * B0 and A * B1
// sharing the A tiles, two accumulators; docs/dual-gemm.md). Its passes: plan_gemm (layouts, load path, draw sharing), then
// emit_gemm (templates/gemm_mma.cu.in).
#include <optional>
#include <string>
#include <vector>
#include <string_view>

#include "codegen/kernel_plan.hpp"
#include "epifuse/device_info.hpp"

namespace epifuse {

struct GemmPlan {
  const KernelPlan* plan = nullptr;
  GemmTile tile;            // the mma.sync and FFMA kernels' tile
  std::optional<WgmmaTile> wgmma;  // the Hopper kernel's tile (templates/gemm_sm90.cu.in)
  std::optional<WaveTile> wave;    // the matrix-instruction wave kernel's (templates/gemm_wave.cu.in, AMD)
  bool simt = false;        // f32 operands, exact math: FFMA kernel (templates/gemm_simt.cu.in)
  int operand_bytes = 2;    // 2 (f16, bf16) or 4 (f32 as tf32 on the tensor cores)
  bool a_kmajor = true;     // A row-major: K contiguous
  bool b_kmajor = false;    // B col-major: K contiguous
  bool ld8 = false;         // every operand's contiguous dimension is a multiple of 8: 16-byte loads
  bool n4 = false;          // N % 4 == 0: a Philox call's four draws lie in one row
  bool vector_only = false; // 16-byte loads only: the host checks the operands' alignment
  bool dual = false;        // dual_gemm: B0 and B1, accumulators acc and acc1
  bool strided[3] = {};     // A, B (B0), B1 strided: an ld field each (Note [Strided operands])
  bool batched = false;     // batch > 1: "/bat" in the shape class (Note [Batched GEMM])
};

/// "ld8" or "ld1" (16-byte operand loads possible), then "/n4" or "/n1", then
/// "/lda", "/ldb", "/ldb1" for each strided operand (Note [Strided operands]),
/// "/ld_in<i>", "/ld_out<j>" for each strided epilogue tensor (Note [Strided
/// epilogue tensors]), and "/bat" for a batch (Note [Batched GEMM]).
std::string_view gemm_shape_class(const Mainloop& mainloop, const Shape& shape);

// Note [Strided operands] (docs/strided-batched.md, step 1)
// A GEMM operand may be a view whose rows lie `ld` elements apart (Shape::lda,
// ldb, ldb1; a column-major operand's columns). Every loader already takes its
// leading dimension at run time, so a strided operand changes the kernel only
// by a `long long ld<x>` field after k (ParamRole::ld) that its loaders read
// instead of p.k, p.m or p.n (operand_ld_vars); the wgmma mainloop's tensor
// map takes the stride on the host (wgmma_tensor_map). A dense operand (ld 0
// or its rows' length) has no field: its kernel is byte for byte the dense
// one. Which operands are strided is in the shape class ("ld8/n4/lda"), so in
// the cache key and the kernel's name; the ld's value is not. The tile and
// the order of every addition are the dense shape's, so a strided view and its
// dense copy give the same bits. 16-byte loads and TMA need ld x element size
// a multiple of 16, as they need the pointer aligned: the launch checks both
// (Jit::Impl::pack_params) and a miss takes the general kernel, which for a
// wgmma key is the mma.sync fallback tile's.

// Note [Strided epilogue tensors] (docs/strided-batched.md, step 2)
// A GEMM chain's full [M,N] input or output may be a view whose rows lie
// ld >= N elements apart (Shape::ld_inputs, ld_outputs). Its kernel variant
// gains a `long long ld_<field>` after the operands' lds (ParamRole::ld for an
// input, output_ld for an output), and every address of that tensor reads
// `row * p.ld_<field> + col` where a dense one's reads `row * p.n + col`
// (tensor_row_stride). Nothing else changes: the tile, the walk, the order of
// every addition and the dropout index (row * N + col, the element's place in
// the [M,N] result, not in memory) are the dense shape's, so a strided view
// and its dense copy give the same bits. A dense tensor has no field, and a
// kernel with no strided tensor is byte for byte the dense one. Which tensors
// are strided is in the shape class ("/ld_in0", "/ld_out1"; built once and
// kept for the process, as the class is a view), their lds' values are not.
// Vector accesses need each row's start aligned as they need the pointer: the
// launch checks ld x element size against the tensor's alignment (an
// output's four-element stores, Jit::Impl::pack_params), and a miss takes the
// general kernel; the wgmma epilogue's 16-byte stores and prefetched input
// vectors test the ld in the kernel as they test the pointer, and take
// narrower accesses where it is off. Row [N], column [M] and scalar inputs
// and column-sum outputs have no rows to space. A batched GEMM's full tensors
// stay [B, M, N] back to back: a strided one there is a UserError (verify_shape).

// Note [Batched GEMM] (docs/strided-batched.md, step 4)
// Shape::batch problems of one shape run in one launch. A batched kernel is a
// variant ("/bat", the last flag of the shape class), so an unbatched kernel is
// byte for byte what it was. Its parameters gain `long long batch` and a
// `long long batch_stride_<operand>` per operand after the lds (ParamRole::batch,
// batch_stride; the launch resolves Shape::dense_batch). Each kernel finds its
// batch, then offsets every pointer it reads or writes: the operands by batch x
// their batch stride, full [M,N] inputs and outputs by batch x M x N (stored
// back to back); row, column and scalar inputs are shared. mma.sync, SIMT and
// the wave kernel take the batch from blockIdx.z (gemm_tile_geometry): their
// tile walk is unchanged. The wgmma kernel is persistent: its units run over
// batch x the tiles of one problem, batch-major, and each TMA descriptor is
// 3-D with the batch outermost (TensorMap2d::batches), so one descriptor
// serves every batch and each box is zero-filled at its own problem's edge
// exactly as in 2-D. (Offsetting a 2-D map's row coordinate per batch would be
// simpler, but past a problem's last K row it would read the next batch's rows
// instead of zeros for an M- or N-major operand.) A shared operand (batch
// stride 0), or a stride the copy engine cannot take, sends a wgmma key to
// its general kernel, the mma.sync fallback tile's, batched the same way. A
// dropout element of batch b is i = b*M*N + r*N + c (docs/design.md §4,
// batched elements): each draw's index adds `batch_base`. Split-K and column
// sums are not batched: a batched tile with split-K, and a batched chain with
// a column-sum output, are UserErrors.

/// Dynamic shared memory of a tile: the ring of A and B stages (A, B0 and B1
/// for a dual GEMM) of `operand_bytes`-byte elements.
std::uint32_t gemm_shared_bytes(const GemmTile& tile, int operand_bytes, bool dual = false);
/// A tensor-core warp tile in m16n8 fragments: MI rows of them, NI columns.
struct WarpFragments {
  int mi, ni;
};
inline WarpFragments warp_fragments(const GemmTile& t) {
  return {t.bm / t.warps_m / 16, t.bn / t.warps_n / 8};
}

/// Whether a tensor-core tile stages its epilogue through shared memory (Note
/// [Staged epilogue]: warp tiles of 16 or more fragments).
bool gemm_staged_epilogue(const GemmTile& tile);
/// Dynamic shared memory of a tensor-core block: the ring, or the staged
/// epilogue's fp32 warp tiles (rows padded by 4 floats; two of them for a dual
/// GEMM) where that is larger.
std::uint32_t gemm_block_shared_bytes(const GemmTile& tile, int operand_bytes, bool dual = false);
/// The mainloop's kernel: exact f32 runs on FFMA, the rest on tensor cores.
bool gemm_is_simt(const Mainloop& mainloop);

/// Dynamic shared memory of a wgmma tile: the ring (1024-byte aligned, so
/// 1 KiB of slack), its full and empty mbarriers, the epilogue's staging, and
/// with `column_sums` col_sum outputs their colbuf rows (Note [GEMM column sums]).
std::uint32_t wgmma_shared_bytes(const WgmmaTile& tile, bool dual = false, int column_sums = 0);
/// Whether a wgmma kernel of the chain runs the fragment epilogue where its
/// outputs allow vector stores (Note [Fragment epilogue]): a single GEMM, no
/// dropout, one [M,N] output, 16-bit (col_sum outputs aside).
bool wgmma_fragment_chain(const KernelSpec& spec);
/// The mma.sync tile that runs a wgmma key's general (any-alignment) path.
inline constexpr GemmTile k_wgmma_fallback_tile{128, 128, 32, 2, 4, 4, 8};
/// ParamField::index of the tensor-map parameters: which operand, which layout.
/// (B1 is a dual GEMM's second B, with B0's layout.)
enum TensorMapIndex : std::uint32_t {
  a_kmajor_map = 0,
  a_mmajor_map = 1,
  b_kmajor_map = 2,
  b_nmajor_map = 3,
  b1_kmajor_map = 4,
  b1_nmajor_map = 5,
};

/// Dynamic shared memory of a wave tile: two buffers of A and B (and B1)
/// tiles, rows padded by 16 bytes, or the staged epilogue's fragment rows
/// where that is larger (templates/gemm_wave.cu.in).
std::uint32_t wave_shared_bytes(const WaveTile& tile, int operand_bytes, bool dual = false);

/// "gfx..." targets: the wave kernel is their GEMM mainloop (mainloop_wave.cpp).
bool amd_target(std::string_view target);

// Note [GEMM column sums] (docs/gemm-backward.md §2)
// A single GEMM's chain may have col_sum outputs (a bias gradient: db =
// col_sum(dacc)); every GEMM mainloop sums them (a dual GEMM is refused; on
// sm_90a a col_sum chain takes wgmma tiles as any chain does, mma.sync where
// wgmma does not apply and as the general kernel). The epilogue hands a
// col_sum output its operand, and each lane adds its terms over its rows in
// fp32 (masked by row < M).
//  - mma.sync: two columns of each fragment, or in the staged epilogue four
//    fixed columns (warp tiles at most 128 columns wide). Lanes sharing
//    columns add in a fixed xor butterfly, the WARPS_M warps sharing columns
//    through the freed ring in warp order.
//  - SIMT (exact f32): a thread's TN columns; the warp's two thread rows
//    add by xor 16, the 8 warps through the freed A tiles in warp order.
//  - wave (AMD; its FMA form on NVIDIA): the staged epilogue's four fixed
//    columns (wave tiles at most 4 x LANES columns wide). No shuffles (a
//    64-lane wave of the FMA form is two NVIDIA warps): each lane writes its
//    own row of the freed staging area, added in (wave row, lane row) order.
//  - wgmma (persistent: a block walks many tiles): per epilogue chunk, the
//    staged quads' four columns (lanes sharing them: xor 8, 16) or the
//    fragments' two of each 8 (xor 4, 8, 16), added by halves (each xor step
//    keeps half of a lane's sums), then one lane a column adds into its
//    warp's row of `colbuf` (after the staging area, a row of BN floats per
//    consumer warp and sum), chunk after chunk in order. At the
//    tile's end the warps on the tile (8 cooperative, a warpgroup's 4
//    ping-pong) meet at a named barrier and add their rows in warp order.
// Every way one partial row of BN floats per tile goes to the workspace,
// partials[sum][tile_m][N] (scratch). After __threadfence, atomicAdd on the
// column tile's counter (zeroed workspace); the last of the tiles_m arrivals
// adds the rows 0..tiles_m-1 in order, one thread a column, writes the [N]
// output in its dtype and sets the counter back to zero (an mma.sync, SIMT
// or wave block then returns, a wgmma team goes on to its next tile; the
// three block kernels share that text, emit_gemm_col_sums.cpp). With split-K only
// the last split of a tile gets there (the others return after storing their
// partial tile). Every addition's order depends only on the tile and the
// shape, never on which block took a tile or when, so two launches give the
// same bits (another tile, which is in the cache key, gives others). A chain
// without col_sum outputs emits the same bytes as before
// (emit_gemm_col_sums.cpp).

/// Whether a GEMM kernel sums columns (it has the col_sum workspace).
bool gemm_sums_columns(const KernelSource& source);

GemmPlan plan_gemm(const KernelPlan& plan);
/// templates/gemm_mma.cu.in or, for exact f32, gemm_simt.cu.in (a GemmTile kernel).
KernelSource emit_gemm(const GemmPlan& plan);
/// templates/gemm_wave.cu.in (emit_gemm_wave.cpp).
KernelSource emit_gemm_wave(const GemmPlan& g);
/// templates/gemm_sm90.cu.in (emit_gemm_sm90.cpp).
KernelSource emit_gemm_sm90(const GemmPlan& g);

}  // namespace epifuse
