// GEMM passes: plan_gemm decides layouts, the load path and how dropout draws
// are shared; emit_gemm fills templates/gemm_mma.cu.in. Generated identifiers
// only: a, b, in<k>, out<k>, v<node>, d<k>.
#include <algorithm>
#include <array>

#include "codegen/column_sums.hpp"
#include "codegen/epilogue.hpp"
#include "codegen/family.hpp"
#include "codegen/gemm/gemm.hpp"
#include "codegen/gemm/gemm_parts.hpp"
#include "codegen/param_layout.hpp"
#include "codegen/template_engine.hpp"
#include "epifuse/errors.hpp"
#include "ir/names.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

bool gemm_is_simt(const Mainloop& ml) { return ml.a == DType::f32 && ml.math == GemmMath::exact; }

std::string_view gemm_shape_class(const Mainloop& ml, const Shape& s) {
  // The contiguous dimension of each operand: A row-major K, col-major M;
  // B row-major N, col-major K. 16-byte loads need each a multiple of 16
  // bytes (8 16-bit elements, 4 f32). ("ld8": 16-byte loads, whatever the
  // type, the exact-f32 FFMA kernel's included.)
  const std::int64_t a_contig = ml.a_layout == Layout::row ? s.k : s.m;
  const std::int64_t b_contig = ml.b_layout == Layout::col ? s.k : s.n;
  const std::int64_t per_chunk = 16 / static_cast<std::int64_t>(size_of(ml.a));
  const bool ld8 = a_contig % per_chunk == 0 && b_contig % per_chunk == 0;
  const bool n4 = s.n % 4 == 0;
  // Note [Strided operands]: a strided operand's flag (never its ld's value)
  // follows, "/lda", "/ldb", "/ldb1"; a dense shape's class is as it was. An
  // ld's alignment is checked at launch, with the pointers'.
  // Note [Batched GEMM]: a batch count above 1 adds "/bat" last.
  const int strided = (gemm_operand_strided(ml, s, 0) ? 1 : 0) | (gemm_operand_strided(ml, s, 1) ? 2 : 0) |
                      (gemm_operand_strided(ml, s, 2) ? 4 : 0);
  static const std::array<std::string, 64> classes = [] {
    std::array<std::string, 64> out;
    for (int c = 0; c < 64; ++c)
      out[static_cast<std::size_t>(c)] =
          fmt::format("{}/{}{}{}{}{}", c & 16 ? "ld8" : "ld1", c & 8 ? "n4" : "n1", c & 1 ? "/lda" : "",
                      c & 2 ? "/ldb" : "", c & 4 ? "/ldb1" : "", c & 32 ? "/bat" : "");
    return out;
  }();
  const std::size_t dense = static_cast<std::size_t>((ld8 ? 16 : 0) | (n4 ? 8 : 0) | strided);
  if (!epilogue_strided(s)) return classes[dense | (s.batch > 1 ? 32u : 0u)];
  // Note [Strided epilogue tensors]: each strided tensor's flag before "/bat".
  std::string c = classes[dense] + tensor_ld_flags(s);
  if (s.batch > 1) c += "/bat";
  return interned_shape_class(std::move(c));
}

bool gemm_staged_epilogue(const GemmTile& t) {
  const auto [mi, ni] = warp_fragments(t);
  return mi * ni >= 16;
}

std::uint32_t gemm_block_shared_bytes(const GemmTile& t, int operand_bytes, bool dual) {
  const std::uint32_t ring = gemm_shared_bytes(t, operand_bytes, dual);
  if (!gemm_staged_epilogue(t)) return ring;
  const auto warps = static_cast<std::uint32_t>(t.warps_m * t.warps_n);
  const auto wtm = static_cast<std::uint32_t>(t.bm / t.warps_m), wtn = static_cast<std::uint32_t>(t.bn / t.warps_n);
  return std::max(ring, (dual ? 2u : 1u) * warps * wtm * (wtn + 4) * 4u);
}

std::uint32_t gemm_shared_bytes(const GemmTile& t, int operand_bytes, bool dual) {
  return static_cast<std::uint32_t>(t.stages) * static_cast<std::uint32_t>(t.bm + (dual ? 2 : 1) * t.bn) *
         static_cast<std::uint32_t>(t.bk) * static_cast<std::uint32_t>(operand_bytes);
}

