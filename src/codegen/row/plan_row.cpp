// Row family planning: plan_row cuts the graph into stages at its reductions
// (Note [Row stages]), decides what a stage keeps for later stages and, for
// `kr` tiles, where in the ring's bytes (Note [Kept values in the ring]).
// emit_row.cpp turns the plan into source.
#include <algorithm>
#include <optional>

#include "codegen/row/row.hpp"
#include "epifuse/errors.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

namespace {

// Note [Row stages]: a node's level is the number of reductions on its
// longest path to a leaf; a reduction's level is its operand's plus one.
// Stage s computes the op nodes of level <= s that its targets need (the
// operands of the level-(s+1) reductions, or in the last stage the outputs),
// reading reductions of level <= s as per-row scalars. Without keep, a stage
// recomputes what an earlier one computed (exp(x - max) in softmax's sum and
// in its quotient): a thread holds the row's inputs only. With keep (a tile
// whose row sits in registers or a ring), a value an earlier stage computed
// is read from a register array instead: the attention pattern computes
// x*scale + mask once instead of three times and exp once instead of twice,
// and since the kept values usually replace inputs that die (softmax keeps
// exp(x - max) where it held x), registers do not grow.
std::vector<int> levels(const Graph& g) {
  std::vector<int> level(g.nodes().size(), 0);
  for (std::size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.kind != NodeKind::op) continue;
    int l = 0;
    for (Value a : n.args) l = std::max(l, level[a.id]);
    level[i] = is_row_reduction(n.op) ? l + 1 : l;
  }
  return level;
}

// One stage's cut of the graph (Note [Row stages]).
struct StageCut {
  std::vector<std::uint32_t> reductions;  // reductions whose operands the stage produces
  std::vector<bool> need;                 // nodes the stage reads or computes
  std::vector<std::uint32_t> kept_in;     // op nodes an earlier stage computed, read from its array
};

std::vector<StageCut> cut_stages(const Graph& g, bool keep) {
  const std::vector<int> level = levels(g);
  // The last stage computes the [M,N] outputs and the operands of the [N]
  // ones (col_sums); [M] outputs are per-row values (Note [Per-row outputs]).
  auto stage_target = [&](const Output& o) -> std::optional<Value> {
    const Node& n = g.node(o.value);
    if (n.broadcast == Broadcast::full) return o.value;
    if (n.kind == NodeKind::op && n.op == OpKind::col_sum) return n.args[0];
    return std::nullopt;
  };
  int last = 0;
  for (const Output& o : g.outputs())
    if (const auto t = stage_target(o)) last = std::max(last, level[t->id]);
  for (std::size_t i = 0; i < g.nodes().size(); ++i) last = std::max(last, level[i] - 1);
  std::vector<int> computed_in(g.nodes().size(), -1);
  std::vector<StageCut> cuts;
  for (int s = 0; s <= last; ++s) {
    StageCut st;
    std::vector<Value> targets;
    for (std::size_t i = 0; i < g.nodes().size(); ++i) {
      const Node& n = g.nodes()[i];
      if (n.kind == NodeKind::op && is_row_reduction(n.op) && level[i] == s + 1) {
        st.reductions.push_back(static_cast<std::uint32_t>(i));
        targets.push_back(n.args[0]);
      }
    }
    if (s == last)
      for (const Output& o : g.outputs())
        if (const auto t = stage_target(o)) targets.push_back(*t);
    // Everything the targets need, stopping at reductions (per-row scalars
    // here) and, with keep, at what an earlier stage computed.
    st.need.assign(g.nodes().size(), false);
    std::vector<Value> work = targets;
    while (!work.empty()) {
      const Value v = work.back();
      work.pop_back();
      if (st.need[v.id]) continue;
      st.need[v.id] = true;
      const Node& n = g.node(v);
      if (n.kind != NodeKind::op || is_row_reduction(n.op)) continue;
      if (keep && computed_in[v.id] >= 0) {
        st.kept_in.push_back(v.id);
        continue;
      }
      for (Value a : n.args) work.push_back(a);
    }
    std::sort(st.kept_in.begin(), st.kept_in.end());
    for (std::size_t i = 0; i < g.nodes().size(); ++i) {
      const Node& n = g.nodes()[i];
      if (st.need[i] && n.kind == NodeKind::op && !is_row_reduction(n.op) && computed_in[i] < 0)
        computed_in[i] = s;
    }
    cuts.push_back(std::move(st));
  }
  return cuts;
}

