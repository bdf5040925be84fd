// The row family's face to the pipeline (Note [Kernel families]).
#include <algorithm>
#include <bit>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "codegen/elementwise/elementwise.hpp"
#include "codegen/family.hpp"
#include "codegen/row/row.hpp"
#include "epifuse/errors.hpp"
#include "ir/limits.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

// A ring's bulk copies move 16-byte pieces: a vector of every [M,N] input is
// a multiple of 16 bytes (N odd lowers vec to 1, and then no ring fits).
bool ring_vectors_fit(const KernelSpec& spec, const RowTile& resolved) {
  if (resolved.ring == 0) return true;
  for (const Node& node : spec.graph.nodes())
    if (node.kind == NodeKind::input && node.broadcast == Broadcast::full && resolved.vec * size_of(node.dtype) % 16 != 0)
      return false;
  return true;
}

// Thread-block clusters and distributed shared memory: sm_90 and later.
bool cluster_target(std::string_view target) {
  int sm = 0;
  return target.starts_with("sm_") && std::sscanf(std::string(target.substr(3)).c_str(), "%d", &sm) == 1 && sm >= 90;
}

int full_inputs(const KernelSpec& spec) {
  int n = 0;
  for (const Node& node : spec.graph.nodes())
    if (node.kind == NodeKind::input && node.broadcast == Broadcast::full) ++n;
  return std::max(n, 1);
}

int count_ops(const KernelSpec& spec, OpKind op) {
  return static_cast<int>(std::count_if(spec.graph.nodes().begin(), spec.graph.nodes().end(),
                                        [op](const Node& n) { return n.kind == NodeKind::op && n.op == op; }));
}

namespace {

class RowFamily final : public KernelFamily {
 public:
  MainloopKind kind() const override { return MainloopKind::elementwise; }
  bool generates(const KernelSpec& spec) const override {
    return spec.mainloop.kind == MainloopKind::elementwise && row_reduction_of(spec) != nullptr;
  }
  bool by_kind() const override { return false; }

