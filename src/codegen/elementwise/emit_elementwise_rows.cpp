// Elementwise pass 2 where a full tensor is strided: fill
// templates/elementwise_rows.cu.in (Note [Strided rows] in elementwise.hpp),
// the column-sum kernel's walk without the sums; its draws and stores are that
// kernel's (emit_column_sums.cpp). Generated identifiers only: in<k>/out<k>
// pointers, ld_in<k>/ld_out<k> row strides, v<node> values, d<k> draws.
#include <algorithm>

#include "codegen/elementwise/elementwise.hpp"
#include "codegen/epilogue.hpp"
#include "codegen/param_layout.hpp"
#include "codegen/template_engine.hpp"
#include "epifuse/errors.hpp"

namespace epifuse {

namespace {

void layout_params(const ElementwisePlan& e, const ColumnPaths& c, ParamLayout& layout) {
  layout.add_graph_tensors(*e.plan, 0);
  layout.add(ParamRole::dim_m, 0, "m", "long long m", 8, 8);
  layout.add(ParamRole::dim_n, 0, "n", "long long n", 8, 8);
  layout.add_tensor_lds(*e.plan, 0);
  layout.add_rng_and_scalars(*e.plan);
  if (c.vector && c.scalar) layout.add(ParamRole::vector_flag, 0, "vectorized", "int vectorized", 4, 4);
}

// Row r's full inputs (a vector each, or element by element inside the row)
// and a col input's one value of the row.
std::string emit_loads(const ElementwisePlan& e, const ColumnPaths& c) {
  std::string decl, vec, scalar, col;
  for (const TensorPlan& t : e.plan->inputs) {
    const auto type = storage_type_name(t.dtype);
    const std::string& f = t.field;
    if (t.broadcast == Broadcast::full) {
      decl += fmt::format("      float {}_v[VEC];\n", f);
      const std::string at = full_offset(t, "r");
      vec += fmt::format("        ef_load_vec<{}, VEC>(p.{} + {}, {}_v);\n", type, f, at, f);
      scalar += fmt::format(
          "#pragma unroll\n        for (int j = 0; j < VEC; ++j) {}_v[j] = c0 + j < n ? ef_to_float(p.{}[{} + j]) : 0.0f;\n",
          f, f, at);
    } else if (t.broadcast == Broadcast::col) {
      decl += fmt::format("      float {}_v[VEC];\n", f);
      col += fmt::format("      {{\n        const float s = ef_to_float(p.{}[r]);\n#pragma unroll\n"
                         "        for (int j = 0; j < VEC; ++j) {}_v[j] = s;\n      }}\n",
                         f, f);
    }
  }
  if (decl.empty()) return "      // no full or col input";
  std::string out = decl + col;
  if (!vec.empty()) out += column_branch(c, vec, scalar, "      ") + "\n";
  out.pop_back();
  return out;
}

}  // namespace

KernelSource emit_elementwise_rows(const ElementwisePlan& e) {
  const KernelPlan& plan = *e.plan;
  EPIFUSE_ASSERT(e.walks_rows, "the 2-D elementwise kernel is for strided shapes with N % VEC != 0");
  const ColumnPaths c = column_paths(e);
  KernelSource ks;
  bind_graph_tensors(plan, ks, [&](const TensorPlan& t) { return column_walk_alignment(e, c, t); });
  ks.tile = e.tile;  // vec resolved (and narrowed for the rows: strided_rows_vector_width)
  ParamLayout layout;
  layout_params(e, c, layout);
  ks.requires_alignment = c.vector && !c.scalar;

  const EpilogueContract contract = epilogue_contract(plan);
  std::string whole = "  // one path: no alignment flag";
  if (c.vector && c.scalar) whole = "  const bool whole = p.vectorized != 0;  // every pointer and ld aligned for vectors";
  TemplateVars vars{
      {"kernel", plan.kernel_name},
      {"description", describe_chain(plan)},
      {"rng_state", rng_state_setup(plan, "      ")},
      {"param_fields", layout.fields_text()},
      {"epilogue_signature", epilogue_signature(plan, contract)},
      {"epilogue_body", epilogue_body(plan)},
      {"vec", std::to_string(e.tile.vec)},
      {"threads", std::to_string(e.tile.threads)},
      {"index_t", e.index32 ? "int" : "long long"},
      {"whole", whole},
      {"row_loads", column_walk_row_loads(e, c, "    ", "")},  // once a column tile, before its rows
      {"loads", emit_loads(e, c)},
      {"draws", column_walk_draws(e, c)},
      {"compute", emit_vector_epilogue(
                      e, contract, [&](std::size_t k) { return fmt::format("{}_v[j]", plan.inputs[k].field); },
                      "      ")},
      {"stores", column_walk_stores(e, c, std::vector<bool>(plan.outputs.size(), false), "r", "")},
  };
  layout.finish(ks);
  ks.text = render_template(embedded_template("elementwise_rows.cu.in"), vars, "elementwise_rows.cu.in");
  return ks;
}

}  // namespace epifuse
