// Elementwise pass 2: fill templates/elementwise.cu.in. Generated identifiers
// only: in<k>/out<k> pointers, v<node> values, d<k> draws.
#include <algorithm>

#include "codegen/elementwise/elementwise.hpp"
#include "codegen/epilogue.hpp"
#include "codegen/param_layout.hpp"
#include "codegen/template_engine.hpp"
#include "epifuse/errors.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

namespace {

// Broadcast operands and strided tensors need each vector's row and column.
bool needs_coordinates(const ElementwisePlan& e) { return e.needs_row_index || e.needs_col_index || e.strided_rows; }

// Note [Division by N]: a strided shape's 32-bit kernel finds the row by an exact
// multiply-high, whose result its loads wait for; a dense kernel keeps the fp64
// reciprocal (measured level or 0.6-0.8% faster there, where only a broadcast
// operand's load waits on it).
bool exact_division(const ElementwisePlan& e) { return e.index32 && e.strided_rows; }

// A full tensor's offset in the flat kernel: e0, or a strided tensor's r0 * ld + c0,
// in 32 bits where every offset fits them (fits_index32 counts the lds).
std::string flat_offset(const ElementwisePlan& e, const TensorPlan& t) {
  if (!t.strided) return "e0";
  return e.index32 ? fmt::format("r0 * (int)p.ld_{} + c0", t.field) : full_offset(t, "r0");
}

void layout_params(const ElementwisePlan& e, ParamLayout& layout) {
  layout.add_graph_tensors(*e.plan, 0);
  layout.add(ParamRole::dim_m, 0, "m", "long long m", 8, 8);
  layout.add(ParamRole::dim_n, 0, "n", "long long n", 8, 8);
  layout.add(ParamRole::inv_n, 0, "n_inv", "double n_inv", 8, 8);
  if (exact_division(e)) layout.add(ParamRole::n_magic, 0, "n_magic", "unsigned long long n_magic", 8, 8);
  layout.add_tensor_lds(*e.plan, 0);  // Note [Strided rows]: none for a dense shape
  layout.add_rng_and_scalars(*e.plan);
  if (!e.vector_only) layout.add(ParamRole::vector_flag, 0, "vectorized", "int vectorized", 4, 4);
}

std::string emit_coordinates(const ElementwisePlan& plan) {
  if (!needs_coordinates(plan)) return "    // no broadcast operand: no coordinates";
  if (exact_division(plan))  // e0 < 2^30: one multiply-high and a shift (Note [Division by N])
    return "    const int n = (int)p.n;\n"
           "    const int r0 = (int)(__umulhi((unsigned)e0 << 1, (unsigned)p.n_magic) >> (unsigned)(p.n_magic >> 32)), "
           "c0 = e0 - r0 * n;";
  // e0 / n by the rounded fp64 reciprocal and one correction step: exact for
  // e0 < 2^52 (M*N <= 2^48 by verify_shape), and far cheaper than a 64-bit
  // integer division per vector (docs/perf/elementwise.md).
  const char* t = plan.index32 ? "int" : "long long";
  return fmt::format(
      "    const {0} n = ({0})p.n;\n"
      "    {0} r0 = ({0})((double)e0 * p.n_inv), c0 = e0 - r0 * n;\n"
      "    if (c0 < 0) {{ --r0; c0 += n; }} else if (c0 >= n) {{ ++r0; c0 -= n; }}",
      t);
}

// Loads every input into <field>_v[VEC] as fp32. One branch for all inputs:
// the vector path (all pointers aligned, the vector inside the tensor) issues
// every 16-byte load back to back; the scalar path serves the tail and
// misaligned pointers, with per-element coordinates since a vector may wrap
// rows there. A vector-only kernel has no branch and no scalar path.
std::string emit_loads(const ElementwisePlan& plan) {
  // With N % VEC == 0 a whole vector lies in one row: its slice of a row
  // vector is contiguous, and its row index is r0.
  const bool one_row = plan.row_vectors_aligned;
  const bool any_broadcast = plan.needs_row_index || plan.needs_col_index;
  std::string decl = "    float", vec, scalar;
  bool vec_needs_coords = false;
  for (std::size_t k = 0; k < plan.plan->inputs.size(); ++k) {
    const auto& t = plan.plan->inputs[k];
    const auto type = storage_type_name(t.dtype);
    const std::string& f = t.field;
    decl += fmt::format("{} {}_v[VEC]", k ? "," : "", f);
    switch (t.broadcast) {
      case Broadcast::full: {
        const std::string at = flat_offset(plan, t);  // Note [Strided rows]
        vec += fmt::format("      ef_load_vec<{}, VEC>(p.{} + {}, {}_v);\n", type, f, at, f);
        scalar += fmt::format(
            "#pragma unroll\n      for (int j = 0; j < VEC; ++j) {}_v[j] = e0 + j < total ? ef_to_float(p.{}[{} + j]) : 0.0f;\n",
            f, f, at);
        break;
      }
      case Broadcast::row:
        if (one_row) {
          vec += fmt::format("      ef_load_vec<{}, VEC>(p.{} + c0, {}_v);\n", type, f, f);
        } else {
          vec_needs_coords = true;
          vec += fmt::format("#pragma unroll\n      for (int j = 0; j < VEC; ++j) {}_v[j] = ef_to_float(p.{}[col[j]]);\n", f, f);
        }
        scalar += fmt::format("#pragma unroll\n      for (int j = 0; j < VEC; ++j) {}_v[j] = ef_to_float(p.{}[col[j]]);\n", f, f);
        break;
      case Broadcast::col:
        if (one_row) {
          vec += fmt::format("      {{ const float s = ef_to_float(p.{}[r0]);\n#pragma unroll\n      for (int j = 0; j < VEC; ++j) {}_v[j] = s; }}\n", f, f);
        } else {
          vec_needs_coords = true;
          vec += fmt::format("#pragma unroll\n      for (int j = 0; j < VEC; ++j) {}_v[j] = ef_to_float(p.{}[row[j]]);\n", f, f);
        }
        scalar += fmt::format(
            "#pragma unroll\n      for (int j = 0; j < VEC; ++j) {}_v[j] = e0 + j < total ? ef_to_float(p.{}[row[j]]) : 0.0f;\n", f, f);
        break;
      case Broadcast::scalar: {
        const std::string line =
            fmt::format("      {{ const float s = ef_to_float(p.{}[0]);\n#pragma unroll\n      for (int j = 0; j < VEC; ++j) {}_v[j] = s; }}\n", f, f);
        vec += line;
        scalar += line;
        break;
      }
    }
  }
  const std::string coords = fmt::format("      {0} row[VEC], col[VEC];\n      ef_element_coords<VEC>(r0, c0, n, row, col);\n",
                                         plan.index32 ? "int" : "long long");
  std::string out = decl + (plan.vector_only ? ";\n    {\n" : ";\n    if (whole) {\n");
  if (vec_needs_coords) out += coords;
  if (plan.vector_only) return out + vec + "    }";
  out += vec + "    } else {\n";
  if (any_broadcast) out += coords;
  out += scalar + "    }";
  return out;
}

std::string emit_draws(const ElementwisePlan& plan) {
  const Graph& g = plan.plan->spec->graph;
  std::string s;
  for (std::size_t k = 0; k < plan.plan->dropouts.size(); ++k) {
    const Node& n = g.node(plan.plan->dropouts[k]);
    s += fmt::format("    unsigned d{}[VEC];  // dropout stream {} ({})\n", k, n.stream, to_string(n.rng));
    if (n.rng == RngMode::philox4) {
      s += fmt::format(
          "#pragma unroll\n    for (int j = 0; j < VEC; j += 4) {{  // one Philox call, four draws\n"
          "      const ef_u32x4 w = ef_philox4_draws(rng.seed, rng.offset, {}u, "
          "(unsigned long long)({}(e0 + j)) >> 2);\n"
          "      d{}[j] = w.x;\n      d{}[j + 1] = w.y;\n      d{}[j + 2] = w.z;\n      d{}[j + 3] = w.w;\n"
          "    }}\n",
          n.stream, plan.index32 ? "(unsigned)" : "", k, k, k, k);
    } else {
      s += fmt::format(
          "#pragma unroll\n    for (int j = 0; j < VEC; ++j) "
          "d{}[j] = ef_triton_draw(rng.seed, rng.offset, (unsigned long long)(e0 + j));\n",
          k);
    }
  }
  if (s.empty()) return "    // no dropout: no draws";
  s.pop_back();
  return s;
}

std::string emit_stores(const ElementwisePlan& plan) {
  std::string vec, scalar;
  for (const auto& t : plan.plan->outputs) {
    const auto type = storage_type_name(t.dtype);
    const std::string at = flat_offset(plan, t);  // Note [Strided rows]
    vec += fmt::format("      ef_store_vec<{}, VEC>(p.{} + {}, {}_v);\n", type, t.field, at, t.field);
    scalar += fmt::format("        if (e0 + j < total) p.{}[{} + j] = ef_from_float<{}>({}_v[j]);\n", t.field, at, type,
                          t.field);
  }
  if (plan.vector_only) return "    {\n" + vec + "    }";
  return "    if (whole) {\n" + vec + "    } else {\n#pragma unroll\n      for (int j = 0; j < VEC; ++j) {\n" +
         scalar + "      }\n    }";
}

int alignment_needed(const ElementwisePlan& plan, const TensorPlan& t) {
  const bool vector_loaded = t.broadcast == Broadcast::full ||
                             (t.broadcast == Broadcast::row && plan.row_vectors_aligned);
  if (!vector_loaded) return 0;
  return static_cast<int>(std::min<std::size_t>(16, plan.tile.vec * size_of(t.dtype)));
}

}  // namespace