  TileConfig resolve_tile(const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& requested,
                          std::string_view target, const DeviceInfo& device) const override {
    RowTile tile;
    if (!requested)
      if (const std::optional<RowTile> chosen = default_row_tile(spec, shape, target, device))
        return resolve_tile(spec, shape, TileConfig{*chosen}, target, device);
    if (requested) {
      const auto* t = std::get_if<RowTile>(&*requested);
      EPIFUSE_CHECK(t, "tile {}: a graph with row reductions takes a row tile rTHREADSvVECxREGS[b], e.g. r256v8x2",
                    to_string(*requested));
      tile = *t;
    }
    check_threads_and_vec("row tile", tile.threads, tile.vec);
    EPIFUSE_CHECK(tile.regs >= -1 && tile.regs <= 32, "row tile: regs must be -1 (auto), 0 (stream) or up to 32, got {}",
                  tile.regs);
    EPIFUSE_CHECK(tile.persistent == 0 || tile.persistent == 1, "row tile: persistent is 0 or 1, got {}",
                  tile.persistent);
    EPIFUSE_CHECK(tile.group == 0 || (tile.group >= 1 && tile.group <= 32 && std::has_single_bit(unsigned(tile.group))),
                  "row tile {}: group (threads a row) is 0 (the whole block) or a power of two up to 32, got {}",
                  tile.str(), tile.group);
    EPIFUSE_CHECK(tile.cluster == 1 || tile.cluster == 2 || tile.cluster == 4 || tile.cluster == 8 || tile.cluster == 16,
                  "row tile {}: cluster (blocks a row) is 1, 2, 4, 8 or 16 (16: non-portable, H100 and H200), got {}",
                  tile.str(), tile.cluster);
    EPIFUSE_CHECK(tile.cluster == 1 || tile.group == 0,
                  "row tile {}: a cluster spreads a row over whole blocks; drop the group (g) or the cluster (c)",
                  tile.str());
    EPIFUSE_CHECK(tile.cluster == 1 || target.empty() || cluster_target(target),
                  "row tile {}: thread-block clusters need sm_90 or later, not {}", tile.str(), target);
    EPIFUSE_CHECK(tile.pieces == 0 || tile.pieces == 2 || tile.pieces == 4 || tile.pieces == 8,
                  "row tile {}: pieces (p) are 0 (whole rows), 2, 4 or 8, got {}", tile.str(), tile.pieces);
    EPIFUSE_CHECK(tile.pieces > 0 || (tile.ring >= 0 && tile.ring <= 4),
                  "row tile {}: ring (stages) is 0 (none) up to 4, got {}", tile.str(), tile.ring);
    EPIFUSE_CHECK(tile.pieces == 0 || (tile.ring > tile.pieces && tile.ring <= 4 * tile.pieces),
                  "row tile {}: a ring of {} pieces a row needs more slots than pieces (some of the next row in "
                  "flight) and at most four rows' worth: s{} to s{}, got s{}",
                  tile.str(), tile.pieces, tile.pieces + 1, 4 * tile.pieces, tile.ring);
    EPIFUSE_CHECK(tile.pieces == 0 || tile.keep != 2,
                  "row tile {}: kr keeps values in a whole row's ring bytes; a ring in pieces (p) frees them as it "
                  "goes: use k (registers)",
                  tile.str());
    EPIFUSE_CHECK(tile.ring == 0 || tile.group == 0,
                  "row tile {}: a shared-memory ring holds a block's row; drop the group (g) or the ring (s)", tile.str());
    EPIFUSE_CHECK(tile.ring == 0 || target.empty() || cluster_target(target),
                  "row tile {}: the shared-memory ring's bulk copies need sm_90 or later, not {}", tile.str(), target);
    EPIFUSE_CHECK(tile.ring == 0 || tile.regs != 0,
                  "row tile {}: a ring's regs size it (vectors a thread's part of a row); 0 would stream", tile.str());
    EPIFUSE_CHECK(tile.keep >= 0 && tile.keep <= 2, "row tile: keep is 0, 1 (k) or 2 (kr), got {}", tile.keep);
    EPIFUSE_CHECK(tile.keep != 2 || tile.ring > 0, "row tile {}: kr keeps values in a ring's bytes; it needs a ring (s)",
                  tile.str());
    EPIFUSE_CHECK(tile.min_blocks >= 0 && tile.min_blocks <= 32 && std::int64_t{tile.threads} * tile.min_blocks <= 2048,
                  "row tile {}: m (blocks a multiprocessor the registers leave room for) is 1 to {} for {} threads "
                  "a block (2,048 threads a multiprocessor), got {}",
                  tile.str(), 2048 / tile.threads, tile.threads, tile.min_blocks);
    EPIFUSE_CHECK(tile.min_blocks == 0 || !target.starts_with("gfx"),
                  "row tile {}: m sets CUDA's __launch_bounds__ blocks a multiprocessor; AMD targets ({}) read that "
                  "bound otherwise: drop the m",
                  tile.str(), target);
    EPIFUSE_CHECK(tile.tree == 0 || tile.tree == 1, "row tile: t is 0 or 1, got {}", tile.tree);
    EPIFUSE_CHECK(tile.tree == 0 || row_col_sums(spec),
                  "row tile {}: t moves the column sums' tree into shared memory; this chain has no col_sum output",
                  tile.str());
    EPIFUSE_CHECK(tile.tree == 0 || tile.ring > 0,
                  "row tile {}: t stages the column sums in the ring's shared memory; it needs a ring (s)", tile.str());
    RowTile resolved = resolve_row_tile(spec, shape, tile);
    if (resolved.ring > 0 && epilogue_strided(shape) && !ring_vectors_fit(spec, resolved) &&
        ring_vectors_fit(spec, resolve_row_tile(spec, Shape{shape.m, shape.n, shape.k}, tile))) {
      // Note [Strided rows]: a ring's bulk copy starts each row on 16 bytes,
      // and a strided input whose ld x element size is not a multiple of 16
      // narrowed VEC below that. The tile without the ring (its values kept
      // in registers, its items counted anew) reads the rows from global
      // memory in the narrower vectors instead of refusing the shape.
      tile.ring = 0;
      tile.pieces = 0;
      tile.tree = 0;  // staged in the ring's bytes: the tile without the ring keeps the tree in registers
      tile.keep = std::min(tile.keep, 1);
      tile.regs = -1;
      resolved = resolve_row_tile(spec, shape, tile);
    }
    if (!requested && resolved.regs == 0 && row_col_sums(spec)) {
      // The default streams this row, which cannot sum columns: the first
      // candidate instead (all of them hold the row).
      const std::vector<TileConfig> candidates = tile_candidates(spec, shape, target, device);
      EPIFUSE_CHECK(!candidates.empty(), "no row tile holds rows of N = {} for column sums on {}; the CPU reference runs "
                    "them (epifuse run --device cpu)", shape.n, target.empty() ? "this target" : target);
      return resolve_tile(spec, shape, candidates.front(), target, device);
    }
    EPIFUSE_CHECK(resolved.keep == 0 || resolved.regs > 0,
                  "row tile {}: keep (k) holds a stage's values in registers beside the row; a streaming tile (x0) "
                  "has no room for them",
                  resolved.str());
    EPIFUSE_CHECK(resolved.keep != 2 || ring_holds_kept_values(spec.graph, resolved.vec),
                  "row tile {}: the inputs' bytes cannot hold the values later stages read (they need 4 bytes an "
                  "element each, and no later stage may read an input); use k (registers)",
                  resolved.str());
    // A kernel emitted for a row it cannot hold would leave part of it out.
    const std::string_view fit = row_shape_class(spec, resolved, shape);
    EPIFUSE_CHECK(fit != "row/n_too_long",
                  "row tile {}: holds rows of up to {} columns (threads x cluster x vec x regs), not N = {}; use more regs, "
                  "x-1 (as many as N needs) or x0 (stream)",
                  resolved.str(), std::int64_t{resolved.row_threads()} * resolved.vec * resolved.regs, shape.n);
    EPIFUSE_CHECK(fit != "row/n_not_ring",
                  "row tile {}: a ring splits a row evenly between the cluster's {} blocks in whole vectors of {}; "
                  "N = {} does not split so",
                  resolved.str(), resolved.cluster, resolved.vec, shape.n);
    EPIFUSE_CHECK(resolved.ring == 0 || resolved.regs > 0,
                  "row tile {}: N = {} needs more than 32 vectors a thread in this ring; use more threads or a cluster",
                  resolved.str(), shape.n);
    EPIFUSE_CHECK(resolved.regs > 0 || !row_col_sums(spec),
                  "row tile {}: N = {} streams on this tile (x0), which cannot sum columns; the [N] outputs need a tile "
                  "that holds the row: more regs, a ring (s) or a cluster (c)",
                  resolved.str(), shape.n);
    EPIFUSE_CHECK(resolved.tree == 0 || ring_bytes(spec, resolved) >= col_sum_bytes(spec, resolved),
                  "row tile {}: t stages the block's column sums ({} bytes) in the ring's {} bytes, which do not hold "
                  "them; use more ring stages (s) or drop the t",
                  resolved.str(), col_sum_bytes(spec, resolved), ring_bytes(spec, resolved));
    EPIFUSE_CHECK(resolved.pieces == 0 || resolved.regs % resolved.pieces == 0,
                  "row tile {}: {} pieces split a thread's {} vectors of the row unevenly; use a regs that {} divides",
                  resolved.str(), resolved.pieces, resolved.regs, resolved.pieces);
    EPIFUSE_CHECK(ring_vectors_fit(spec, resolved),
                  "row tile {}: a ring copies 16-byte pieces; N = {} needs a vector of 16 bytes of every [M,N] input",
                  resolved.str(), shape.n);
    return resolved;
  }

