// The column-sum kernel's planning (Note [Column sums] in elementwise.hpp):
// the grid of column tiles x row slices, and the workspace that grid needs.
#include <algorithm>

#include "codegen/elementwise/elementwise.hpp"
#include "epifuse/errors.hpp"

namespace epifuse {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

int column_sum_blocks_per_sm(const ElementwiseTile& resolved) {
  const int most = std::max(1, 2048 / resolved.threads);
  return resolved.blocks_per_sm > 0 ? std::min(resolved.blocks_per_sm, most) : std::max(1, 1024 / resolved.threads);
}

// Two rows of 4-element vectors hold as many loads as one of 8, which the
// registers of half a multiprocessor's threads allow; two of 8 spilled.
int column_sum_rows_in_flight(const ElementwiseTile& resolved) { return resolved.vec <= 4 ? 2 : 1; }

ColumnGrid column_grid(const ElementwiseTile& resolved, const Shape& shape, int multiprocessors) {
  EPIFUSE_ASSERT(resolved.vec > 0 && resolved.threads % 32 == 0, "column_grid needs a resolved tile");
  ColumnGrid g;
  // A warp across the columns, the block's warps on rows: measured on an
  // H100, the whole block across a row (4-16 KB runs) was slower (f32 93 ->
  // 90%, bf16 88 -> 81% of copy) than a warp's 512-byte to 1 KB runs.
  g.lanes = 32;
  g.rows_per_step = resolved.threads / g.lanes;
  g.tile_columns = g.lanes * resolved.vec;
  g.column_tiles = ceil_div(shape.n, g.tile_columns);
  const int sms = std::clamp(multiprocessors, 1, k_column_sum_max_multiprocessors);
  const std::int64_t resident = std::int64_t{sms} * column_sum_blocks_per_sm(resolved);
  const std::int64_t row_groups = ceil_div(shape.m, g.rows_per_step);
  // gridDim.y is at most 65535.
  g.row_slices = std::clamp<std::int64_t>(resident / std::max<std::int64_t>(g.column_tiles, 1), 1,
                                          std::min<std::int64_t>(std::max<std::int64_t>(row_groups, 1), 65535));
  return g;
}

ColumnGrid strided_rows_grid(const ElementwiseTile& resolved, const Shape& shape, int multiprocessors) {
  EPIFUSE_ASSERT(resolved.vec > 0 && resolved.threads % 32 == 0, "strided_rows_grid needs a resolved tile");
  ColumnGrid g;
  g.lanes = 32;  // the column-sum kernel's block (column_grid)
  g.rows_per_step = resolved.threads / g.lanes;
  g.tile_columns = g.lanes * resolved.vec;
  g.column_tiles = std::min<std::int64_t>(ceil_div(shape.n, g.tile_columns), 0x7fffffff);
  std::int64_t slices = ceil_div(shape.m, g.rows_per_step);
  if (resolved.blocks_per_sm > 0)
    slices = std::min(slices, std::int64_t{std::max(multiprocessors, 1)} * resolved.blocks_per_sm /
                                  std::max<std::int64_t>(g.column_tiles, 1));
  g.row_slices = std::clamp<std::int64_t>(slices, 1, 65535);
  return g;
}

WorkspaceNeeds column_sum_workspace(const ElementwiseTile& resolved, const Shape& shape, std::size_t sums) {
  const ColumnGrid g = column_grid(resolved, shape, k_column_sum_max_multiprocessors);
  WorkspaceNeeds w;
  w.zeroed = static_cast<std::size_t>(g.column_tiles) * 4;
  w.scratch = sums * static_cast<std::size_t>(g.row_slices * g.column_tiles * g.tile_columns) * 4;
  return w;
}

}  // namespace epifuse