GemmPlan plan_gemm(const KernelPlan& plan) {
  GemmPlan g;
  g.plan = &plan;
  if (const auto* w = std::get_if<WgmmaTile>(&plan.tile))
    g.wgmma = *w;
  else if (const auto* v = std::get_if<WaveTile>(&plan.tile))
    g.wave = *v;
  else
    g.tile = std::get<GemmTile>(plan.tile);
  g.a_kmajor = plan.spec->mainloop.a_layout == Layout::row;
  g.b_kmajor = plan.spec->mainloop.b_layout == Layout::col;
  g.simt = !g.wave && gemm_is_simt(plan.spec->mainloop);  // a wave tile computes f32 in its own template
  g.operand_bytes = static_cast<int>(size_of(plan.spec->mainloop.a));
  g.ld8 = plan.shape_class.starts_with("ld8");
  g.n4 = plan.shape_class.substr(0, 6).ends_with("/n4");  // "ld8/n4", then any strided flags
  g.vector_only = g.ld8 && plan.path == KernelPath::fastest;
  g.dual = plan.spec->mainloop.kind == MainloopKind::dual_gemm;
  for (int i = 0; i < 3; ++i) g.strided[i] = gemm_operand_strided(plan.spec->mainloop, plan.shape, i);
  g.batched = plan.shape_class.ends_with("/bat");
  return g;
}

// What every GEMM kernel's parameters start with: the operands (a dual
// GEMM's B0 is `p.b`, its B1 `p.b1`), the graph's tensors, M, N, K, the
// dropout seed and offset and the scales.
void operand_params(const GemmPlan& g, ParamLayout& layout) {
  const KernelPlan& plan = *g.plan;
  const auto operand = storage_type_name(plan.spec->mainloop.a);
  layout.add_pointer(ParamRole::input, 0, "a", operand);
  layout.add_pointer(ParamRole::input, 1, "b", operand);
  if (g.dual) layout.add_pointer(ParamRole::input, 2, "b1", operand);
  layout.add_graph_tensors(plan, g.dual ? 3 : 2);  // after the operands
  layout.add(ParamRole::dim_m, 0, "m", "long long m", 8, 8);
  layout.add(ParamRole::dim_n, 0, "n", "long long n", 8, 8);
  layout.add(ParamRole::dim_k, 0, "k", "long long k", 8, 8);
  // Note [Strided operands]: a strided operand's leading dimension; a dense
  // one's is M, N or K (operand_ld_vars), and its kernel has no field.
  constexpr const char* ld_names[] = {"lda", "ldb", "ldb1"};
  for (std::uint32_t i = 0; i < 3; ++i)
    if (g.strided[i]) layout.add(ParamRole::ld, i, ld_names[i], fmt::format("long long {}", ld_names[i]), 8, 8);
  // Note [Strided epilogue tensors]: a strided full tensor's ld, input i
  // binding after the operands; a dense one's is N and has no field.
  layout.add_tensor_lds(plan, g.dual ? 3 : 2);
  batch_params(g, layout);
  layout.add_rng_and_scalars(plan);
}

// Each operand's leading dimension as the loaders read it, for either of its
// layouts: `p.lda` where strided, else the dense one (A: K-major K, M-major M;
// B: K-major K, N-major N). A single GEMM's B1 is its B.
TemplateVars operand_ld_vars(const GemmPlan& g) {
  const bool b1 = g.dual ? g.strided[2] : g.strided[1];
  const char* b1_field = g.dual ? "p.ldb1" : "p.ldb";
  return {{"lda_kmajor", g.strided[0] ? "p.lda" : "p.k"},  {"lda_mmajor", g.strided[0] ? "p.lda" : "p.m"},
          {"ldb_kmajor", g.strided[1] ? "p.ldb" : "p.k"},  {"ldb_nmajor", g.strided[1] ? "p.ldb" : "p.n"},
          {"ldb1_kmajor", b1 ? b1_field : "p.k"},          {"ldb1_nmajor", b1 ? b1_field : "p.n"}};
}

std::string tensor_row_stride(const TensorPlan& t) { return t.strided ? "p.ld_" + t.field : "p.n"; }

