// The row family's default tile: the tile a chain gets without `epifuse tune`
// (Note [Default row tile]), pinned by tests/unit/test_row_default_tile.cpp.
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "codegen/row/row.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

namespace {

int full_outputs(const KernelSpec& spec) {
  const auto& outputs = spec.graph.outputs();
  return static_cast<int>(std::count_if(outputs.begin(), outputs.end(), [&](const Output& o) {
    return spec.graph.node(o.value).broadcast == Broadcast::full;
  }));
}

std::int64_t full_input_bytes(const KernelSpec& spec) {
  std::int64_t bytes = 0;
  for (const Node& node : spec.graph.nodes())
    if (node.kind == NodeKind::input && node.broadcast == Broadcast::full) bytes += size_of(node.dtype);
  return bytes;
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Threads a block for x vectors: whole warps, in [lo, hi] (both multiples of 32).
int block_threads(std::int64_t x, int lo, int hi) {
  return static_cast<int>(std::clamp<std::int64_t>(ceil_div(x, 32) * 32, lo, hi));
}

// Note [Default row tile]
// The tile a chain gets without `epifuse tune`, from the row's bytes and the
// device's shared memory (DeviceInfo), in three classes measured apart
// (docs/perf/rows.md, "Default tiles"):
//  - plain rows: a one-stage ring, one block per row (s1b), the row split over
//    the fewest blocks of a cluster whose part fits a third of a block's shared
//    memory, so that three rings a multiprocessor are in flight, two vectors a
//    thread or more; rows of up to 256 vectors in registers, one block per row;
//    rows whose part at 16 blocks still overflows the third, in registers
//    across the 16 blocks. Dropout draws after the reductions whose kept values
//    fit the ring's bytes (the forward attention pattern) take the same tile
//    with kr;
//  - rows whose draws a row reduction reads (the attention backward's dropout
//    of dy): 32 elements a thread (2 vectors for short rows), the values later
//    stages read kept in registers (k), and a second ring stage on a
//    persistent grid where two fit in shared memory;
//  - rows with column sums (a persistent grid, Note [Column sums]): one vector
//    a thread for rows of 512 to 2,048 vectors, else two, whose column
//    accumulators set the threads a block (1024 where they leave room in 64
//    registers a thread, else 512), a cluster for the rest of the row, two ring
//    stages where they take at most 60% of shared memory.
// Off sm_90 (no clusters or rings), for rows under 128 vectors, and where the
// class's tile does not fit the shape, the plain default (RowTile{}).
constexpr int k_registers_per_multiprocessor = 65536;  // every NVIDIA GPU from sm_50 to sm_120
constexpr int k_registers_besides_sums = 48;           // a column-sum kernel's registers a thread besides its accumulators

// Whether a row reduction reads a dropout's result (the attention backward's
// dropout of dy): the draws then come before the row's first barrier.
bool draws_before_reduction(const Graph& graph) {
  std::vector<bool> drawn(graph.nodes().size(), false);
  for (std::size_t i = 0; i < graph.nodes().size(); ++i) {
    const Node& node = graph.nodes()[i];
    if (node.kind != NodeKind::op) continue;
    drawn[i] = node.op == OpKind::dropout ||
               std::any_of(node.args.begin(), node.args.end(), [&](Value a) { return drawn[a.id]; });
    if (drawn[i] && is_row_reduction(node.op)) return true;
  }
  return false;
}

int clusters_at_least(std::int64_t x) {
  int c = 1;
  while (c < 16 && c < x) c *= 2;
  return c;
}

RowTile default_plain_tile(const KernelSpec& spec, const Shape& shape, int vec, std::int64_t shared, bool ring_only) {
  const std::int64_t n = shape.n, vectors = n / vec, bytes = full_input_bytes(spec);
  RowTile t;
  t.vec = vec;
  t.persistent = 0;
  if (vectors <= 256 && !ring_only) {
    t.threads = block_threads(vectors, 128, 512);
    return t;  // regs -1: resolved by the caller, streaming if the row does not fit
  }
  while (t.cluster < 16 && n * bytes / t.cluster * 3 > shared) t.cluster *= 2;
  const std::int64_t part = vectors / t.cluster;
  if (part * vec * bytes * 3 > shared) {
    // Even 16 blocks' parts leave one ring a multiprocessor: registers across the cluster.
    t.threads = block_threads(part / 4, 128, 1024);
    t.regs = static_cast<int>(ceil_div(part, t.threads));
    t.persistent = 1;
    if (std::int64_t{t.regs} * vec * full_inputs(spec) > k_register_floats) t.regs = 0;  // refused by the caller
    return t;
  }
  t.threads = block_threads(part / 2, 128, 512);
  t.regs = static_cast<int>(ceil_div(part, t.threads));
  t.ring = 1;
  return t;
}

RowTile default_draws_tile(const KernelSpec& spec, const Shape& shape, int vec, std::int64_t shared) {
  const std::int64_t vectors = shape.n / vec;
  const int per_thread = vectors <= 1024 ? 2 : std::max(1, 32 / vec);
  RowTile t;
  t.vec = vec;
  t.cluster = clusters_at_least(ceil_div(vectors, std::int64_t{512} * per_thread));
  const std::int64_t part = vectors / t.cluster;
  t.threads = block_threads(part / per_thread, 128, 512);
  t.regs = static_cast<int>(ceil_div(part, t.threads));
  const std::int64_t ring = std::int64_t{t.threads} * vec * t.regs * full_input_bytes(spec);
  const bool two = part * vec >= 8192 && 2 * ring <= shared;
  t.ring = two ? 2 : 1;
  t.persistent = two ? 1 : 0;
  t.keep = row_keeps_values(spec.graph) ? 1 : 0;
  return t;
}

RowTile default_col_sum_tile(const KernelSpec& spec, const Shape& shape, int vec, std::int64_t shared) {
  const std::int64_t n = shape.n, vectors = n / vec, bytes = full_input_bytes(spec);
  // Rows of 512 to 2,048 vectors: one vector a thread, 512 or 1,024 threads a
  // block or two, each thread's columns summed in few registers (layernorm's
  // bf16 backward at 16,384 took 1,024 threads two vectors each, 32 sums in
  // 64 registers, and spilled: 11% slower than one vector on a cluster of two).
  // Where one vector a thread needs a cluster (1,024 to 2,048 vectors), a row
  // writes one [M,N] output and one block of two a thread holds it, that
  // block, with the column tree in the ring's shared memory (t, below; Note
  // [Default column tree and keep]), if its two ring stages hold the tree.
  const bool one_block_rows = vectors > 1024 && vectors <= 2048 && n * bytes <= 64 * 1024 && full_outputs(spec) == 1;
  auto shaped = [&](int per_thread) {
    const int accumulators = count_ops(spec, OpKind::col_sum) * per_thread * vec;
    const int widest = k_registers_besides_sums + accumulators <= k_registers_per_multiprocessor / 1024 ? 1024 : 512;
    RowTile t;
    t.vec = vec;
    // With two vectors a thread, a row that one block's ring holds takes no
    // cluster (as tile_candidates).
    t.cluster = per_thread == 2 && n * bytes <= 64 * 1024
                    ? 1
                    : clusters_at_least(ceil_div(vectors, std::int64_t{widest} * per_thread));
    const std::int64_t part = vectors / t.cluster;
    t.threads = block_threads(part / per_thread, 128, t.cluster == 1 ? 1024 : widest);
    t.regs = static_cast<int>(ceil_div(part, t.threads));
    const std::int64_t ring = std::int64_t{t.threads} * vec * t.regs * bytes;
    t.ring = 2 * ring * 10 <= shared * 6 ? 2 : 1;
    t.persistent = 1;
    // Where one stage is all that fits and a row writes one [M,N] output, its
    // copy in quarter-row pieces, five slots (Note [Ring pieces]): a quarter of
    // the next row lands while this one is reduced. Layernorm's backward took
    // 0.81x the one-stage ring's time in f32 at 262,144 and 1.00x in bf16 at
    // 524,288; add+RMSNorm's, which writes two, 1.04x in f32 at 262,144 (and
    // 0.93x in bf16 at 524,288: one point, left to the tuner). H100, 2026-11-27,
    // docs/row-reductions.md ("Ring pieces").
    const int pieces = t.regs % 4 == 0 ? 4 : t.regs % 2 == 0 ? 2 : 0;
    if (t.ring == 1 && pieces > 0 && full_outputs(spec) == 1 && ring / pieces * (pieces + 1) <= shared) {
      t.pieces = pieces;
      t.ring = pieces + 1;
    }
    return t;
  };
  // The tree in the ring's bytes: two stages that hold the block's sums.
  auto tree_fits = [&](const RowTile& t) {
    const RowTile r = resolve_row_tile(spec, shape, t);
    return t.ring == 2 && ring_bytes(spec, r) >= col_sum_bytes(spec, r);
  };
  RowTile t = shaped(vectors >= 512 && vectors <= 2048 && !one_block_rows ? 1 : 2);
  const bool one_block = one_block_rows && tree_fits(t);
  if (one_block_rows && !one_block) t = shaped(1);
  // Note [Default column tree and keep]: measured with `tools/perf/row_tune.sh`
  // and the old tile against the new in one process, two rounds, on the
  // example backward chains and the specs Python's grad() makes (H200,
  // 2026-11-29; docs/perf/backward.md, "Built: the column tree and keep by
  // default"). Times over the old default:
  //  - keep (k), on one block or a cluster of two, for a chain with one [M,N]
  //    output and values to keep: layernorm's backward 0.89-0.95x in bf16 up
  //    to 8,192, 0.98-0.99x in f32 up to 4,096 and 0.91-0.93x at 16,384;
  //    add+RMSNorm's (two outputs) took up to 1.3x with it; not on a ring in
  //    pieces (below): add+RMSNorm's with dresidual left out, as the torch op
  //    runs it, took 1.13x the pieces alone in f32 at 16,384 (H200,
  //    2026-11-29, docs/perf/backward.md, "add+RMSNorm's two equal gradients");
  //  - the one block above with the tree: layernorm's 0.85-0.92x in bf16 at
  //    16,384 and 0.93-0.95x in f32 at 8,192; add+RMSNorm's f32 1.05x (so one
  //    output only);
  //  - 512-thread blocks of two vectors a thread on a cluster of more than
  //    two: the tree and the registers of two blocks a multiprocessor (m2t),
  //    bf16 layernorm's at 65,536 0.89-0.93x. The tree alone gave 0.85x on
  //    one spec and 1.05x on the other; at 1,024 threads or four vectors a
  //    thread it moved 1-2% either way, and the bound spilled (1.6x).
  if (one_block) {
    t.tree = 1;
  } else if (t.cluster > 2 && t.threads == 512 && t.regs == 2 && tree_fits(t)) {
    t.tree = 1;
    t.min_blocks = 2;
  } else if (t.cluster <= 2 && t.pieces == 0 && full_outputs(spec) == 1 && row_keeps_values(spec.graph)) {
    t.keep = 1;
  }
  return t;
}

}  // namespace

std::optional<RowTile> default_row_tile(const KernelSpec& spec, const Shape& shape, std::string_view target,
                                        const DeviceInfo& device) {
  if (!cluster_target(target) || device.shared_per_block == 0) return std::nullopt;
  const std::int64_t shared = device.shared_per_block;
  const int vec = resolve_row_tile(spec, shape, RowTile{}).vec;
  if (shape.n / vec < 128) return std::nullopt;
  RowTile t;
  if (row_col_sums(spec)) {
    t = default_col_sum_tile(spec, shape, vec, shared);
  } else if (draws_before_reduction(spec.graph)) {
    t = default_draws_tile(spec, shape, vec, shared);
  } else if (count_ops(spec, OpKind::dropout) > 0 && ring_holds_kept_values(spec.graph, vec)) {
    t = default_plain_tile(spec, shape, vec, shared, true);
    if (t.ring > 0) t.keep = 2;
  } else {
    t = default_plain_tile(spec, shape, vec, shared, false);
  }
  if (t.regs == 0) return std::nullopt;
  const RowTile r = resolve_row_tile(spec, shape, t);
  if (r.regs <= 0 || r.regs > 32 || row_shape_class(spec, r, shape) != "row" || !ring_vectors_fit(spec, r) ||
      ring_bytes(spec, r) > shared || (r.cluster > 1 && shape.n % r.cluster != 0))
    return std::nullopt;
  return r;
}

}  // namespace epifuse