  std::string_view shape_class(const KernelSpec& spec, const TileConfig& resolved, const Shape& shape) const override {
    const std::string_view c = row_shape_class(spec, std::get<RowTile>(resolved), shape);
    if (!epilogue_strided(shape)) return c;
    // Note [Strided rows]: the strided tensors' flags, built once per process.
    return interned_shape_class(std::string(c) + tensor_ld_flags(shape));
  }

  KernelPath path_for(const KernelSpec&, const TileConfig&, const Shape&) const override {
    return KernelPath::fastest;
  }

  // Rows in registers (Note [Row tiles]): small groups for short rows, whole
  // blocks at four sizes (the tuner finds the occupancy that hides a
  // reduction's latency), clusters for long rows on sm_90; streaming as the
  // fallback for rows that fit nowhere. Each in both grids: persistent, and
  // one block per row, which measured faster for some short rows.
  std::vector<TileConfig> tile_candidates(const KernelSpec& spec, const Shape& shape, std::string_view target,
                                          const DeviceInfo&) const override {
    std::vector<RowTile> base;
    for (int g : {8, 16, 32}) base.push_back(RowTile{256, 0, -1, 1, g, 1});
    for (int t : {128, 256, 512, 1024}) base.push_back(RowTile{t, 0, -1, 1});
    if (target.empty() || cluster_target(target))
      for (int c : {2, 4, 8, 16})
        for (int t : {512, 1024}) base.push_back(RowTile{t, 0, -1, 1, 0, c});
    base.push_back(RowTile{256, 0, 0, 1});
    base.push_back(RowTile{1024, 0, 0, 1});
    // Shared-memory rings, the next rows in flight while one is reduced: at
    // most ~200 KB of a multiprocessor's 227, and some work for every thread.
    std::vector<RowTile> rings;
    if (target.empty() || cluster_target(target))
      for (int t : {128, 256, 512, 1024})
        for (int c : {1, 2, 4, 8, 16})
          for (int stages : {1, 2, 3})  // one stage: one block per row, the other blocks of the multiprocessor in flight
            rings.push_back(RowTile{t, 0, -1, stages > 1 ? 1 : 0, 0, c, stages});
    // Keep (k) variants where a later stage uses a value an earlier one computes.
    const bool keeps = row_keeps_values(spec.graph);
    // Column sums need the row in registers or a ring, and a persistent grid
    // (geometry: a partial row per unit, Note [Column sums]).
    const bool sums = row_col_sums(spec);
    std::vector<TileConfig> out;
    std::vector<RowTile> seen;
    for (const RowTile& b : base) {
      const RowTile r = resolve_row_tile(spec, shape, b);
      // Only the two streaming tiles stream: a register tile that resolved to
      // streaming (the row is too long for it) would repeat them.
      if (r.regs == 0 && b.regs != 0) continue;
      if (r.regs == 0 && sums) continue;
      // A group or cluster that half the row would keep busy leaves threads
      // idle: the narrower one is also a candidate.
      if ((b.group > 0 || b.cluster > 1) && std::int64_t{b.row_threads()} * r.vec >= 2 * shape.n) continue;
      for (int keep : {0, 1}) {
        if (keep && (r.regs == 0 || !keeps)) continue;
        for (int persistent : {1, 0}) {
          if (sums && persistent == 0) continue;
          RowTile t = r;
          t.persistent = persistent;
          t.keep = keep;
          if (std::find(seen.begin(), seen.end(), t) != seen.end()) continue;
          seen.push_back(t);
          out.push_back(t);
        }
      }
    }
    for (const RowTile& b : rings) {
      const RowTile r = resolve_row_tile(spec, shape, b);
      if (!ring_vectors_fit(spec, r) || row_shape_class(spec, r, shape) != "row") continue;
      const std::int64_t chunk = shape.n / b.cluster;
      if (chunk < std::int64_t{b.threads} * r.vec || r.regs == 0) continue;  // idle threads, or over 32 vectors a thread
      if (ring_bytes(spec, r) > 200 * 1024) continue;
      if (b.cluster > 1 && ring_bytes(spec, r) * b.cluster / b.ring <= 64 * 1024) continue;  // one block holds it
      RowTile rp = r;
      if (sums) rp.persistent = 1;
      if (sums && std::find_if(out.begin(), out.end(), [&](const TileConfig& t) { return t == TileConfig{rp}; }) != out.end())
        continue;
      out.push_back(rp);
      if (sums && rp.ring == 2 && ring_bytes(spec, rp) >= col_sum_bytes(spec, rp)) {
        // The column tree in the ring's bytes, and for 512-thread blocks the
        // registers of two or three a multiprocessor: what measured fastest at
        // some lengths and slowest at others (docs/perf/backward.md, "Measured:
        // what the column sums cost the norms"), so the tuner's to choose.
        RowTile tr = rp;
        tr.tree = 1;
        out.push_back(tr);
        if (rp.threads == 512)
          for (int m : {2, 3}) {
            tr.min_blocks = m;
            out.push_back(tr);
          }
      }
      if (rp.ring == 1)  // the one stage in pieces (Note [Ring pieces])
        for (const auto& [pieces, slots] : {std::pair{2, 3}, std::pair{4, 5}, std::pair{4, 6}}) {
          RowTile pc = rp;
          pc.pieces = pieces;
          pc.ring = slots;
          if (pc.regs % pieces == 0 && ring_bytes(spec, pc) <= 200 * 1024) out.push_back(pc);
        }
      if (keeps) {
        RowTile k = rp;
        k.keep = 1;
        out.push_back(k);
        k.keep = 2;
        if (ring_holds_kept_values(spec.graph, r.vec)) out.push_back(k);
      }
    }
    return out;
  }

