#pragma once
// The elementwise kernel family (Note [Kernel families]): a grid-stride loop
// in which each thread loads VEC consecutive elements of every full tensor with
// 16-byte accesses, runs the epilogue on each, and stores. Its passes, in
// order: choose_vector_width, then emit_elementwise (templates/elementwise.cu.in;
// over strided rows emit_elementwise_rows, templates/elementwise_rows.cu.in).
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/column_sums.hpp"
#include "codegen/epilogue.hpp"
#include "codegen/family.hpp"
#include "codegen/kernel_plan.hpp"

namespace epifuse {

/// The family's own decisions, on top of the generic plan.
struct ElementwisePlan {
  const KernelPlan* plan = nullptr;
  ElementwiseTile tile;               // vec resolved
  bool needs_row_index = false;       // some input is a col vector
  bool needs_col_index = false;       // some input is a row vector
  bool row_vectors_aligned = false;   // N % vec == 0: row vectors load as vectors too
  bool index32 = false;               // M*N (+ a grid's overshoot) fits int: 32-bit indexing
  bool vector_only = false;           // no scalar path: M*N % vec == 0 and the host checks alignment
  bool strided_rows = false;          // a full tensor is strided (Note [Strided rows])
  bool walks_rows = false;            // strided with N % vec != 0: the 2-D walk (Note [Strided rows])
};

/// The block-size and vector-width ranges every tile of threads over vectors
/// obeys (elementwise and row tiles): UserError "<what>: ..." otherwise.
void check_threads_and_vec(std::string_view what, int threads, int vec);
/// 16 bytes of the narrowest full tensor, in elements.
int natural_vector_width(const KernelSpec& spec);
/// The tile with vec decided: `tile.vec`, else 16 bytes of the narrowest full
/// tensor; at least 4 (one Philox call) when the graph tests dropout draws.
ElementwiseTile resolve_elementwise_tile(const KernelSpec& spec, ElementwiseTile tile);
/// Whether each multiprocessor must take 16 DRAM bytes a clock or more for the
/// GPU to reach its peak, on NVIDIA: the side of the threshold the default
/// tiles read (Note [Staged column loads], Note [Two vectors a thread]).
bool feeds_16_bytes_an_sm_clock(std::string_view target, const DeviceInfo& device);
/// Whether a dropout of the spec draws (0 < p < 1): its Philox call serves
/// four elements, so a vector is never narrower than four.
bool draws_dropout(const KernelSpec& spec);
/// The tile of a kernel without column sums when none is asked for, vec
/// resolved: 256 threads of 16-byte vectors over a grid covering the tensor;
/// 16-bit chains with dropout draws take two 16-byte vectors a thread where
/// the GPU feeds each SM 16 bytes a clock or more, on shapes of whole vectors
/// a row and at least 4 such blocks an SM (Note [Two vectors a thread]).
ElementwiseTile default_elementwise_tile(const KernelSpec& spec, const Shape& shape, std::string_view target,
                                         const DeviceInfo& device);
/// What the code is specialised for besides the spec and tile: "row_aligned" or
/// "row_unaligned" (N % vec), then "/i32" or "/i64" (index width), then
/// "/ragged" when M*N % vec != 0 (row_aligned shapes never are), then the
/// strided tensors' flags ("/ld_in0/ld_out1", Note [Strided rows]).
std::string_view elementwise_shape_class(const ElementwiseTile& resolved, const Shape& shape);
/// Note [Strided rows]: whether every full tensor's rows start where VEC-wide
/// accesses can: ld (N when dense) x element size a multiple of
/// min(16, VEC x element size). The row family's vectors obey it too.
bool row_starts_take(const KernelSpec& spec, const Shape& shape, int vec);
/// Note [Strided rows]: the widest vector up to `vec` whose accesses every
/// full tensor's rows can take: N % VEC == 0, and each tensor's ld x element
/// size a multiple of min(16, VEC x element size); never below 4 where the
/// graph draws dropout (one Philox call serves four elements).
int strided_rows_vector_width(const KernelSpec& spec, const Shape& shape, int vec);
/// M*N % vec != 0: the last vector is partial, so the kernel needs its scalar path.
bool ragged(const ElementwiseTile& resolved, const Shape& shape);

// Note [Column sums]
// A spec whose outputs include col_sum values ([N]: a bias's gradient) runs a
// second kernel shape of the family, templates/elementwise_col_sum.cu.in. A
// block is `lanes` threads (a warp) across a tile of lanes x VEC columns (one
// vector a lane) by threads / lanes rows, and walks the rows of its row slice
// blockIdx.y, ROWS rows' loads in flight at once; each thread adds its column
// terms in registers, so the full outputs are written and the column terms
// summed in one pass over the data. The block combines its rows in order through shared
// memory and writes one partial row per column tile into the workspace's
// scratch (partials[sum][blockIdx.y][column]); the last block of a column tile
// to arrive (a counter per tile in the zeroed workspace, which that block sets
// back to zero) adds the gridDim.y partials of its tile in a fixed order and
// writes the [N] output. The order of every addition depends only on the
// grid, which depends only on the shape, the tile and the GPU's
// multiprocessors, so two launches give the same bits; the final sums run on
// as many blocks as there are column tiles.
// A GEMM's epilogue sums columns in the same way over its output tiles
// (Note [GEMM column sums], gemm/gemm.hpp): a partial row per row tile, the
// last block of a column tile adding them in order.

// Note [Staged column loads]
// With 16-bit tensors (8-element vectors, one row in flight) the column-sum
// kernel's registers limit it to half a multiprocessor's threads, and its
// loads to 16 bytes a tensor a thread in flight. With a tile of `stages` ST
// each thread instead copies its full inputs ST - 1 rows ahead into shared
// memory slots of its own with cp.async, waits for the oldest row and reads
// it back: no registers hold the bytes in flight, and no barrier is needed, a
// slot being written and read by one thread. The arithmetic and its order are
// the register path's, so the bits are too. Only the vector-only path stages,
// where every full input moves 16 bytes a vector, and ST shrinks (to 2, else
// 0) where its slots would pass 48 KB a block, the static shared memory a
// block has without opting in. The slots take all of it: once every thread
// has left the loop the rows' sums reuse their bytes (`red`), and the last
// block of a column tile is found by a barrier's vote, not a shared flag. The
// register path stays in the same source for AMD targets (the preprocessor
// picks).
//
// Whether it pays depends on the GPU: the bytes in flight that cover DRAM's
// latency grow with the bytes each multiprocessor must take a clock
// (dram_bytes_per_sm_clock). The bf16 bias+GELU+dropout+residual backward,
// staged tiles against the register loop's t256v8g0 in turns:
// - H100 SXM (12.8 bytes an SM a clock; 91.6% of copy in registers):
//   t256v8g0s3 1.035-1.061x the time (2026-11-27);
// - H200 (18.4; 74-82% of copy in registers; 2026-11-29, alternate
//   processes, M*N = 2^27 at rows of 1,024 to 262,144 and three more shapes):
//   t256v8g0s3 0.95-0.99x, t512v8g0s2 0.94-0.98x, and t512v8g1s2 0.89-0.94x
//   (87-91% of copy) wherever its grid is one or two waves of column tiles,
//   1.06x at rows of 262,144 (1,024 column tiles of one block an SM); three
//   rows of slots on the same grid (48 KB, t512v8g1s3) then took 0.970-0.985x
//   t512v8g1s2's time at 16384x8192 and 131072x1024 (three rounds in turns),
//   89-90% of copy to 91-92%.
// Fewer blocks walk fewer rows at once, so more of each DRAM page is read
// while it is open; the register loop on the same grid (t512v8g1) is slower
// than t256v8g0, as it has half the loads in flight. f32 (4-element
// vectors, two rows in flight in registers) measured 0.98-1.02x staged on
// the H200, so it never stages; there the tuner (in turns) put a tile of 512
// threads of 8-element vectors an SM first at rows of 1,024 to 65,536
// (t512v8g1 0.957-0.966x t256v4g0's time, at most 2% behind the first),
// and nothing ahead of t256v4g0 by more than 1% at 262,144.
// default_column_sum_tile takes these from 16 bytes an SM a clock, between
// the two GPUs measured; `epifuse tune` times every candidate.

// Note [Threads an SM for a sum alone]
// A column sum with nothing else to do (a bias's gradient: one col_sum output,
// no [M,N] output, no draws) holds few registers, so its bytes in flight come
// from threads, not from stages: on the H200 (2026-11-29, `epifuse tune` in
// turns, one bf16 or f32 input, eight shapes from 1024x1024 to 2^27; docs/perf/
// elementwise.md, "A bias gradient alone") the staged t512v8g1s2 ran
// 1.07-1.22x the fastest tile, and the fastest filled 2048 threads an SM from
// M*N = 2^25, 1024 at 2^24, 512 at 2^23 and 256 at 2^20. More threads each
// walk fewer rows, and the fixed cost a block pays (its rows combined through
// shared memory, a partial row written and read back) weighs more: on 132 SMs
// each count won where it gave a thread 124 elements and lost where it gave
// 62, so column_sum_threads_an_sm picks the largest count that gives each
// thread at least 96. 1024 threads a block up to 2048 an SM: t1024v8g2 ran
// within 3.5% of the fastest at every 2048-thread shape from 2^26 in bf16 and
// 5% in f32, 5.6-6.3% at 2^25 in bf16; t512v8g4 was as close but 5.7% behind
// at 131072x1024. Where a sum shares the kernel with [M,N] outputs or draws
// (the backward of bias+GELU+dropout+residual), the registers rule and the
// staged tile above stand; there f32's two vectors a row need 512 threads an
// SM with work enough (at 1024x1024 t512v8g1 took 1.47x the time of t512v4g1).

// Note [Two vectors a thread]
// A 16-bit chain with dropout does about 35 instructions an element for 6 DRAM
// bytes (docs/perf/elementwise.md, "What bounds it"), so where each SM must
// take 18.4 bytes a clock (an H200) it runs near the issue limit, and the
// tuner has always put 16-element vectors first there. Two 16-byte vectors a
// thread halve the index and address work an element and give four Philox
// calls a thread instead of two. In `epifuse tune` turns on an H200
// (bias+GELU+dropout+residual, bf16) t256v16g0 took 0.92x t256v8g0's time
// at 16384x8192 and 131072x1024, within 1% of the fastest candidate; a light
// 16-bit chain (add and scale) ran 5% slower on it, and the f32 chain 1.1%
// slower on two vectors, so the rule is for 16-bit chains with dropout only
// (f16 takes it with bf16: the same bytes, conversions no dearer; not yet
// timed). The H100 (12.8 bytes an SM a clock) keeps one vector until measured
// there. A grid of fewer than 4 blocks an SM keeps one vector (more
// threads; on the H200 two vectors ran 0.97-1.04x one vector's time at
// 1024x1024, 2 blocks an SM, and 0.93-0.96x at 8 and 15.5), and so do rows
// that are not whole 16-element vectors (not timed on two). Strided
// views keep two where their rows start on 16 bytes (Note [Strided rows]):
// with x, the residual and y strided the kernel took 0.97x the time it takes
// on one vector. Elementwise results do not depend on the vector width, so
// the choice changes speed, never bits.

// Which outputs are sums: column_sum_outputs and has_column_sums (codegen/column_sums.hpp).

// Note [Strided rows] (docs/strided-batched.md, "Built: strided tensors in
// the elementwise and row families")
// A full [M,N] input or output may have rows p.ld_<field> >= N elements apart
// (Shape::ld_inputs, ld_outputs; Note [Strided epilogue tensors] in
// gemm/gemm.hpp). Every kernel addresses a strided tensor's element (r, c) at
// r * p.ld_<field> + c, and a dense one's at r * N + c as before; a dropout
// draw's index is r * N + c, the element's place in the [M,N] result, so a
// view and its dense copy draw the same mask. A lane's vector never
// straddles a row, so the flat kernel over strided rows narrows VEC until
// N % VEC == 0 and each strided row's start takes the vector's accesses
// (strided_rows_vector_width; the tile, and so the key, holds the narrowed
// width): elementwise results do not depend on VEC, so the bits are the dense
// kernel's. With N % VEC == 0 the flat kernel keeps its one index over M*N and
// finds each vector's row and column as it does for broadcast operands (its
// vectors, and its scalar path's elements, stay in one row). Only dropout can
// leave N % VEC != 0 (one Philox call serves four elements); there the kernel
// becomes 2-D: the column-sum kernel's walk (a warp across a tile of 32 x VEC
// columns, the block's warps down the rows) without the sums,
// templates/elementwise_rows.cu.in, whose row ends go element by element.
// The 2-D walk was the strided kernel for every shape until measured: its two
// loops held 46 registers against the flat kernel's 40 (5 blocks of 256 an SM
// against 6), and bias+GELU+dropout+residual in bf16 ran 1.04x its dense copy
// on an H100, the flat walk 1.01x (docs/strided-batched.md).
// The column-sum kernel keeps the dense shape's tile, whose VEC
// sets the grid and so the order of the column sums' additions: there only
// the addresses change, and an ld its vectors cannot take clears the vector
// flag at launch as a misaligned pointer does (its general kernel reads
// element by element). A dense shape's kernels are byte for byte what they
// were; the strided flags are in the shape class, the lds' values are not.

/// The grid of a column-sum kernel: column tiles x row slices.
struct ColumnGrid {
  std::int64_t lanes = 0;          ///< threads across the columns: blockDim.x (a warp)
  std::int64_t rows_per_step = 0;  ///< threads / lanes: blockDim.y
  std::int64_t tile_columns = 0;   ///< TN = lanes x vec
  std::int64_t column_tiles = 0;  ///< ceil(N / TN): gridDim.x
  std::int64_t row_slices = 0;    ///< gridDim.y: blocks that share a column tile's rows
};
/// The largest multiprocessor count a column-sum workspace is sized for; a
/// GPU with more runs the grid of this many.
inline constexpr int k_column_sum_max_multiprocessors = 1024;
/// Blocks per multiprocessor the grid is sized for (the tile's, or half of a
/// multiprocessor's 2048 threads): the kernel's minimum occupancy too.
int column_sum_blocks_per_sm(const ElementwiseTile& resolved);
/// Rows whose loads a thread issues before it computes any of them (the
/// kernel's ROWS): 2 up to 4-element vectors, else 1.
int column_sum_rows_in_flight(const ElementwiseTile& resolved);
/// Note [Staged column loads]: the rows of shared-memory slots a thread of
/// this spec's column-sum kernel copies ahead through, at most `wanted` (2-4),
/// or 0 for loads into registers (16-bit full inputs only; none where two
/// rows' slots pass 48 KB a block).
int column_sum_stages(const KernelSpec& spec, const ElementwiseTile& resolved, int wanted);
/// Whether staging pays on this GPU: NVIDIA, and each multiprocessor must
/// take 16 DRAM bytes a clock or more (Note [Staged column loads]).
bool staged_column_loads_pay(std::string_view target, const DeviceInfo& device);
/// Whether a spec's one output is a column sum and nothing draws: a bias's
/// gradient alone, a kernel that only reads (Note [Threads an SM for a sum alone]).
bool sums_alone(const KernelSpec& spec);
/// Threads a multiprocessor for a column sum alone: the most of 2048, 1024 and
/// 512 that give each thread at least 96 of the M*N elements, else 256
/// (Note [Threads an SM for a sum alone]).
int column_sum_threads_an_sm(const Shape& shape, int multiprocessors);
/// The column-sum kernel's tile when none is asked for, vec resolved: 256
/// threads of 16-byte vectors loading into registers, or where staging pays
/// and the shape's rows are whole vectors: a sum alone on the threads an SM
/// its size fills, in registers (Note [Threads an SM for a sum alone]); else
/// 512 threads of one block an SM up to two waves of column tiles, with three
/// rows of slots where they fit 48 KB, else two (16-bit), or two 16-byte
/// vectors a row (f32, where 512 threads an SM have work enough); 256 threads
/// with three rows of slots where 512 threads' two would pass 48 KB (Note
/// [Staged column loads]).
ElementwiseTile default_column_sum_tile(const KernelSpec& spec, const Shape& shape, std::string_view target,
                                        const DeviceInfo& device);
/// What the emitted kernel stages: the tile's stages on the vector-only
/// path, 0 on a path with a scalar branch.
int emitted_column_sum_stages(const ElementwisePlan& e);
/// The block's shape and the grid of column tiles x row slices: a warp across
/// the columns, the block's warps down the rows; as many blocks as
/// `multiprocessors` hold at the tile's occupancy (rounded down to whole
/// column tiles; at least one slice), never more slices than row steps
/// (ceil(M / rows_per_step)).
ColumnGrid column_grid(const ElementwiseTile& resolved, const Shape& shape, int multiprocessors);
/// The workspace of `sums` column sums: one arrival counter per column tile
/// (zeroed) and sums x slices x tiles x TN fp32 partials, for the largest grid
/// any GPU up to k_column_sum_max_multiprocessors gets.
WorkspaceNeeds column_sum_workspace(const ElementwiseTile& resolved, const Shape& shape, std::size_t sums);

/// The grid of the flat kernel over strided rows (Note [Strided rows]): the
/// column-sum kernel's block, all column tiles (the kernel strides over more
/// than 2^31 - 1), and row slices covering the rows, or with a tile's
/// blocks_per_sm as many as the multiprocessors hold (at least one, at most
/// 65535: the kernel strides over the rest).
ColumnGrid strided_rows_grid(const ElementwiseTile& resolved, const Shape& shape, int multiprocessors);

/// Which code a kernel walking rows carries (the column-sum kernel, and the
/// flat kernel over strided rows). A lane's VEC columns are one aligned vector
/// of every full row only when N % VEC == 0; then the vector path runs unless
/// a general kernel finds a misaligned pointer or ld (p.vectorized == 0).
struct ColumnPaths {
  bool vector = false, scalar = false;
};
ColumnPaths column_paths(const ElementwisePlan& e);
/// `vector` and `scalar` as the paths say: one of them, or both behind a branch on `whole`.
std::string column_branch(const ColumnPaths& c, const std::string& vector, const std::string& scalar,
                          const std::string& indent);
/// Where a kernel finds full tensor t's first element of the lane's vector in
/// row `row` (the flat kernel's r0, a walking kernel's row): `e0` (row * N + c0) when dense, `row * p.ld_<field> + c0`
/// when strided (Note [Strided rows]).
std::string full_offset(const TensorPlan& t, std::string_view row);
/// The dropout draws of a lane's vector at element index e0 (the [M,N]
/// place), the stores of its full outputs (those `sums` does not mark) in
/// row `row` (an output that passes a full input through is stored from that
/// input's vector, `<field>_v<input_row>`: Note [Outputs that pass an input
/// through]), and the alignment a tensor's accesses need: shared by both
/// walking kernels.
std::string column_walk_draws(const ElementwisePlan& e, const ColumnPaths& c);
/// A walking kernel's row and scalar inputs, the same at every row: loaded once
/// before the rows, at `indent`, each vector load behind `guard` (or none).
std::string column_walk_row_loads(const ElementwisePlan& e, const ColumnPaths& c, const std::string& indent,
                                  std::string_view guard);
std::string column_walk_stores(const ElementwisePlan& e, const ColumnPaths& c, const std::vector<bool>& sums,
                               std::string_view row, std::string_view input_row);
int column_walk_alignment(const ElementwisePlan& e, const ColumnPaths& c, const TensorPlan& t);

/// Tests only: generate 64-bit indexing for every shape, so the GPU suite
/// covers that path without tensors of 2^30 elements.
void force_index64_for_tests(bool on);

/// The epilogue call per element j of the vector, after the declaration of
/// the outputs' VEC-element arrays: each argument of the contract is element j
/// of its loaded vector (`input(k)` spells input k's), draw array or output
/// array. `indent` is the loop's; its body is indented two more spaces. Both
/// kernels of the family emit it.
std::string emit_vector_epilogue(const ElementwisePlan& plan, const EpilogueContract& contract,
                                 const std::function<std::string(std::size_t)>& input, std::string_view indent);

// The family's passes.
ElementwisePlan choose_vector_width(const KernelPlan& plan);
KernelSource emit_elementwise(const ElementwisePlan& plan);
KernelSource emit_column_sums(const ElementwisePlan& plan);
KernelSource emit_elementwise_rows(const ElementwisePlan& plan);

}  // namespace epifuse