RowStage plan_stage(const KernelPlan& plan, const StageCut& cut, bool last) {
  const Graph& g = plan.spec->graph;
  RowStage st;
  st.outputs = last;
  st.reductions = cut.reductions;
  st.kept_in = cut.kept_in;
  for (std::size_t i = 0; i < g.nodes().size(); ++i) {
    if (!cut.need[i]) continue;
    const Node& n = g.nodes()[i];
    if (n.kind != NodeKind::op) continue;
    if (is_row_reduction(n.op)) {
      st.row_values.push_back(static_cast<std::uint32_t>(i));
      continue;
    }
    if (std::binary_search(cut.kept_in.begin(), cut.kept_in.end(), static_cast<std::uint32_t>(i))) continue;
    st.nodes.push_back(static_cast<std::uint32_t>(i));
    if (n.op == OpKind::dropout)
      for (std::size_t k = 0; k < plan.dropouts.size(); ++k)
        if (plan.dropouts[k].id == i) st.draws.push_back(k);
  }
  for (std::size_t k = 0; k < plan.inputs.size(); ++k)
    if (cut.need[plan.inputs[k].value.id]) st.inputs.push_back(k);
  if (last)
    for (std::size_t k = 0; k < plan.outputs.size(); ++k)
      if (output_class(plan, plan.outputs[k]) == Broadcast::row) st.col_sums.push_back(k);
  return st;
}

// Note [Kept values in the ring]: a ring tile keeps a stage's values in the
// ring's own bytes when they fit, instead of registers (which cost a ring tile
// its occupancy: 0.82-0.94x, docs/perf/rows.md). A thread owns the bytes
// of its vectors of every full input; once no later stage reads the inputs,
// those bytes hold fp32 values, as many a vector as the inputs' bytes allow
// (x and mask in bf16: one; the attention pattern keeps x*scale + mask there,
// then exp(. - max) in its place). A thread reads and writes only its own
// bytes, so no barrier is needed; a slot is taken over in the stage that last
// reads its value (that stage's loads come before its stores). Before the
// bulk copy refills the ring, every thread fences its writes to the async
// proxy (emit_row_start). Empty when the values do not fit: the tile (kr) is
// then refused (row_family.cpp).
std::vector<std::pair<std::uint32_t, int>> plan_ring_slots(const Graph& g, int vec) {
  std::size_t bytes = 0;
  for (const Node& n : g.nodes()) {
    if (n.kind != NodeKind::input || n.broadcast != Broadcast::full) continue;
    if (size_of(n.dtype) * vec % 4 != 0) return {};  // a float would straddle two inputs' bytes
    bytes += size_of(n.dtype);
  }
  const std::vector<StageCut> cuts = cut_stages(g, true);
  struct Life {
    std::uint32_t id;
    int def, last;
  };
  std::vector<Life> lives;  // in the order of the stages that compute them
  for (std::size_t s = 0; s < cuts.size(); ++s)
    for (std::uint32_t id : cuts[s].kept_in) {
      auto l = std::find_if(lives.begin(), lives.end(), [&](const Life& x) { return x.id == id; });
      if (l != lives.end()) {
        l->last = static_cast<int>(s);
        continue;
      }
      int def = 0;  // the first stage that needs it computes it
      while (!cuts[def].need[id]) ++def;
      lives.push_back({id, def, static_cast<int>(s)});
    }
  if (lives.empty()) return {};
  std::sort(lives.begin(), lives.end(), [](const Life& a, const Life& b) { return a.def < b.def; });
  // The inputs' bytes are overwritten from the first stage that keeps a value.
  for (std::size_t s = lives.front().def + 1; s < cuts.size(); ++s)
    for (std::size_t i = 0; i < g.nodes().size(); ++i)
      if (cuts[s].need[i] && g.nodes()[i].kind == NodeKind::input && g.nodes()[i].broadcast == Broadcast::full) return {};
  std::vector<int> free_after(bytes / 4, -1);  // per slot: the last stage that reads its value
  std::vector<std::pair<std::uint32_t, int>> slots;
  for (const Life& l : lives) {
    const auto q = std::find_if(free_after.begin(), free_after.end(), [&](int last) { return last <= l.def; });
    if (q == free_after.end()) return {};  // more values than the bytes hold
    *q = l.last;
    slots.emplace_back(l.id, static_cast<int>(q - free_after.begin()));
  }
  return slots;
}