  KernelSource emit(KernelPlan& plan) const override {
    plan.shape_class = shape_class(*plan.spec, plan.tile, plan.shape);
    const RowPlan r = plan_row(plan);
    plan.kernel_name = kernel_name(plan);
    return emit_row(r);
  }

  LaunchGeometry geometry(const KernelSource& source, const Shape& shape, int) const override {
    const auto& tile = std::get<RowTile>(source.tile);
    LaunchGeometry g;
    g.block[0] = static_cast<unsigned>(tile.threads);
    g.grid_multiple = static_cast<unsigned>(tile.cluster);
    g.shared_bytes = static_cast<unsigned>(source.shared_bytes);
    const std::int64_t rows_per_block = tile.threads / tile.group_threads();
    const std::int64_t blocks = (shape.m + rows_per_block - 1) / rows_per_block * tile.cluster;
    if (has_col_sums(source))  // a persistent grid of at most the units the workspace holds (Note [Column sums])
      g.persistent_work = std::min(blocks, col_sum_units(tile, shape) * tile.cluster);
    else if (tile.persistent)
      g.persistent_work = blocks;
    else  // the kernel's loop takes the rows beyond the grid's limit
      g.grid[0] = static_cast<unsigned>(std::min<std::int64_t>(blocks, 0x7fffffff / tile.cluster * tile.cluster));
    return g;
  }

