#pragma once
// The elementwise kernel family (Note [Kernel families]): a grid-stride loop
// in which each thread loads VEC consecutive elements of every full tensor with
// 16-byte accesses, runs the epilogue on each, and stores. Its passes, in
// order: choose_vector_width, then emit_elementwise (templates/elementwise.cu.in).
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
};

/// The block-size and vector-width ranges every tile of threads over vectors
/// obeys (elementwise and row tiles): UserError "<what>: ..." otherwise.
void check_threads_and_vec(std::string_view what, int threads, int vec);
/// 16 bytes of the narrowest full tensor, in elements.
int natural_vector_width(const KernelSpec& spec);
/// The tile with vec decided: `tile.vec`, else 16 bytes of the narrowest full
/// tensor; at least 4 (one Philox call) when the graph tests dropout draws.
ElementwiseTile resolve_elementwise_tile(const KernelSpec& spec, ElementwiseTile tile);
/// What the code is specialised for besides the spec and tile: "row_aligned" or
/// "row_unaligned" (N % vec), then "/i32" or "/i64" (index width), then
/// "/ragged" when M*N % vec != 0 (row_aligned shapes never are).
std::string_view elementwise_shape_class(const ElementwiseTile& resolved, const Shape& shape);
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

// Which outputs are sums: column_sum_outputs and has_column_sums (codegen/column_sums.hpp).

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

}  // namespace epifuse