// Note [Per-row outputs]: an [M] output (class `col`: a forward's saved row
// max and sum, a norm's mean and rstd) is a row reduction or an op on per-row
// values (reductions, [M] and scalar inputs). Every reduction is done before
// the last stage, so after the stages one thread of the row computes the
// output's ops from the reductions (a function of its own, emit_row.cpp) and
// stores it: one store a row.
void plan_row_outputs(const Graph& g, const KernelPlan& plan, RowPlan& r) {
  std::vector<bool> need(g.nodes().size(), false);
  std::vector<std::uint32_t> work;
  for (std::size_t k : r.row_outputs) work.push_back(plan.outputs[k].value.id);
  while (!work.empty()) {
    const std::uint32_t id = work.back();
    work.pop_back();
    if (need[id]) continue;
    need[id] = true;
    const Node& n = g.nodes()[id];
    if (n.kind != NodeKind::op || is_row_reduction(n.op)) continue;
    for (Value a : n.args) work.push_back(a.id);
  }
  for (std::size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (!need[i] || n.kind != NodeKind::op) continue;
    (is_row_reduction(n.op) ? r.row_output_values : r.row_output_nodes).push_back(static_cast<std::uint32_t>(i));
  }
}

}  // namespace

bool row_col_sums(const KernelSpec& spec) {
  const Graph& g = spec.graph;
  std::vector<bool> read(g.nodes().size(), false);
  for (const Node& n : g.nodes())
    if (n.kind == NodeKind::op)
      for (Value a : n.args) read[a.id] = true;
  bool sums = false;
  for (std::size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.kind != NodeKind::op || !is_col_reduction(n.op)) continue;
    EPIFUSE_CHECK(!read[i],
                  "col_sum{}: the row family writes a column sum as an [N] output only, not as an operand of another op "
                  "(it is complete only after every row); the CPU reference runs it (epifuse run --device cpu)",
                  n.name.empty() ? "" : fmt::format(" '{}'", n.name));
  }
  for (const Output& o : g.outputs()) {
    const Node& n = g.node(o.value);
    if (n.broadcast == Broadcast::row) {
      EPIFUSE_CHECK(n.kind == NodeKind::op && n.op == OpKind::col_sum,
                    "output '{}' is an [N] value that is not a col_sum: the row family writes [N] outputs that sum a "
                    "full value's columns only; the CPU reference writes it (epifuse run --device cpu)",
                    o.name);
      sums = true;
    }
    EPIFUSE_CHECK(n.broadcast != Broadcast::col || n.kind == NodeKind::op,
                  "output '{}' is an [M] input passed through: the row family writes [M] outputs computed from row "
                  "reductions; copy the input instead",
                  o.name);
  }
  return sums;
}

std::int64_t col_sum_units(const RowTile& resolved, const Shape& shape) {
  // The grid's bound (geometry caps the persistent grid with it): the blocks
  // of 160 multiprocessors of 2048 threads, more than an H100 or H200 (132)
  // holds at once. A larger GPU runs the same kernel on fewer blocks.
  const std::int64_t rows_per_block = resolved.threads / resolved.group_threads();
  const std::int64_t work = std::max<std::int64_t>(1, (shape.m + rows_per_block - 1) / rows_per_block);
  const std::int64_t resident = std::int64_t{160} * std::max(1, 2048 / resolved.threads) / resolved.cluster;
  return std::max<std::int64_t>(1, std::min(work, resident));
}