// The bindings of the mainloop's operands, in parameter order.
std::vector<std::string> operand_bindings(const GemmPlan& g) {
  std::vector<std::string> out;
  for (std::string_view name : names::gemm_operand_names(g.plan->spec->mainloop.kind)) out.emplace_back(name);
  return out;
}

namespace {

void layout_params(const GemmPlan& g, ParamLayout& layout) {
  operand_params(g, layout);
  if (g.ld8 && !g.vector_only) layout.add(ParamRole::vector_flag, 0, "vectorized", "int vectorized", 4, 4);
  if (g.tile.split_k > 1) {
    layout.add(ParamRole::workspace, 0, "tile_flags", "unsigned* tile_flags", 8, 8);
    layout.add(ParamRole::workspace, 1, "partials", "float* partials", 8, 8);
  }
  column_sum_params(g, layout);  // Note [GEMM column sums]: after split-K's, if any
}

// Draws shared by a lane pair (one Philox call per four elements) where the
// four lie in one row (philox4, N % 4 == 0); else per element in `element`.
bool shared_draws(const GemmPlan& g, const Node& n) { return n.rng == RngMode::philox4 && g.n4; }

// Note [Staged epilogue] (templates/gemm_mma.cu.in): warp tiles of 16 or more
// fragments (64x32 and up) stage their accumulators through shared memory and
// run the chain in a rolled loop, four consecutive columns per lane.
// The wgmma kernel always stages (Note [Staged wgmma epilogue], templates/gemm_sm90.cu.in).
// The wave kernel always stages (templates/gemm_wave.cu.in).
bool staged_epilogue(const GemmPlan& g) { return !g.simt && (g.wgmma || g.wave || gemm_staged_epilogue(g.tile)); }

// d<k>[4]: the draws of four consecutive columns col0..col0+3 of `row` (col0 a
// multiple of 4, N % 4 == 0): exactly one Philox call (docs/design.md §4).
std::string row_quad_draws(const GemmPlan& g, std::size_t k, std::uint32_t stream, const std::string& pad) {
  return fmt::format(
      "{0}unsigned d{1}[4];  // dropout stream {2}: one Philox call per four elements\n"
      "{0}{{\n{0}  const ef_u32x4 w = ef_philox4_draws(rng.seed, rng.offset, {2}u, "
      "(unsigned long long)({3}) >> 2);\n"
      "{0}  d{1}[0] = w.x;\n{0}  d{1}[1] = w.y;\n{0}  d{1}[2] = w.z;\n{0}  d{1}[3] = w.w;\n{0}}}\n",
      pad, k, stream, draw_index(g, "row * p.n + col0"));
}

}  // namespace

// The staged epilogue's shared draws: a lane's four columns are one Philox call.
std::string emit_staged_draws(const GemmPlan& g) {
  const KernelPlan& plan = *g.plan;
  std::string s;
  for (std::size_t k = 0; k < plan.dropouts.size(); ++k) {
    const Node& n = plan.spec->graph.node(plan.dropouts[k]);
    if (!shared_draws(g, n)) continue;
    s += row_quad_draws(g, k, n.stream, "    ");
  }
  if (s.empty()) return "    // no shared dropout draws";
  s.pop_back();
  return s;
}

