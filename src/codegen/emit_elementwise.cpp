// Pass 5: fill templates/elementwise.cu.in. Generated identifiers only:
// in<k>/out<k> pointers, v<node> values, d<k> draws.
#include <algorithm>

#include "codegen/kernel_plan.hpp"
#include "codegen/template_engine.hpp"
#include "epifuse/errors.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

namespace {

void layout_params(const KernelPlan& plan, KernelSource& ks, std::string& fields) {
  std::size_t offset = 0;
  auto add = [&](ParamField::Kind kind, std::string name, std::string decl) {
    const std::size_t size = kind == ParamField::Kind::f32 || kind == ParamField::Kind::flag ? 4 : 8;
    offset = (offset + size - 1) / size * size;
    ks.params.push_back({kind, name, offset});
    offset += size;
    fields += fmt::format("  {};\n", decl);
  };
  for (const auto& t : plan.inputs)
    add(ParamField::Kind::pointer, t.field,
        fmt::format("const {}* {}", storage_type_name(t.dtype), t.field));
  for (const auto& t : plan.outputs)
    add(ParamField::Kind::pointer, t.field, fmt::format("{}* {}", storage_type_name(t.dtype), t.field));
  add(ParamField::Kind::i64, "m", "long long m");
  add(ParamField::Kind::i64, "n", "long long n");
  add(ParamField::Kind::f64, "n_inv", "double n_inv");
  add(ParamField::Kind::u64, "seed", "unsigned long long seed");
  add(ParamField::Kind::u64, "offset", "unsigned long long offset");
  for (std::size_t k = 0; k < plan.scales.size(); ++k)
    add(ParamField::Kind::f32, fmt::format("alpha{}", k), fmt::format("float alpha{}", k));
  if (!plan.vector_only) add(ParamField::Kind::flag, "vectorized", "int vectorized");
  ks.params_size = (offset + 7) / 8 * 8;
  if (!fields.empty()) fields.pop_back();
}

std::string emit_coordinates(const KernelPlan& plan) {
  if (!plan.needs_row_index && !plan.needs_col_index) return "    // no broadcast operand: no coordinates";
  // e0 / n by the rounded fp64 reciprocal and one correction step: exact for
  // e0 < 2^52 (M*N <= 2^48 by verify_shape), and far cheaper than a 64-bit
  // integer division per vector (docs/PERF.md, v2).
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
std::string emit_loads(const KernelPlan& plan) {
  // With N % VEC == 0 a whole vector lies in one row: its slice of a row
  // vector is contiguous, and its row index is r0.
  const bool one_row = plan.row_vectors_aligned;
  const bool any_broadcast = plan.needs_row_index || plan.needs_col_index;
  std::string decl = "    float", vec, scalar;
  bool vec_needs_coords = false;
  for (std::size_t k = 0; k < plan.inputs.size(); ++k) {
    const auto& t = plan.inputs[k];
    const auto type = storage_type_name(t.dtype);
    const std::string& f = t.field;
    decl += fmt::format("{} {}_v[VEC]", k ? "," : "", f);
    switch (t.broadcast) {
      case Broadcast::full:
        vec += fmt::format("      ef_load_vec<{}, VEC>(p.{} + e0, {}_v);\n", type, f, f);
        scalar += fmt::format("#pragma unroll\n      for (int j = 0; j < VEC; ++j) {}_v[j] = e0 + j < total ? ef_to_float(p.{}[e0 + j]) : 0.0f;\n", f, f);
        break;
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

std::string emit_draws(const KernelPlan& plan) {
  const Graph& g = plan.spec->graph;
  std::string s;
  for (std::size_t k = 0; k < plan.dropouts.size(); ++k) {
    const Node& n = g.node(plan.dropouts[k]);
    s += fmt::format("    unsigned d{}[VEC];  // dropout stream {} ({})\n", k, n.stream, to_string(n.rng));
    if (n.rng == RngMode::philox4) {
      s += fmt::format(
          "#pragma unroll\n    for (int j = 0; j < VEC; j += 4) {{  // one Philox call, four draws\n"
          "      const ef_u32x4 w = ef_philox4_draws(p.seed, p.offset, {}u, "
          "(unsigned long long)({}(e0 + j)) >> 2);\n"
          "      d{}[j] = w.x;\n      d{}[j + 1] = w.y;\n      d{}[j + 2] = w.z;\n      d{}[j + 3] = w.w;\n"
          "    }}\n",
          n.stream, plan.index32 ? "(unsigned)" : "", k, k, k, k);
    } else {
      s += fmt::format(
          "#pragma unroll\n    for (int j = 0; j < VEC; ++j) "
          "d{}[j] = ef_triton_draw(p.seed, p.offset, (unsigned long long)(e0 + j));\n",
          k);
    }
  }
  if (s.empty()) return "    // no dropout: no draws";
  s.pop_back();
  return s;
}

std::string emit_compute(const KernelPlan& plan) {
  std::string decl = "    float";
  std::string call = fmt::format("      {}_epilogue(p", plan.kernel_name);
  for (const auto& t : plan.inputs) call += fmt::format(", {}_v[j]", t.field);
  for (std::size_t k = 0; k < plan.dropouts.size(); ++k) call += fmt::format(", d{}[j]", k);
  for (std::size_t k = 0; k < plan.outputs.size(); ++k) {
    decl += fmt::format("{} {}_v[VEC]", k ? "," : "", plan.outputs[k].field);
    call += fmt::format(", {}_v[j]", plan.outputs[k].field);
  }
  return fmt::format("{};\n#pragma unroll\n    for (int j = 0; j < VEC; ++j)\n{});", decl, call);
}

std::string emit_stores(const KernelPlan& plan) {
  std::string vec, scalar;
  for (const auto& t : plan.outputs) {
    const auto type = storage_type_name(t.dtype);
    vec += fmt::format("      ef_store_vec<{}, VEC>(p.{} + e0, {}_v);\n", type, t.field, t.field);
    scalar += fmt::format("        if (e0 + j < total) p.{}[e0 + j] = ef_from_float<{}>({}_v[j]);\n", t.field, type,
                          t.field);
  }
  if (plan.vector_only) return "    {\n" + vec + "    }";
  return "    if (whole) {\n" + vec + "    } else {\n#pragma unroll\n      for (int j = 0; j < VEC; ++j) {\n" +
         scalar + "      }\n    }";
}

// What the kernel computes, from op-table names and dtypes only (no user text).
std::string describe(const KernelPlan& plan) {
  std::string s;
  for (const Node& n : plan.spec->graph.nodes())
    if (n.kind == NodeKind::op) s += fmt::format("{}{}", s.empty() ? "" : " -> ", op_info(n.op).name);
  s += " | out";
  for (const auto& t : plan.outputs) s += fmt::format(" {}", to_string(t.dtype));
  return s;
}

int alignment_needed(const KernelPlan& plan, const TensorPlan& t) {
  const bool vector_loaded = t.broadcast == Broadcast::full ||
                             (t.broadcast == Broadcast::row && plan.row_vectors_aligned);
  if (!vector_loaded) return 0;
  return static_cast<int>(std::min<std::size_t>(16, plan.tile.vec * size_of(t.dtype)));
}

}  // namespace

KernelSource emit_elementwise(const KernelPlan& plan) {
  KernelSource ks;
  ks.name = plan.kernel_name;
  ks.tile = plan.tile;
  std::string fields;
  layout_params(plan, ks, fields);
  for (const auto& t : plan.inputs) {
    ks.inputs.push_back(t.binding);
    ks.input_alignment.push_back(alignment_needed(plan, t));
  }
  for (const auto& t : plan.outputs) {
    ks.outputs.push_back(t.binding);
    ks.output_alignment.push_back(alignment_needed(plan, t));
  }
  for (Value v : plan.scales) ks.alphas.push_back(plan.spec->graph.node(v).alpha);
  ks.vector_only = plan.vector_only;

  std::string signature;
  const std::string body = emit_epilogue(plan, signature);
  TemplateVars vars{
      {"kernel", plan.kernel_name},
      {"description", describe(plan)},
      {"param_fields", fields},
      {"epilogue_signature", signature},
      {"epilogue_body", body},
      {"vec", std::to_string(plan.tile.vec)},
      {"threads", std::to_string(plan.tile.threads)},
      {"index_t", plan.index32 ? "int" : "long long"},
      {"whole", plan.vector_only ? "// vector-only: M*N % VEC == 0, and the host checked every pointer's alignment"
                                 : "const bool whole = p.vectorized && e0 + VEC <= total;"},
      {"coordinates", emit_coordinates(plan)},
      {"loads", emit_loads(plan)},
      {"draws", emit_draws(plan)},
      {"compute", emit_compute(plan)},
      {"stores", emit_stores(plan)},
  };
  ks.text = render_template(embedded_template("elementwise.cu.in"), vars, "elementwise.cu.in");
  return ks;
}

}  // namespace epifuse