std::int64_t col_sum_counters(std::int64_t units) {
  std::int64_t total = 0;
  for (std::int64_t n = units; n > 1; n = (n + k_col_sum_fan_in - 1) / k_col_sum_fan_in)
    total += (n + k_col_sum_fan_in - 1) / k_col_sum_fan_in;
  return std::max<std::int64_t>(total, 1);
}

int ring_slot(const RowPlan& r, std::uint32_t id) {
  for (const auto& [node, slot] : r.ring_slots)
    if (node == id) return slot;
  return -1;
}

bool ring_holds_kept_values(const Graph& graph, int vec) { return !plan_ring_slots(graph, vec).empty(); }

bool row_keeps_values(const Graph& graph) {
  for (const StageCut& cut : cut_stages(graph, true))
    if (!cut.kept_in.empty()) return true;
  return false;
}

RowPlan plan_row(const KernelPlan& plan) {
  RowPlan r;
  r.plan = &plan;
  r.tile = std::get<RowTile>(plan.tile);
  const Graph& g = plan.spec->graph;
  const bool sums = row_col_sums(*plan.spec);  // UserError for what the family does not generate
  for (std::size_t k = 0; k < plan.outputs.size(); ++k) {
    const Broadcast b = output_class(plan, plan.outputs[k]);
    EPIFUSE_ASSERT(b != Broadcast::scalar, "output '{}' is a scalar: the builder refuses that", plan.outputs[k].binding);
    if (b == Broadcast::col) r.row_outputs.push_back(k);
    if (b == Broadcast::row) r.col_sums.push_back(k);
  }
  EPIFUSE_ASSERT(sums == !r.col_sums.empty(), "row_col_sums and the plan's [N] outputs disagree");
  plan_row_outputs(g, plan, r);
  // The general path (a misaligned pointer) reads element by element.
  r.vec = plan.path == KernelPath::general ? 1 : r.tile.vec;
  r.vector_only = r.vec > 1;
  r.quad_draws = r.vec % 4 == 0 && plan.shape.n % 4 == 0;
  // A ring tile's general path (vectors of one element) streams the row instead.
  r.ring = plan.path == KernelPath::general ? 0 : r.tile.ring;
  r.in_registers = r.tile.regs > 0 && r.tile.ring == 0;
  // Column sums accumulate in ITEMS x VEC registers a thread: a ring tile's
  // general path reads its row into registers instead of streaming it.
  if (!r.col_sums.empty() && r.ring == 0 && r.tile.regs > 0) r.in_registers = true;
  EPIFUSE_CHECK(r.col_sums.empty() || r.in_registers || r.ring > 0,
                "row tile {}: a streaming tile (x0) cannot sum columns; the [N] outputs need a tile that holds the row "
                "(registers, a ring or a cluster)",
                r.tile.str());
  r.keep = r.tile.keep && (r.in_registers || r.ring > 0);
  const std::vector<StageCut> cuts = cut_stages(g, r.keep);
  for (std::size_t s = 0; s < cuts.size(); ++s) r.stages.push_back(plan_stage(plan, cuts[s], s + 1 == cuts.size()));
  // Each kept value's array is written by the stage that computes it.
  for (RowStage& st : r.stages)
    for (std::uint32_t id : st.kept_in)
      for (RowStage& earlier : r.stages)
        if (std::find(earlier.nodes.begin(), earlier.nodes.end(), id) != earlier.nodes.end() &&
            std::find(earlier.kept_out.begin(), earlier.kept_out.end(), id) == earlier.kept_out.end())
          earlier.kept_out.push_back(id);
  for (RowStage& st : r.stages) std::sort(st.kept_out.begin(), st.kept_out.end());
  if (r.keep && r.ring > 0 && r.tile.keep == 2) {
    r.ring_slots = plan_ring_slots(g, r.vec);
    EPIFUSE_ASSERT(!r.ring_slots.empty(), "row tile {}: the resolution refuses kr where the inputs' bytes hold no kept value",
                   r.tile.str());
  }
  return r;
}

}  // namespace epifuse