namespace {

// Note [Early draws]: a dropout draw depends only on the element's position,
// so where a thread's shared draws fit in 32 registers (small warp tiles, the
// launch-bound shapes) they are computed right after the first tiles' loads
// are issued, under the load latency, instead of after the mainloop where
// they were the epilogue's critical path (+1.5 us at 64x128x256, docs/perf/gemm.md).
// Split-K kernels skip it: only their last split runs the epilogue.
bool early_draws(const GemmPlan& g) {
  if (g.simt || g.wgmma || g.tile.split_k > 1 || staged_epilogue(g)) return false;
  const KernelPlan& plan = *g.plan;
  int shared = 0;
  for (const auto id : plan.dropouts) shared += shared_draws(g, plan.spec->graph.node(id)) ? 1 : 0;
  const auto [mi, ni] = warp_fragments(g.tile);
  return shared > 0 && shared * mi * ni * 4 <= 32;
}

std::string emit_early_draws(const GemmPlan& g) {
  if (!early_draws(g)) return "  // dropout draws (if any) are computed in the epilogue";
  const KernelPlan& plan = *g.plan;
  std::string s = "  // Every fragment's dropout draws, while the first tiles load (Note [Early draws]).\n";
  for (std::size_t k = 0; k < plan.dropouts.size(); ++k)
    if (shared_draws(g, plan.spec->graph.node(plan.dropouts[k]))) s += fmt::format("  unsigned dd{}[MI][NI][4];\n", k);
  s += "#pragma unroll\n  for (int mi = 0; mi < MI; ++mi)\n#pragma unroll\n    for (int ni = 0; ni < NI; ++ni) {\n"
       "      const long long row_g = m0 + wm + mi * 16 + (lane >> 2);\n"
       "      const long long col0 = n0 + wn + ni * 8 + (lane & 3) * 2;\n";
  for (std::size_t k = 0; k < plan.dropouts.size(); ++k) {
    const Node& n = plan.spec->graph.node(plan.dropouts[k]);
    if (!shared_draws(g, n)) continue;
    s += fmt::format(
        "      ef_mma_philox4_draws(dd{0}[mi][ni], rng.seed, rng.offset, {1}u, (unsigned long long)({2}),\n"
        "                           (unsigned long long)({3}));\n",
        k, n.stream, draw_index(g, "row_g * p.n + (col0 & ~3LL)"), draw_index(g, "(row_g + 8) * p.n + (col0 & ~3LL)"));
  }
  s += "    }";
  return s;
}

std::string emit_fragment_draws(const GemmPlan& g) {
  const KernelPlan& plan = *g.plan;
  std::string s;
  if (early_draws(g)) {
    for (std::size_t k = 0; k < plan.dropouts.size(); ++k)
      if (shared_draws(g, plan.spec->graph.node(plan.dropouts[k])))
        s += fmt::format("      const unsigned (&d{0})[4] = dd{0}[mi][ni];  // computed early\n", k);
    s.pop_back();
    return s;
  }
  for (std::size_t k = 0; k < plan.dropouts.size(); ++k) {
    const Node& n = plan.spec->graph.node(plan.dropouts[k]);
    if (!shared_draws(g, n)) continue;
    if (g.simt) {  // a thread's four consecutive columns are one Philox call
      s += row_quad_draws(g, k, n.stream, "      ");
      continue;
    }
    s += fmt::format(
        "      unsigned d{0}[4];  // dropout stream {1}: one Philox call per four elements, shared by a lane pair\n"
        "      ef_mma_philox4_draws(d{0}, rng.seed, rng.offset, {1}u, (unsigned long long)({2}),\n"
        "                           (unsigned long long)({3}));\n",
        k, n.stream, draw_index(g, "row_g * p.n + (col0 & ~3LL)"), draw_index(g, "(row_g + 8) * p.n + (col0 & ~3LL)"));
  }
  if (s.empty()) return "      // no shared dropout draws";
  s.pop_back();
  return s;
}

std::string load_expression(const GemmPlan& g, const TensorPlan& t) {
  switch (t.broadcast) {
    case Broadcast::full: return fmt::format("ef_ldg_float({} + rc * {} + cc)", tensor_pointer(g, t), tensor_row_stride(t));
    case Broadcast::row: return fmt::format("ef_ldg_float(p.{} + cc)", t.field);
    case Broadcast::col: return fmt::format("ef_ldg_float(p.{} + rc)", t.field);
    case Broadcast::scalar: return fmt::format("ef_ldg_float(p.{})", t.field);
  }
  return {};
}

// Note [Early loads]: in a launch-bound GEMM (a few microseconds) the
// epilogue's first global load (a bias nobody has read yet) costs a whole
// memory latency after the mainloop. Where a thread's values of the epilogue
// inputs fit in 32 registers (small warp tiles; the same bound as early
// draws), they are loaded before the mainloop, under its loads.
int early_registers(const GemmPlan& g, const TensorPlan& t) {
  const auto [mi, ni] = warp_fragments(g.tile);
  switch (t.broadcast) {
    case Broadcast::full: return mi * ni * 4;
    case Broadcast::row: return ni * 2;
    case Broadcast::col: return mi * 2;
    case Broadcast::scalar: return 1;
  }
  return 0;
}

bool early_loads(const GemmPlan& g) {
  if (g.simt || g.wgmma || g.tile.split_k > 1 || g.plan->inputs.empty() || staged_epilogue(g)) return false;
  const auto [mi, ni] = warp_fragments(g.tile);
  int regs = 0;
  for (const TensorPlan& t : g.plan->inputs) regs += early_registers(g, t);
  return mi * ni <= 8 && regs <= 32;
}

std::string emit_early_loads(const GemmPlan& g) {
  if (!early_loads(g)) return "  // epilogue inputs (if any) are loaded in the epilogue";
  std::string s = "  // The epilogue's inputs, loaded under the mainloop's first loads (Note [Early loads]).\n";
  const char* row = "m0 + wm + mi * 16 + (lane >> 2) + j * 8";
  const char* col = "n0 + wn + ni * 8 + (lane & 3) * 2 + j";
  for (const TensorPlan& t : g.plan->inputs) {
    switch (t.broadcast) {
      case Broadcast::full:
        s += fmt::format(
            "  float {0}_e[MI][NI][4];\n#pragma unroll\n  for (int mi = 0; mi < MI; ++mi)\n#pragma unroll\n"
            "    for (int ni = 0; ni < NI; ++ni)\n#pragma unroll\n      for (int e = 0; e < 4; ++e) {{\n"
            "        const long long r = m0 + wm + mi * 16 + (lane >> 2) + (e >> 1) * 8, c = n0 + wn + ni * 8 + (lane & 3) * 2 + (e & 1);\n"
            "        {0}_e[mi][ni][e] = ef_ldg_float({1} + (r < p.m ? r : p.m - 1) * {2} + (c < p.n ? c : p.n - 1));\n"
            "      }}\n",
            t.field, tensor_pointer(g, t), tensor_row_stride(t));
        break;
      case Broadcast::row:
        s += fmt::format(
            "  float {0}_e[NI][2];\n#pragma unroll\n  for (int ni = 0; ni < NI; ++ni)\n#pragma unroll\n"
            "    for (int j = 0; j < 2; ++j) {{\n      const long long c = {1};\n"
            "      {0}_e[ni][j] = ef_ldg_float(p.{0} + (c < p.n ? c : p.n - 1));\n    }}\n",
            t.field, col);
        break;
      case Broadcast::col:
        s += fmt::format(
            "  float {0}_e[MI][2];\n#pragma unroll\n  for (int mi = 0; mi < MI; ++mi)\n#pragma unroll\n"
            "    for (int j = 0; j < 2; ++j) {{\n      const long long r = {1};\n"
            "      {0}_e[mi][j] = ef_ldg_float(p.{0} + (r < p.m ? r : p.m - 1));\n    }}\n",
            t.field, row);
        break;
      case Broadcast::scalar: s += fmt::format("  const float {0}_e = ef_ldg_float(p.{0});\n", t.field); break;
    }
  }
  s.pop_back();
  return s;
}

std::string early_value(const TensorPlan& t) {
  switch (t.broadcast) {
    case Broadcast::full: return t.field + "_e[mi][ni][e]";
    case Broadcast::row: return t.field + "_e[ni][e & 1]";
    case Broadcast::col: return t.field + "_e[mi][e >> 1]";
    case Broadcast::scalar: return t.field + "_e";
  }
  return {};
}

// The element's inputs, loaded before its bounds check at a clamped (always
// valid) position: unconditional read-only loads let the compiler issue every
// fragment's loads at once instead of one fragment's latency after another's
// (measured: +1.5 us at 128x256x256 for one bias load per element, docs/perf/gemm.md).
}  // namespace

