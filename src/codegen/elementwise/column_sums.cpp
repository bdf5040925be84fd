// The column-sum kernel's planning (Note [Column sums] in elementwise.hpp):
// the grid of column tiles x row slices, and the workspace that grid needs.
#include <algorithm>

#include "codegen/column_sums.hpp"
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

int column_sum_stages(const KernelSpec& spec, const ElementwiseTile& resolved, int wanted) {
  if (wanted < 2 || column_sum_rows_in_flight(resolved) != 1) return 0;
  int full = 0;
  for (auto id : spec.graph.inputs()) {
    const Node& n = spec.graph.node(id);
    if (n.broadcast != Broadcast::full) continue;
    if (static_cast<std::size_t>(resolved.vec) * size_of(n.dtype) != 16) return 0;
    ++full;
  }
  if (full == 0) return 0;
  constexpr int k_max_bytes = 48 * 1024;  // a block's slots: its static shared memory (red reuses them)
  for (int stages = wanted; stages >= 2; --stages)
    if (stages * full * resolved.threads * 16 <= k_max_bytes) return stages;
  return 0;
}

bool staged_column_loads_pay(std::string_view target, const DeviceInfo& device) {
  return feeds_16_bytes_an_sm_clock(target, device);  // Note [Staged column loads]
}

int column_sum_threads_an_sm(const Shape& shape, int multiprocessors) {
  // Note [Threads an SM for a sum alone]: each thread at least 96 elements.
  constexpr std::int64_t k_elements_a_thread = 96;
  const std::int64_t sms = std::max(multiprocessors, 1);
  for (std::int64_t threads : {2048, 1024, 512})
    if (shape.m * shape.n >= sms * threads * k_elements_a_thread) return static_cast<int>(threads);
  return 256;
}

bool sums_alone(const KernelSpec& spec) {
  return spec.graph.outputs().size() == 1 && column_sum_count(spec) == 1 && !draws_dropout(spec);
}

ElementwiseTile default_column_sum_tile(const KernelSpec& spec, const Shape& shape, std::string_view target,
                                        const DeviceInfo& device) {
  const ElementwiseTile plain = resolve_elementwise_tile(spec, ElementwiseTile{});
  if (!staged_column_loads_pay(target, device) || shape.n % plain.vec != 0) return plain;
  const int threads_an_sm = column_sum_threads_an_sm(shape, device.multiprocessors);
  if (sums_alone(spec)) {  // Note [Threads an SM for a sum alone]: registers, no stages
    ElementwiseTile t = plain;
    t.threads = std::min(threads_an_sm, 1024);
    t.blocks_per_sm = threads_an_sm / t.threads;
    return t;
  }
  // 512 threads of one block an SM, where that grid is at most two waves of
  // column tiles (Note [Staged column loads]).
  const auto one_block_an_sm = [&](ElementwiseTile t) {
    t.blocks_per_sm = 1;
    const std::int64_t waves = ceil_div(column_grid(t, shape, device.multiprocessors).column_tiles,
                                        std::max(device.multiprocessors, 1));
    if (waves > 2) t.blocks_per_sm = 0;
    return t;
  };
  // 16-bit: three rows of slots where they fit, else two (the vector width
  // does not depend on the threads).
  ElementwiseTile wide = plain;
  wide.threads = 512;
  if (const int stages = column_sum_stages(spec, wide, 3); stages >= 2) {
    wide.stages = stages;
    return one_block_an_sm(wide);
  }
  // f32: two 16-byte vectors a row in registers, no stages, where 512 threads
  // an SM have work enough (one vector below that).
  if (plain.vec == 4 && shape.n % 8 == 0) {
    if (threads_an_sm >= 512) wide.vec = 8;
    wide = one_block_an_sm(wide);
    return wide.blocks_per_sm == 1 ? wide : plain;
  }
  ElementwiseTile narrow = plain;  // more 16-bit inputs: 256 threads, fewer bytes of slots a block
  narrow.stages = column_sum_stages(spec, narrow, 3);
  return narrow;
}

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