std::string emit_vector_epilogue(const ElementwisePlan& e, const EpilogueContract& contract,
                                 const std::function<std::string(std::size_t)>& input, std::string_view indent) {
  const KernelPlan& plan = *e.plan;
  std::string decl = fmt::format("{}float", indent);
  for (std::size_t k = 0; k < plan.outputs.size(); ++k)
    decl += fmt::format("{} {}_v[VEC]", k ? "," : "", plan.outputs[k].field);
  const std::string call = epilogue_call(plan, contract, [&](const EpilogueArg& a) -> std::string {
    switch (a.kind) {
      case EpilogueArg::Kind::input: return input(a.index);
      case EpilogueArg::Kind::draw: return fmt::format("d{}[j]", a.index);
      case EpilogueArg::Kind::output: return fmt::format("{}_v[j]", plan.outputs[a.index].field);
      case EpilogueArg::Kind::accumulator: break;
    }
    EPIFUSE_ASSERT(false, "an elementwise kernel has no accumulator");
    return {};
  });
  return fmt::format("{};\n#pragma unroll\n{}for (int j = 0; j < VEC; ++j)\n{}  {};", decl, indent, indent, call);
}

KernelSource emit_elementwise(const ElementwisePlan& e) {
  const KernelPlan& plan = *e.plan;
  KernelSource ks;
  bind_graph_tensors(plan, ks, [&](const TensorPlan& t) { return alignment_needed(e, t); });
  ks.tile = e.tile;  // vec resolved
  ParamLayout layout;
  layout_params(e, layout);
  ks.requires_alignment = e.vector_only;

  const EpilogueContract contract = epilogue_contract(plan);
  TemplateVars vars{
      {"kernel", plan.kernel_name},
      {"description", describe_chain(plan)},
      {"rng_state", rng_state_setup(plan, "    ")},
      {"param_fields", layout.fields_text()},
      {"epilogue_signature", epilogue_signature(plan, contract)},
      {"epilogue_body", epilogue_body(plan)},
      {"vec", std::to_string(e.tile.vec)},
      {"threads", std::to_string(e.tile.threads)},
      {"index_t", e.index32 ? "int" : "long long"},
      {"whole", e.vector_only ? "// vector-only: M*N % VEC == 0, and the host checked every pointer's alignment"
                              : "const bool whole = p.vectorized && e0 + VEC <= total;"},
      {"coordinates", emit_coordinates(e)},
      {"loads", emit_loads(e)},
      {"draws", emit_draws(e)},
      {"compute", emit_vector_epilogue(
                      e, contract, [&](std::size_t k) { return fmt::format("{}_v[j]", e.plan->inputs[k].field); },
                      "    ")},
      {"stores", emit_stores(e)},
  };
  layout.finish(ks);
  ks.text = render_template(embedded_template("elementwise.cu.in"), vars, "elementwise.cu.in");
  return ks;
}

}  // namespace epifuse