std::string emit_element_loads(const GemmPlan& g, const std::string& pad, bool staged,
                               const std::vector<std::string>& held) {
  const KernelPlan& plan = *g.plan;
  if (plan.inputs.empty()) return pad + "// no inputs to load";
  const auto held_value = [&](std::size_t i) { return i < held.size() ? held[i] : std::string(); };
  if (!staged && early_loads(g)) {
    std::string s;
    for (const TensorPlan& t : plan.inputs) s += fmt::format("        const float {}_v = {};\n", t.field, early_value(t));
    s.pop_back();
    return s;
  }
  bool rows = false, cols = false;
  for (std::size_t i = 0; i < plan.inputs.size(); ++i) {
    const Broadcast b = plan.inputs[i].broadcast;
    if (!held_value(i).empty()) continue;
    rows |= b == Broadcast::full || b == Broadcast::col;
    cols |= b == Broadcast::full || b == Broadcast::row;
  }
  std::string s;
  if (rows) s += pad + "const long long rc = row < p.m ? row : p.m - 1;\n";
  if (cols) s += pad + "const long long cc = col < p.n ? col : p.n - 1;\n";
  for (std::size_t i = 0; i < plan.inputs.size(); ++i) {
    const TensorPlan& t = plan.inputs[i];
    const std::string value = held_value(i).empty() ? load_expression(g, t) : held_value(i);
    s += fmt::format("{}const float {}_v = {};\n", pad, t.field, value);
  }
  s.pop_back();
  return s;
}

