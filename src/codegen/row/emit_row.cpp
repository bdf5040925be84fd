// Row family emission: emit_row fills templates/row.cu.in from a RowPlan
// (plan_row.cpp cuts the graph into stages). The stages' block reductions and
// the column sums are emit_row_sums.cpp's (Note [Reductions of a stage],
// Note [Column sums]), the shared-memory ring's setup emit_row_ring.cpp's.
// Generated identifiers only: in<k>/out<k> pointers, v<node> values, d<k>
// draws, a<node> a thread's partial reduction.
#include <algorithm>
#include <numeric>

#include "codegen/epilogue.hpp"
#include "codegen/param_layout.hpp"
#include "codegen/row/emit_row_ring.hpp"
#include "codegen/row/emit_row_sums.hpp"
#include "codegen/row/row.hpp"
#include "codegen/template_engine.hpp"
#include "epifuse/errors.hpp"
#include "ir/dropout.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

namespace {

// Loads or stores the VEC floats of kept value `id` in its ring slot: the
// slot's floats lie in the thread's bytes of the full inputs, taken in input
// order (Note [Kept values in the ring]), accessed 16 bytes at a time where
// the alignment allows.
std::string ring_slot_access(const RowPlan& r, std::uint32_t id, bool store) {
  const int first = ring_slot(r, id) * r.vec;  // the slot's first float among the thread's bytes
  std::string s;
  int pos = 0;  // floats of the thread's bytes before this input's
  std::size_t region = 0;
  for (const TensorPlan& t : r.plan->inputs) {
    if (t.broadcast != Broadcast::full) continue;
    const std::size_t size = size_of(t.dtype);
    const int floats = static_cast<int>(size) * r.vec / 4;
    const int chunk_align = std::gcd(static_cast<int>(size) * r.vec, 16);
    for (int f = std::max(pos, first); f < std::min(pos + floats, first + r.vec);) {
      const int byte = 4 * (f - pos), left = std::min(pos + floats, first + r.vec) - f;
      const int align = std::gcd(chunk_align, byte == 0 ? 16 : byte);
      const int w = align % 16 == 0 && left >= 4 ? 4 : align % 8 == 0 && left >= 2 ? 2 : 1;
      s += fmt::format("      ef_{}_floats<{}>(row_s + {} * ITEMS * THREADS * VEC + {} * c + {}, k{}_v + {});\n",
                       store ? "store" : "load", w, region, size, byte, id, f - first);
      f += w;
    }
    pos += floats;
    region += size;
  }
  return s;
}

void layout_params(const RowPlan& r, ParamLayout& layout) {
  layout.add_graph_tensors(*r.plan, 0);
  layout.add(ParamRole::dim_m, 0, "m", "long long m", 8, 8);
  layout.add(ParamRole::dim_n, 0, "n", "long long n", 8, 8);
  layout.add(ParamRole::inv_n, 0, "n_inv", "double n_inv", 8, 8);
  layout.add_tensor_lds(*r.plan, 0);  // Note [Strided rows]: none for a dense shape
  layout.add_rng_and_scalars(*r.plan);
  if (!r.col_sums.empty()) {  // Note [Column sums]
    layout.add(ParamRole::workspace, 0, "col_counters", "unsigned* col_counters", 8, 8);
    layout.add(ParamRole::workspace, 1, "col_partials", "float* col_partials", 8, 8);
  }
}

// Note [Strided rows] (elementwise/elementwise.hpp): where a full tensor's
// row starts, `base` (row * N) when dense, `base_<field>` (row * p.ld_<field>,
// row_bases) when strided. A draw's index stays base + column, the element's
// place in the [M,N] result.
std::string row_base(const TensorPlan& t) { return t.strided ? "base_" + t.field : "base"; }

std::string row_bases(const RowPlan& r) {
  const KernelPlan& plan = *r.plan;
  std::string s;
  for (const TensorPlan& t : plan.inputs)  // a ring's copies read the inputs (ring_issue)
    if (t.strided && t.broadcast == Broadcast::full && r.ring == 0)
      s += fmt::format("\n    const long long base_{0} = row * p.ld_{0};", t.field);
  for (const TensorPlan& t : plan.outputs)
    if (t.strided) s += fmt::format("\n    const long long base_{0} = row * p.ld_{0};", t.field);
  return s;
}

// A per-row input (col broadcast: one value a row; or a scalar), or nullptr:
// a value the row family reads once a row, as {field}_r.
const TensorPlan* per_row_input(const KernelPlan& plan, Value v) {
  for (const TensorPlan& t : plan.inputs)
    if (t.value == v && (t.broadcast == Broadcast::col || t.broadcast == Broadcast::scalar)) return &t;
  return nullptr;
}

// Whether a node is a quotient by a per-row value: a row reduction (softmax's
// sum) or a per-row input (the sum a backward reads back from the forward).
bool divides_by_row_value(const KernelPlan& plan, const Node& n) {
  if (n.kind != NodeKind::op || n.op != OpKind::div) return false;
  const Node& d = plan.spec->graph.node(n.args[1]);
  return (d.kind == NodeKind::op && is_row_reduction(d.op)) || per_row_input(plan, n.args[1]) != nullptr;
}

// The per-row divisors of a stage: what its quotients by row values divide by.
std::vector<std::uint32_t> row_divisors(const KernelPlan& plan, const RowStage& st) {
  const Graph& g = plan.spec->graph;
  std::vector<std::uint32_t> out;
  for (std::uint32_t id : st.nodes) {
    const Node& n = g.nodes()[id];
    if (divides_by_row_value(plan, n) && std::find(out.begin(), out.end(), n.args[1].id) == out.end())
      out.push_back(n.args[1].id);
  }
  return out;
}

// A divisor's name where the row's loop is chosen: a reduction's v<id>, an input's {field}_r.
std::string row_divisor_name(const KernelPlan& plan, std::uint32_t id) {
  const TensorPlan* t = per_row_input(plan, Value{id});
  return t ? t->field + "_r" : fmt::format("v{}", id);
}

// Whether a stage's loop is emitted twice, for normal and tiny divisors
// (stage_function): where it divides by a row value and draws dropout.
bool row_unswitched(const KernelPlan& plan, const RowStage& st) {
  return !st.draws.empty() && !row_divisors(plan, st).empty();
}

std::string stage_function(const RowPlan& r, std::size_t s) {
  const KernelPlan& plan = *r.plan;
  const Graph& g = plan.spec->graph;
  const RowStage& st = r.stages[s];
  const bool unswitch = row_unswitched(plan, st);
  std::string sig = fmt::format("const {}_params& p", plan.kernel_name);
  for (std::size_t k : st.inputs) sig += fmt::format(", float v{}", plan.inputs[k].value.id);
  for (std::size_t k : st.draws) sig += fmt::format(", unsigned d{}", k);
  for (std::uint32_t id : st.row_values) sig += fmt::format(", float v{}", id);
  for (std::uint32_t id : st.kept_in) sig += fmt::format(", float v{}", id);
  for (std::uint32_t id : st.reductions) sig += fmt::format(", float& a{}", id);
  for (std::uint32_t id : st.kept_out) sig += fmt::format(", float& k{}", id);
  if (st.outputs)
    for (std::size_t k = 0; k < plan.outputs.size(); ++k)
      if (output_class(plan, plan.outputs[k]) == Broadcast::full) sig += fmt::format(", float& o{}", k);
  for (std::size_t k : st.col_sums) sig += fmt::format(", float& c{}", k);
  std::string body;
  for (std::uint32_t id : st.nodes) {
    const Node& n = g.nodes()[id];
    // A quotient by a per-row value (softmax's sum, or the sum a backward
    // reads back from its forward) multiplies by its reciprocal, which the
    // compiler computes once a row: an IEEE division an element cost ~10
    // instructions, and the attention pattern is bound by issue
    // (docs/perf/rows.md); it also leaves its fast path for a zero dividend,
    // which every masked entry of an attention row is (the backward at
    // 65,536 took 1.6x as long with a tenth of the row masked,
    // docs/perf/backward.md). Within a rounding of the quotient; the
    // backward's recomputed softmax is the forward's, bit for bit. A
    // divisor below FLT_MIN (its reciprocal overflows) is scaled by 2^24 first
    // and the quotient back (exact powers of two). Where the stage draws
    // dropout (bound by issue) the choice is made once a row: emit_stage
    // runs a kTiny copy of the loop, and the common copy multiplies once. A
    // stage without draws is bound by memory: the loop-invariant choice is
    // hoisted and costs one more multiply an element, where the copy's
    // branch cost the g32 softmax tile 3% (docs/perf/rows.md). A
    // choice an element (a branch an element, an IEEE division two
    // registers) cost most.
    if (divides_by_row_value(plan, n)) {
      if (unswitch)
        body += fmt::format(
            "  const float v{0} = kTiny ? v{1} * (1.0f / (v{2} * 16777216.0f)) * 16777216.0f : v{1} * (1.0f / v{2});\n", id,
            n.args[0].id, n.args[1].id);
      else
        body += fmt::format(
            "  const bool tiny{0} = !(fabsf(v{2}) >= 1.17549435e-38f);\n"
            "  const float v{0} = v{1} * (tiny{0} ? 1.0f / (v{2} * 16777216.0f) : 1.0f / v{2}) * (tiny{0} ? 16777216.0f : 1.0f);\n",
            id, n.args[0].id, n.args[1].id);
    }
    else
      body += fmt::format("  const float v{} = {};\n", id, spell_op(plan, id));
  }
  for (std::uint32_t id : st.reductions) body += fmt::format("  a{} = v{};\n", id, g.nodes()[id].args[0].id);
  for (std::uint32_t id : st.kept_out) body += fmt::format("  k{0} = v{0};\n", id);
  if (st.outputs)
    for (std::size_t k = 0; k < plan.outputs.size(); ++k)
      if (output_class(plan, plan.outputs[k]) == Broadcast::full) body += fmt::format("  o{} = v{};\n", k, plan.outputs[k].value.id);
  for (std::size_t k : st.col_sums) body += fmt::format("  c{} = v{};\n", k, g.node(plan.outputs[k].value).args[0].id);
  return fmt::format("{}__device__ __forceinline__ void {}_stage{}({}) {{\n{}}}", unswitch ? "template <bool kTiny>\n" : "",
                     plan.kernel_name, s, sig, body);
}

// Note [Draws during the copy]: a dropout's keep bits depend on the element's
// index only, so a ring tile decides them while the bulk copy of its row is
// in flight (emit_row_start), one bit an element in ITEMS * VEC / 32 words,
// and the stage that drops reads a bit instead of running Philox after the
// reductions, on the block's critical path. philox4 draws with a threshold
// test only (a bit turns back into an all-ones or zero draw).
bool early_draws(const RowPlan& r, std::size_t k) {
  const Node& n = r.plan->spec->graph.node(r.plan->dropouts[k]);
  return r.ring > 0 && r.quad_draws && n.rng == RngMode::philox4 && dropout_effect(n.p, n.rng) == DropoutEffect::masked;
}

// The keep bits of every dropout decided during the ring's copy (Note [Draws during the copy]).
std::string emit_early_draws(const RowPlan& r) {
  const KernelPlan& plan = *r.plan;
  std::string out;
  for (std::size_t k = 0; k < plan.dropouts.size(); ++k) {
    if (!early_draws(r, k)) continue;
    const Node& n = plan.spec->graph.node(plan.dropouts[k]);
    out += fmt::format(
        "    unsigned d{0}_bits[(ITEMS * VEC + 31) / 32] = {{}};  // Note [Draws during the copy]\n"
        "#pragma unroll\n    for (int it = 0; it < ITEMS; ++it) {{\n"
        "      const int c = (it * THREADS + (int)threadIdx.x) * VEC;\n      if (c >= chunk) continue;\n"
        "#pragma unroll\n      for (int j = 0; j < VEC; j += 4) {{\n"
        "        const ef_u32x4 w = ef_philox4_draws(rng.seed, rng.offset, {1}u, (unsigned long long)(base + col0 + c + j) >> 2);\n"
        "        const unsigned q = (unsigned)ef_dropout_keep_scaled(w.x, {2}u) | (unsigned)ef_dropout_keep_scaled(w.y, {2}u) << 1 |\n"
        "                           (unsigned)ef_dropout_keep_scaled(w.z, {2}u) << 2 | (unsigned)ef_dropout_keep_scaled(w.w, {2}u) << 3;\n"
        "        d{0}_bits[(it * VEC + j) / 32] |= q << ((it * VEC + j) % 32);\n"
        "      }}\n    }}\n",
        k, n.stream, dropout_threshold(n.p) << 8);
  }
  return out;
}

// The per-row loads before the stages: col inputs (one value a row), scalar
// inputs, and with rows in registers the row of every full input.
std::string emit_row_start(const RowPlan& r) {
  const KernelPlan& plan = *r.plan;
  std::string s;
  for (const TensorPlan& t : plan.inputs) {
    if (t.broadcast == Broadcast::col)
      s += fmt::format("    const float {0}_r = live ? ef_to_float(p.{0}[row]) : 0.0f;\n", t.field);
    if (t.broadcast == Broadcast::scalar) s += fmt::format("    const float {0}_r = ef_to_float(p.{0}[0]);\n", t.field);
  }
  if (r.ring > 0 && r.tile.pieces > 0) {  // Note [Ring pieces]: each stage waits for a piece as it reaches it
    s += "    const long long g0 = ring_row * PIECES;  // this row's first piece\n"
         "    ++ring_row;\n";
    s += emit_early_draws(r);  // before the first wait: the copies are in flight meanwhile
  } else if (r.ring > 0) {
    if (!r.ring_slots.empty())  // the bulk copy below may refill bytes this thread wrote
      s += "    ef_fence_proxy_async();\n";
    s += "    const int slot = (int)(ring_row % RING);\n"
         "    const unsigned parity = (unsigned)(ring_row / RING) & 1u;\n"
         "    ++ring_row;\n"
         "    __syncthreads();  // the slot refilled next was read in the last row\n"
         "    if (threadIdx.x == 0 && row + (RING - 1) * red.units() < p.m)\n"
         "      ring_issue(row + (RING - 1) * red.units(), (slot + RING - 1) % RING);\n";
    s += emit_early_draws(r);  // before the wait: the copy is in flight meanwhile
    s += "    ef_mbar_wait(ring_bar(slot), parity);\n";
    std::size_t offset = 0;
    for (const TensorPlan& t : plan.inputs) {
      if (t.broadcast != Broadcast::full) continue;
      s += fmt::format("    const {0}* {1}_s = reinterpret_cast<const {0}*>(ring + slot * RING_STAGE + {2} * ITEMS * THREADS * VEC);\n",
                       storage_type_name(t.dtype), t.field, offset);
      offset += size_of(t.dtype);
    }
    if (!r.ring_slots.empty())
      s += "    unsigned char* const row_s = ring + slot * RING_STAGE;  // kept values in the inputs' bytes\n";
  } else if (r.in_registers) {
    for (const TensorPlan& t : plan.inputs) {
      if (t.broadcast != Broadcast::full) continue;
      s += fmt::format(
          "    float {0}_x[ITEMS][VEC];  // this thread's vectors of the row, read once\n"
          "#pragma unroll\n    for (int it = 0; it < ITEMS; ++it) {{\n"
          "      const int c0 = (it * LANES + lane) * VEC;\n"
          "      if (c0 < n) ef_load_vec<{1}, VEC>(p.{0} + {2} + c0, {0}_x[it]);\n"
          "    }}\n",
          t.field, storage_type_name(t.dtype), row_base(t));
    }
  }
  for (const RowStage& st : r.stages)
    for (std::uint32_t id : st.kept_out)
      if (ring_slot(r, id) < 0)
        s += fmt::format("    float k{}[ITEMS][VEC];  // kept from stage to stage (Note [Row stages])\n", id);
  if (s.empty()) return "    // no per-row loads";
  s.pop_back();
  return s;
}

// One stage: a loop over this thread's vectors of the row (unrolled over
// ITEMS with the row in registers, else a strided loop that reads it again),
// the stage function per element, then the block reductions, or the stores.
std::string emit_stage(const RowPlan& r, std::size_t s) {
  const KernelPlan& plan = *r.plan;
  const Graph& g = plan.spec->graph;
  const RowStage& st = r.stages[s];
  const bool regs = r.in_registers;
  std::string head = fmt::format("    // stage {}\n", s);
  for (std::uint32_t id : st.reductions)
    head += fmt::format("    float acc{} = {};\n", id, g.nodes()[id].op == OpKind::row_max ? "EF_NEG_INF" : "0.0f");
  std::string out;
  const bool pieces = r.ring > 0 && r.tile.pieces > 0;
  const bool last = s + 1 == r.stages.size();
  if (pieces)  // Note [Ring pieces]
    out += std::string("#pragma unroll\n    for (int it = 0; it < ITEMS; ++it) {\n") +
           (last ? "      if (it > 0 && it % PIECE_ITEMS == 0) piece_read(g0 + it / PIECE_ITEMS - 1);\n" : "") +
           "      if (it % PIECE_ITEMS == 0) piece_wait(g0 + it / PIECE_ITEMS);\n"
           "      const int c = (it * THREADS + (int)threadIdx.x) * VEC;\n      if (c >= chunk) continue;\n"
           "      const int c0 = col0 + c;\n"
           "      const unsigned char* const piece_s = ring + (int)((g0 + it / PIECE_ITEMS) % RING) * PIECE_STAGE;\n"
           "      const int pc = c - it / PIECE_ITEMS * PIECE_COLS;  // the column in the piece\n";
  else if (r.ring > 0)  // this block's columns of the row, from the ring
    out += "#pragma unroll\n    for (int it = 0; it < ITEMS; ++it) {\n"
           "      const int c = (it * THREADS + (int)threadIdx.x) * VEC;\n      if (c >= chunk) continue;\n"
           "      const int c0 = col0 + c;\n";
  else
  out += regs ? "#pragma unroll\n    for (int it = 0; it < ITEMS; ++it) {\n"
                "      const int c0 = (it * LANES + lane) * VEC;\n      if (c0 >= n) continue;\n"
              : "    for (int c0 = lane * VEC; c0 < n; c0 += LANES * VEC) {\n";
  // Leaves of the stage, as VEC-element arrays.
  for (std::size_t k : st.inputs) {
    const TensorPlan& t = plan.inputs[k];
    const auto type = storage_type_name(t.dtype);
    switch (t.broadcast) {
      case Broadcast::full:
        if (pieces)
          out += fmt::format(
              "      float {0}_v[VEC];\n"
              "      ef_load_vec<{1}, VEC>(reinterpret_cast<const {1}*>(piece_s + {2} * PIECE_COLS) + pc, {0}_v);\n",
              t.field, type, ring_offset(plan, k));
        else if (r.ring > 0)
          out += fmt::format("      float {0}_v[VEC];\n      ef_load_vec<{1}, VEC>({0}_s + c, {0}_v);\n", t.field, type);
        else if (regs)
          out += fmt::format("      const float (&{0}_v)[VEC] = {0}_x[it];\n", t.field);
        else
          out += fmt::format("      float {0}_v[VEC];\n      ef_load_vec<{1}, VEC>(p.{0} + {2} + c0, {0}_v);\n", t.field,
                             type, row_base(t));
        break;
      case Broadcast::row:
        out += fmt::format("      float {0}_v[VEC];\n      ef_load_vec<{1}, VEC>(p.{0} + c0, {0}_v);\n", t.field, type);
        break;
      case Broadcast::col:
      case Broadcast::scalar:
        out += fmt::format("      float {0}_v[VEC];\n#pragma unroll\n      for (int j = 0; j < VEC; ++j) {0}_v[j] = {0}_r;\n",
                           t.field);
        break;
    }
  }
  for (std::size_t k : st.draws) {
    const Node& n = g.node(plan.dropouts[k]);
    out += fmt::format("      unsigned d{}[VEC];  // dropout stream {} ({})\n", k, n.stream, to_string(n.rng));
    if (early_draws(r, k))  // Note [Draws during the copy]
      out += fmt::format(
          "#pragma unroll\n      for (int j = 0; j < VEC; ++j) d{0}[j] = 0u - ((d{0}_bits[(it * VEC + j) / 32] >> ((it * VEC + j) % 32)) & 1u);\n",
          k);
    else if (n.rng == RngMode::philox4 && r.quad_draws)
      out += fmt::format(
          "#pragma unroll\n      for (int j = 0; j < VEC; j += 4) {{  // one Philox call, four draws\n"
          "        const ef_u32x4 w = ef_philox4_draws(rng.seed, rng.offset, {1}u, (unsigned long long)(base + c0 + j) >> 2);\n"
          "        d{0}[j] = w.x;\n        d{0}[j + 1] = w.y;\n        d{0}[j + 2] = w.z;\n        d{0}[j + 3] = w.w;\n"
          "      }}\n",
          k, n.stream);
    else if (n.rng == RngMode::philox4)
      out += fmt::format(
          "#pragma unroll\n      for (int j = 0; j < VEC; ++j) d{0}[j] = ef_philox4_draw(rng.seed, rng.offset, {1}u, "
          "(unsigned long long)(base + c0 + j));\n",
          k, n.stream);
    else
      out += fmt::format(
          "#pragma unroll\n      for (int j = 0; j < VEC; ++j) d{}[j] = ef_triton_draw(rng.seed, rng.offset, "
          "(unsigned long long)(base + c0 + j));\n",
          k);
  }
  for (std::uint32_t id : st.kept_in)
    if (ring_slot(r, id) >= 0) out += fmt::format("      float k{}_v[VEC];\n", id) + ring_slot_access(r, id, false);
  for (std::uint32_t id : st.kept_out)
    if (ring_slot(r, id) >= 0) out += fmt::format("      float k{}_v[VEC];\n", id);
  const std::vector<std::uint32_t> divisors = row_unswitched(plan, st) ? row_divisors(plan, st) : std::vector<std::uint32_t>{};
  std::string call = fmt::format("{}_stage{}{}(p", plan.kernel_name, s, divisors.empty() ? "" : "<EF_EXACT>");
  for (std::size_t k : st.inputs) call += fmt::format(", {}_v[j]", plan.inputs[k].field);
  for (std::size_t k : st.draws) call += fmt::format(", d{}[j]", k);
  for (std::uint32_t id : st.row_values) call += fmt::format(", v{}", id);
  auto kept = [&](std::uint32_t id) {
    return ring_slot(r, id) >= 0 ? fmt::format(", k{}_v[j]", id) : fmt::format(", k{}[it][j]", id);
  };
  for (std::uint32_t id : st.kept_in) call += kept(id);
  for (std::uint32_t id : st.reductions) call += fmt::format(", a{}", id);
  for (std::uint32_t id : st.kept_out) call += kept(id);
  if (st.outputs) {
    for (const TensorPlan& t : plan.outputs)
      if (output_class(plan, t) == Broadcast::full) out += fmt::format("      float {}_v[VEC];\n", t.field);
    for (const TensorPlan& t : plan.outputs)
      if (output_class(plan, t) == Broadcast::full) call += fmt::format(", {}_v[j]", t.field);
  }
  for (std::size_t k : st.col_sums) call += fmt::format(", c{}", k);
  call += ")";
  out += "#pragma unroll\n      for (int j = 0; j < VEC; ++j) {\n";
  for (std::uint32_t id : st.reductions) out += fmt::format("        float a{};\n", id);
  for (std::size_t k : st.col_sums) out += fmt::format("        float c{};\n", k);
  out += fmt::format("        {};\n", call);
  for (std::size_t i = 0; i < st.col_sums.size(); ++i)
    out += fmt::format("        cs[{}][it][j] += c{};  // Note [Column sums]\n", i, st.col_sums[i]);
  for (std::uint32_t id : st.reductions)
    out += g.nodes()[id].op == OpKind::row_max ? fmt::format("        acc{0} = ef_max_nan(acc{0}, a{0});\n", id)
                                               : fmt::format("        acc{0} += a{0};\n", id);
  out += "      }\n";
  if (st.outputs)
    for (const TensorPlan& t : plan.outputs)
      if (output_class(plan, t) == Broadcast::full)
        out += fmt::format("      ef_store_vec<{0}, VEC>(p.{1} + {2} + c0, {1}_v);\n", storage_type_name(t.dtype), t.field,
                           row_base(t));
  for (std::uint32_t id : st.kept_out)
    if (ring_slot(r, id) >= 0) out += ring_slot_access(r, id, true);
  out += "    }\n";
  if (divisors.empty()) {
    out = head + out;
  } else {  // the loop twice: multiplying by the divisors' reciprocals, or dividing (stage_function)
    std::string normal;
    for (std::uint32_t id : divisors)
      normal += fmt::format("{}fabsf({}) >= 1.17549435e-38f", normal.empty() ? "" : " && ", row_divisor_name(plan, id));
    auto copy = [&](std::string_view exact) {
      std::string text = out;
      for (std::size_t at; (at = text.find("EF_EXACT")) != std::string::npos;) text.replace(at, 8, exact);
      return text;
    };
    out = fmt::format("{}    if ({}) {{\n{}    }} else {{  // a divisor below FLT_MIN: its reciprocal overflows\n{}    }}\n", head,
                      normal, copy("false"), copy("true"));
  }
  if (pieces && last) out += "    piece_read(g0 + PIECES - 1);  // the row's last piece\n";
  out += emit_stage_reductions(r, st);
  out.pop_back();
  return out;
}

// Note [Per-row outputs] (plan_row.cpp): the function that computes the [M]
// outputs from the row's reductions and its [M] and scalar inputs.
std::string row_output_function(const RowPlan& r) {
  const KernelPlan& plan = *r.plan;
  const Graph& g = plan.spec->graph;
  std::string sig = fmt::format("const {}_params& p", plan.kernel_name), body;
  for (const TensorPlan& t : plan.inputs)
    if (t.broadcast == Broadcast::col || t.broadcast == Broadcast::scalar) sig += fmt::format(", float v{}", t.value.id);
  for (std::uint32_t id : r.row_output_values) sig += fmt::format(", float v{}", id);
  for (std::size_t k : r.row_outputs) sig += fmt::format(", float& m{}", k);
  for (std::uint32_t id : r.row_output_nodes) body += fmt::format("  const float v{} = {};\n", id, spell_op(plan, id));
  for (std::size_t k : r.row_outputs) body += fmt::format("  m{} = v{};\n", k, plan.outputs[k].value.id);
  (void)g;
  return fmt::format("__device__ __forceinline__ void {}_row_outputs({}) {{\n{}}}", plan.kernel_name, sig, body);
}

// The call after the stages, and one store a row by the row's first thread.
std::string emit_row_outputs(const RowPlan& r) {
  const KernelPlan& plan = *r.plan;
  if (r.row_outputs.empty()) return "";  // (the template's text for forward chains is unchanged)
  std::string s = "\n    {  // [M] outputs (Note [Per-row outputs])\n";
  std::string call = fmt::format("{}_row_outputs(p", plan.kernel_name);
  for (const TensorPlan& t : plan.inputs)
    if (t.broadcast == Broadcast::col || t.broadcast == Broadcast::scalar) call += fmt::format(", {}_r", t.field);
  for (std::uint32_t id : r.row_output_values) call += fmt::format(", v{}", id);
  for (std::size_t k : r.row_outputs) {
    s += fmt::format("      float m{}[1];\n", k);
    call += fmt::format(", m{}[0]", k);
  }
  s += fmt::format("      {});\n      if (live && lane == 0) {{\n", call);
  for (std::size_t k : r.row_outputs)
    s += fmt::format("        ef_store_vec<{}, 1>(p.{} + row, m{});\n", storage_type_name(plan.outputs[k].dtype),
                     plan.outputs[k].field, k);
  s += "      }\n    }";
  return s;
}

int alignment_needed(const RowPlan& r, const TensorPlan& t) {
  const Broadcast b = output_class(*r.plan, t);  // an output's class is its value's
  if (r.vec == 1 || b == Broadcast::col || b == Broadcast::scalar) return 0;
  return static_cast<int>(std::min<std::size_t>(16, r.vec * size_of(t.dtype)));
}

}  // namespace