  // Note [Column sums]: the tree's counters (zeroed, left zero) and a partial
  // row of N floats per row unit and [N] output.
  WorkspaceNeeds workspace(const KernelSource& source, const Shape& shape) const override {
    if (!has_col_sums(source)) return {};
    const auto& tile = std::get<RowTile>(source.tile);
    const std::int64_t units = col_sum_units(tile, shape);
    WorkspaceNeeds w;
    w.zeroed = static_cast<std::size_t>(col_sum_counters(units) * tile.cluster) * sizeof(unsigned);
    w.scratch = static_cast<std::size_t>(units) * static_cast<std::size_t>(shape.n) * source.outputs.size() * sizeof(float);
    return w;
  }

 private:
  static bool has_col_sums(const KernelSource& source) {
    return std::any_of(source.params.begin(), source.params.end(),
                       [](const ParamField& f) { return f.role == ParamRole::workspace; });
  }
};

}  // namespace

bool has_row_reduction(const KernelSpec& spec) {
  return std::any_of(spec.graph.nodes().begin(), spec.graph.nodes().end(),
                     [](const Node& n) { return n.kind == NodeKind::op && is_row_reduction(n.op); });
}

RowTile resolve_row_tile(const KernelSpec& spec, const Shape& shape, RowTile tile) {
  if (tile.vec == 0) tile.vec = natural_vector_width(spec);  // 16 bytes of the narrowest full tensor
  // A vector never straddles rows: lower vec until it divides N (1 always does),
  // nor starts off a strided row's alignment (Note [Strided rows]; a dense
  // shape's rows start on N, which a vec dividing N takes).
  const std::int64_t n = std::max<std::int64_t>(shape.n, 1);
  const bool strided = epilogue_strided(shape);
  while (tile.vec > 1 && (n % tile.vec != 0 || (strided && !row_starts_take(spec, shape, tile.vec)))) tile.vec /= 2;
  if (tile.regs < 0) {
    const std::int64_t per_pass = std::int64_t{tile.row_threads()} * tile.vec;
    const std::int64_t items = (n + per_pass - 1) / per_pass;
    // A ring holds the row in shared memory: no register limit (its bytes are checked at load).
    // Either way at most 32 vectors a thread (the loops over them are unrolled).
    const bool fits = tile.ring > 0 || items * tile.vec * full_inputs(spec) <= k_register_floats;
    tile.regs = fits && items <= 32 ? static_cast<int>(items) : 0;
  }
  return tile;
}

std::int64_t ring_bytes(const KernelSpec& spec, const RowTile& resolved) {
  if (resolved.ring == 0) return 0;
  std::int64_t per_element = 0;
  for (const Node& node : spec.graph.nodes())
    if (node.kind == NodeKind::input && node.broadcast == Broadcast::full) per_element += size_of(node.dtype);
  const std::int64_t row = std::int64_t{resolved.threads} * resolved.vec * std::max(resolved.regs, 0) * per_element;
  return resolved.pieces > 0 ? resolved.ring * (row / resolved.pieces) : resolved.ring * row;
}

std::int64_t col_sum_bytes(const KernelSpec& spec, const RowTile& resolved) {
  return std::int64_t{count_ops(spec, OpKind::col_sum)} * resolved.threads * resolved.vec * std::max(resolved.regs, 0) *
         static_cast<std::int64_t>(sizeof(float));
}

std::string_view row_shape_class(const KernelSpec&, const RowTile& resolved, const Shape& shape) {
  if (resolved.vec > 1 && shape.n % resolved.vec != 0) return "row/n_not_vec";
  // A ring copies each block's part of a row whole: N / cluster columns, vectors of them.
  if (resolved.ring > 0 && (shape.n % resolved.cluster != 0 || shape.n / resolved.cluster % resolved.vec != 0))
    return "row/n_not_ring";
  if (resolved.regs > 0 && shape.n > std::int64_t{resolved.row_threads()} * resolved.vec * resolved.regs)
    return "row/n_too_long";
  return "row";
}

const KernelFamily& row_family() {
  static const RowFamily family;
  return family;
}

}  // namespace epifuse