// One output element at (row, col), linear index `at`: its inputs, its own
// draws where they are not shared, the epilogue, the stores. `accumulator` is
// acc's (acc0's) expression at the element; a dual GEMM's acc1 is the same
// expression on the array named `acc1` (`quad` -> `quad1`, `acc` -> `acc1`).
std::string emit_element(const GemmPlan& g, const EpilogueContract& contract, std::string_view accumulator,
                         const std::string& pad, bool quads, std::string_view column_slot) {
  const KernelPlan& plan = *g.plan;
  const Graph& graph = plan.spec->graph;
  const std::string at = g.batched ? "(batch_base + at)" : "at";  // the element's dropout index
  std::string s;
  for (std::size_t k = 0; k < plan.dropouts.size(); ++k) {
    const Node& n = graph.node(plan.dropouts[k]);
    if (shared_draws(g, n)) continue;
    s += n.rng == RngMode::philox4
             ? fmt::format("{}const unsigned d{}e = ef_philox4_draw(rng.seed, rng.offset, {}u, (unsigned long long){});\n",
                           pad, k, n.stream, at)
             : fmt::format("{}const unsigned d{}e = ef_triton_draw(rng.seed, rng.offset, (unsigned long long){});\n", pad,
                           k, at);
  }
  s += pad + "float";
  for (std::size_t k = 0; k < plan.outputs.size(); ++k) s += fmt::format("{} {}_v", k ? "," : "", plan.outputs[k].field);
  s += ";\n";
  const std::string call = epilogue_call(plan, contract, [&](const EpilogueArg& a) -> std::string {
    switch (a.kind) {
      case EpilogueArg::Kind::accumulator: {
        if (a.index == 0) return std::string(accumulator);
        const std::size_t bracket = accumulator.find('[');
        return fmt::format("{}1{}", accumulator.substr(0, bracket), accumulator.substr(bracket));
      }
      case EpilogueArg::Kind::input: return fmt::format("{}_v", plan.inputs[a.index].field);
      case EpilogueArg::Kind::draw:
        return shared_draws(g, graph.node(plan.dropouts[a.index])) ? fmt::format("d{}[e]", a.index)
                                                                    : fmt::format("d{}e", a.index);
      case EpilogueArg::Kind::output: return fmt::format("{}_v", plan.outputs[a.index].field);
    }
    return {};
  });
  s += pad + call + ";\n";
  for (const TensorPlan& t : plan.outputs) {
    if (is_column_sum(graph.node(t.value))) {
      // Note [GEMM column sums]: the lane's sum over its rows. Unguarded
      // quads run past the last row too (Note [Unguarded quads]): masked here.
      s += fmt::format("{}{}{}_s{} += {}_v;  // a column term\n", pad, quads ? "if (row < p.m) " : "", t.field,
                       column_slot, t.field);
      continue;
    }
    // Note [Strided epilogue tensors]: `at` is the element's dense index (its
    // dropout draws' too); a strided output's element is at row * ld + col.
    const std::string place = t.strided ? fmt::format("row * {} + col", tensor_row_stride(t)) : "at";
    s += quads ? fmt::format("{}{}_q[e] = {}_v;\n", pad, t.field, t.field)
               : fmt::format("{}{}[{}] = ef_from_float<{}>({}_v);\n", pad, tensor_pointer(g, t), place,
                             storage_type_name(t.dtype), t.field);
  }
  s.pop_back();
  return s;
}

