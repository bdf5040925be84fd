#pragma once
// The row kernel family (Note [Kernel families]; docs/row-reductions.md):
// graphs with row reductions. One block walks a row at a time; the graph is
// cut into stages at its reductions (a node's stage is the number of
// reductions on its longest path to a leaf), each stage ends in block
// reductions whose per-row results the next stage reads as scalars, and the
// last stage writes the outputs. Its passes: plan_row (stages, vector width,
// registers or streaming; plan_row.cpp), then emit_row (templates/row.cu.in; emit_row.cpp,
// with the reductions and column sums in emit_row_sums.cpp).
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "codegen/kernel_plan.hpp"
#include "epifuse/device_info.hpp"

namespace epifuse {

/// One stage of a row kernel: what it reads and what it produces.
struct RowStage {
  std::vector<std::size_t> inputs;      // plan.inputs indices the stage reads
  std::vector<std::size_t> draws;       // plan.dropouts indices it tests
  std::vector<std::uint32_t> row_values;  // reduction nodes of earlier stages it reads (per-row scalars)
  std::vector<std::uint32_t> reductions;  // reduction nodes whose operands this stage produces
  std::vector<std::uint32_t> nodes;     // op nodes it computes, in graph order
  std::vector<std::uint32_t> kept_in;   // op nodes an earlier stage computed, read from their arrays (keep)
  std::vector<std::uint32_t> kept_out;  // op nodes it computes that a later stage reads (keep)
  bool outputs = false;                 // the last stage: it writes the graph's [M,N] outputs
  std::vector<std::size_t> col_sums;    // plan.outputs indices of the [N] outputs whose operands it adds up
};

/// The family's own decisions, on top of the generic plan.
struct RowPlan {
  const KernelPlan* plan = nullptr;
  RowTile tile;                 // vec and regs resolved
  int vec = 1;                  // the kernel's vector width: tile.vec, or 1 on the general path
  std::vector<RowStage> stages;
  bool vector_only = false;     // vec > 1: the host checks every vectorised pointer's alignment
  bool quad_draws = false;      // vec % 4 == 0 and N % 4 == 0: one Philox call per four elements
  int ring = 0;                 // tile.ring, or 0 on the general path (which streams instead)
  bool in_registers = false;    // a register tile: the row's vectors read once into registers
  bool keep = false;            // tile.keep with registers or a ring: a stage's values kept for later stages
                                // (in registers, or with keep 2 in the ring's bytes)
  /// Kept values that live in the ring's own bytes instead of registers, as
  /// (node, slot) (Note [Kept values in the ring]); empty: kept in registers.
  std::vector<std::pair<std::uint32_t, int>> ring_slots;
  /// [M] outputs (a row reduction or an op on per-row values: a forward's
  /// saved statistics), stored once a row after the stages, and the op nodes
  /// of class `col` that compute them, in graph order (Note [Per-row outputs]).
  std::vector<std::size_t> row_outputs;
  std::vector<std::uint32_t> row_output_nodes;
  std::vector<std::uint32_t> row_output_values;  // the reductions they read
  /// [N] outputs, each a col_sum of a full value (Note [Column sums]).
  std::vector<std::size_t> col_sums;
};

/// An input's broadcast, or an output's class: its value's (the plan's
/// output TensorPlans say full for every output).
inline Broadcast output_class(const KernelPlan& plan, const TensorPlan& t) {
  return plan.spec->graph.node(t.value).broadcast;
}

/// Floats of full inputs a thread may hold for the row-in-registers kernel:
/// beyond this the kernel would spill, and streaming the row again is cheaper.
inline constexpr int k_register_floats = 64;
/// Whether every [M,N] input's vector is a multiple of the ring's 16-byte copies
/// (true without a ring).
bool ring_vectors_fit(const KernelSpec& spec, const RowTile& resolved);
/// Thread-block clusters and distributed shared memory: sm_90 and later.
bool cluster_target(std::string_view target);
/// Full [M,N] inputs of a spec (at least 1), and its ops of one kind.
int full_inputs(const KernelSpec& spec);
int count_ops(const KernelSpec& spec, OpKind op);
/// The untuned tile (Note [Default row tile], row_default_tile.cpp); nullopt:
/// the plain default (off sm_90, short rows, a class's tile that does not fit).
std::optional<RowTile> default_row_tile(const KernelSpec& spec, const Shape& shape, std::string_view target,
                                        const DeviceInfo& device);
/// The row family's answer to family_for: whether a spec's graph has a row reduction.
bool has_row_reduction(const KernelSpec& spec);
/// Whether a later stage uses a value an earlier one computes (softmax's
/// exp(x - max)): only then does a keep tile differ from its plain one.
bool row_keeps_values(const Graph& graph);
/// Whether a ring tile of vector width `vec` can keep the values that later
/// stages read in its inputs' own bytes (keep 2, `kr`; Note [Kept values in the ring]).
bool ring_holds_kept_values(const Graph& graph, int vec);
/// The tile with vec and regs decided for N (RowTile's comments).
RowTile resolve_row_tile(const KernelSpec& spec, const Shape& shape, RowTile tile);
/// "row" when `shape` suits the resolved tile (N a multiple of vec, and the row
/// within threads*vec*regs when the tile keeps it in registers), else a
/// literal that names the mismatch (a launch of another class is refused).
std::string_view row_shape_class(const KernelSpec& spec, const RowTile& resolved, const Shape& shape);
/// Dynamic shared memory of a resolved ring tile (0 without a ring).
std::int64_t ring_bytes(const KernelSpec& spec, const RowTile& resolved);
/// Bytes of a block's column sums (C x threads x vec x regs floats): what a
/// tile's `t` stages in the ring after the last row.
std::int64_t col_sum_bytes(const KernelSpec& spec, const RowTile& resolved);

/// The [N] outputs' column sums (Note [Column sums]): the arity of the tree
/// over the grid's partial sums, and the grid's bound for a kernel that has
/// them (its workspace holds a partial row of N per row unit).
// 16: a node's last child reads 15 partial rows (its own columns of them);
// three levels for up to 4,096 units.
inline constexpr int k_col_sum_fan_in = 16;
/// Whether the spec has [N] outputs (col_sums); UserError for column sums
/// the family does not generate (a col_sum read by an op, an [N] output that
/// is not a col_sum) and [M] outputs that are not per-row values.
bool row_col_sums(const KernelSpec& spec);
/// Row units (blocks, or clusters) a column-sum kernel's grid may have at most.
std::int64_t col_sum_units(const RowTile& resolved, const Shape& shape);
/// Counters of the column-sum tree for `units` row units, per cluster rank.
std::int64_t col_sum_counters(std::int64_t units);

/// The ring slot of kept value `id` (RowPlan::ring_slots), or -1 (registers).
int ring_slot(const RowPlan& r, std::uint32_t id);

// The family's passes.
RowPlan plan_row(const KernelPlan& plan);
KernelSource emit_row(const RowPlan& plan);

}  // namespace epifuse