KernelSource emit_row(const RowPlan& r) {
  const KernelPlan& plan = *r.plan;
  KernelSource ks;
  bind_graph_tensors(plan, ks, [&](const TensorPlan& t) { return alignment_needed(r, t); });
  ks.tile = r.tile;
  ks.cluster_blocks = static_cast<std::uint32_t>(r.tile.cluster);
  ks.requires_alignment = r.vector_only;
  ParamLayout layout;
  layout_params(r, layout);
  std::string stage_functions, stages;
  for (std::size_t s = 0; s < r.stages.size(); ++s) {
    stage_functions += stage_function(r, s) + "\n\n";
    stages += emit_stage(r, s) + "\n";
  }
  if (!r.row_outputs.empty()) stage_functions += row_output_function(r) + "\n\n";
  stage_functions.resize(stage_functions.size() - 2);
  stages.pop_back();
  std::string ring_setup;
  if (r.ring > 0) {
    ks.shared_bytes = static_cast<std::uint32_t>(ring_bytes(*plan.spec, r.tile));
    ring_setup = emit_ring_setup(r);
  }
  TemplateVars vars{
      {"kernel", plan.kernel_name},
      {"ring_setup", ring_setup.empty() ? "  // no shared-memory ring" : ring_setup.substr(0, ring_setup.size() - 1)},
      {"extra_includes", r.ring > 0 ? "#include \"common/hopper.cuh\"" : ""},
      {"description", describe_chain(plan)},
      {"rng_state", rng_state_setup(plan, "  ")},
      {"param_fields", layout.fields_text()},
      {"stage_functions", stage_functions},
      {"threads", std::to_string(r.tile.threads)},
      {"group", std::to_string(r.tile.group_threads())},
      {"cluster", std::to_string(r.tile.cluster)},
      {"cluster_dims", r.tile.cluster > 1 ? fmt::format("__cluster_dims__({}, 1, 1)", r.tile.cluster) : ""},
      {"launch_bounds", r.tile.min_blocks > 0 ? fmt::format("__launch_bounds__(THREADS, {})", r.tile.min_blocks)
                                              : "__launch_bounds__(THREADS)"},
      {"vec", std::to_string(r.vec)},
      // Registers hold the same elements at any vector width: ITEMS vectors of VEC.
      {"items", std::to_string(r.in_registers || r.ring > 0 ? r.tile.regs * (r.tile.vec / r.vec) : 0)},
      {"stage_count", std::to_string(r.stages.size())},
      {"reduced_together", std::to_string(reduced_together(r))},
      {"row_bases", row_bases(r)},
      {"row_start", emit_row_start(r)},
      {"stages", stages},
      {"row_outputs", emit_row_outputs(r)},
      {"col_setup", emit_col_setup(r)},
      {"col_finish", emit_col_finish(r)},
  };
  layout.finish(ks);
  ks.text = render_template(embedded_template("row.cu.in"), vars, "row.cu.in");
  return ks;
}

}  // namespace epifuse