// Note [Staged epilogue] stores: with N % 4 == 0 and the outputs aligned to
// four elements (checked at launch, KernelSource::output_alignment), a lane's
// four outputs are one 8- or 16-byte store; past the edge, element stores.
bool vector_stores(const GemmPlan& g) { return staged_epilogue(g) && g.n4 && g.vector_only; }

// Note [Unguarded quads]: with vector stores the quad's store checks the
// bounds, so the chain of each of its four elements runs unguarded: it reads
// staged accumulators and clamped inputs and has no side effect but the store,
// so an element past the edge is computed and never stored. A branch an
// element (a 64-bit compare, BSSY/BRA/BSYNC in the SASS) cost ~5 of the ~12
// instructions of a bias+ReLU element (docs/perf/gemm.md, unguarded quads).
std::string emit_staged_quads(const GemmPlan& g) {
  if (!vector_stores(g)) return "    constexpr bool guard_elements = true;  // element stores: each checks its bounds";
  std::string s = "    constexpr bool guard_elements = false;  // the quad's store checks them (Note [Unguarded quads])\n";
  for (const TensorPlan& t : g.plan->outputs)
    if (!is_column_sum(g.plan->spec->graph.node(t.value))) s += fmt::format("    float {}_q[4];\n", t.field);
  s.pop_back();
  return s;
}

std::string emit_staged_stores(const GemmPlan& g) {
  if (!vector_stores(g)) return "    // (stored element by element above)";
  const Graph& graph = g.plan->spec->graph;
  std::string s = "    if (row < p.m && col0 + 3 < p.n) {\n";
  for (const TensorPlan& t : g.plan->outputs)
    if (!is_column_sum(graph.node(t.value)))
      s += fmt::format("      ef_store4({1} + row * {2} + col0, {0}_q);\n", t.field, tensor_pointer(g, t),
                       tensor_row_stride(t));
  s += "    } else if (row < p.m) {\n#pragma unroll\n      for (int e = 0; e < 4; ++e)\n        if (col0 + e < p.n) {\n";
  for (const TensorPlan& t : g.plan->outputs)
    if (!is_column_sum(graph.node(t.value)))
      s += fmt::format("          {2}[row * {3} + col0 + e] = ef_from_float<{1}>({0}_q[e]);\n", t.field,
                       storage_type_name(t.dtype), tensor_pointer(g, t), tensor_row_stride(t));
  s += "        }\n    }";
  return s;
}

TemplateVars staged_vars(const GemmPlan& g, const EpilogueContract& contract, int indent, bool staged) {
  const std::string pad(static_cast<std::size_t>(indent), ' '), body = pad + "  ";
  if (!staged) {
    const std::string none = "    // (not staged)";
    return {{"staged_draws", none},
            {"staged_loads", pad + "// (not staged)"},
            {"staged_element", body + "// (not staged)"},
            {"staged_quads", none},
            {"staged_stores", none}};
  }
  return {{"staged_draws", emit_staged_draws(g)},
          {"staged_loads", emit_element_loads(g, pad, true)},
          {"staged_element", emit_element(g, contract, "quad[e]", body, vector_stores(g), "[e]")},
          {"staged_quads", emit_staged_quads(g)},
          {"staged_stores", emit_staged_stores(g)}};
}

void bind_epilogue_tensors(const GemmPlan& g, KernelSource& ks) {
  const KernelPlan& plan = *g.plan;
  const bool quads = vector_stores(g);
  bind_graph_tensors(plan, ks, [&](const TensorPlan& t) {
    const bool output = &t >= plan.outputs.data() && &t < plan.outputs.data() + plan.outputs.size();
    // A col_sum's [N] output is stored element by element.
    const bool column_sum = is_column_sum(plan.spec->graph.node(t.value));
    return quads && output && !column_sum ? 4 * static_cast<int>(size_of(t.dtype)) : 0;
  });
}

namespace {

std::string describe(const KernelPlan& plan) {
  const Mainloop& ml = plan.spec->mainloop;
  const std::string chain = describe_chain(plan);  // " | out ..." when the chain has no op
  return fmt::format("{} {}:{} x {}:{}{}{}{}", to_string(ml.kind), to_string(ml.a), to_string(ml.a_layout), to_string(ml.b),
                     to_string(ml.b_layout), ml.math == GemmMath::tf32 ? " (tf32)" : "",
                     chain.starts_with(" |") ? "" : " -> ", chain);
}

}  // namespace

TemplateVars common_vars(const KernelPlan& plan, const EpilogueContract& contract, const ParamLayout& layout) {
  return {{"kernel", plan.kernel_name},
          {"description", describe(plan)},
          {"rng_state", rng_state_setup(plan, "  ")},
          {"param_fields", layout.fields_text()},
          {"epilogue_signature", epilogue_signature(plan, contract)},
          {"epilogue_body", epilogue_body(plan)}};
}

KernelSource emit_gemm(const GemmPlan& g) {
  EPIFUSE_ASSERT(!g.wgmma && !g.wave, "emit_gemm: a GemmTile kernel (the wgmma and wave mainloops have their own)");
  const KernelPlan& plan = *g.plan;
  KernelSource ks;
  // Bindings: the operands (16-byte loads need them aligned), then the graph's
  // tensors, read and written element by element.
  const int operand_alignment = g.ld8 ? 16 : 0;
  ks.inputs = operand_bindings(g);
  ks.input_alignment.assign(ks.inputs.size(), operand_alignment);
  bind_epilogue_tensors(g, ks);
  ParamLayout layout;
  layout_params(g, layout);
  ks.requires_alignment = g.vector_only;
  ks.shared_bytes = g.simt ? 0 : gemm_block_shared_bytes(g.tile, g.operand_bytes, g.dual);  // the SIMT kernel's are static

  const EpilogueContract contract = epilogue_contract(plan);
  const char* vector_flag = !g.ld8 ? "constexpr bool vec = false;  // operands not 16-byte loadable: element loads"
                            : g.vector_only ? "constexpr bool vec = true;  // the host checked A and B are 16-byte aligned"
                                            : "const bool vec = p.vectorized != 0;";
  TemplateVars vars = common_vars(plan, contract, layout);
  vars.insert({
      {"dual", g.dual ? "true" : "false"},
      {"bm", std::to_string(g.tile.bm)},
      {"bn", std::to_string(g.tile.bn)},
      {"bk", std::to_string(g.tile.bk)},
      {"group_m", std::to_string(g.tile.group_m)},
      {"vector_flag", vector_flag},
      {"a_kmajor", g.a_kmajor ? "true" : "false"},
      {"b_kmajor", g.b_kmajor ? "true" : "false"},
      {"fragment_draws", emit_fragment_draws(g)},
      {"element_loads", emit_element_loads(g)},
      {"element", emit_element(g, contract, g.simt ? "acc[0][jg * 4 + e]" : "acc[mi][ni][e]", "          ", false,
                               g.simt ? "[jg * 4 + e]" : "[ni][e & 1]")},
  });
  vars.merge(operand_ld_vars(g));
  vars.merge(batch_vars(g, "(long long)blockIdx.z", "  "));
  if (!g.simt) {
    vars.emplace("operand_t", std::string(storage_type_name(plan.spec->mainloop.a)));
    vars.emplace("operand_bits", g.operand_bytes == 4 ? "unsigned" : "unsigned short");
    vars.emplace("stages", std::to_string(g.tile.stages));
    vars.emplace("warps_m", std::to_string(g.tile.warps_m));
    vars.emplace("warps_n", std::to_string(g.tile.warps_n));
    vars.emplace("split_k", std::to_string(g.tile.split_k));
    vars.emplace("early_draws", emit_early_draws(g));
    vars.emplace("early_loads", emit_early_loads(g));
    const bool staged = staged_epilogue(g);
    vars.emplace("staged", staged ? "1" : "0");
    vars.merge(staged_vars(g, contract, 6, staged));
    vars.emplace("column_sum_decls", emit_column_sum_decls(g, staged ? "[4]" : "[NI][2]"));
    vars.emplace("column_sums", emit_column_sums(g, staged));
  } else {  // Note [GEMM column sums]: a thread's TN columns
    vars.emplace("column_sum_decls", emit_column_sum_decls(g, "[TN]"));
    vars.emplace("column_sums", emit_simt_column_sums(g));
  }
  layout.finish(ks);
  const char* templ = g.simt ? "gemm_simt.cu.in" : "gemm_mma.cu.in";
  ks.text = render_template(embedded_template(templ), vars, templ);
  return ks;
}

}  // namespace epifuse
