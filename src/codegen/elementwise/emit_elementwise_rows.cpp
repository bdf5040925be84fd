// Elementwise pass 2 where a full tensor is strided: fill
// templates/elementwise_rows.cu.in (Note [Strided rows] in elementwise.hpp),
// the column-sum kernel's walk without the sums; its loads, draws and stores
// are that kernel's (emit_column_sums.cpp), its draws taken for all the rows
// in flight before the first is computed. Generated identifiers only:
// in<k>/out<k> pointers, ld_in<k>/ld_out<k> row strides, v<node> values, d<k>
// draws.
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

// Each row's draws after every row's loads, so that the Philox arithmetic runs
// while the loads are in flight.
std::string emit_draws(const ElementwisePlan& e, const ColumnPaths& c, std::string_view index_t) {
  if (e.plan->dropouts.empty()) return "      // no dropout: no draws";
  return column_walk_draw_decls(e, "[ROWS]") +
         column_walk_each_row(index_t, column_walk_draw_fills(e, c, "[k]", "        ") + "\n");
}

}  // namespace

KernelSource emit_elementwise_rows(const ElementwisePlan& e) {
  const KernelPlan& plan = *e.plan;
  EPIFUSE_ASSERT(e.strided_rows, "the 2-D elementwise kernel is for shapes with strided tensors");
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
  const std::string_view index_t = e.index32 ? "int" : "long long";
  TemplateVars vars{
      {"kernel", plan.kernel_name},
      {"description", describe_chain(plan)},
      {"param_fields", layout.fields_text()},
      {"epilogue_signature", epilogue_signature(plan, contract)},
      {"epilogue_body", epilogue_body(plan)},
      {"vec", std::to_string(e.tile.vec)},
      {"rows", std::to_string(strided_rows_in_flight(e))},
      {"threads", std::to_string(e.tile.threads)},
      {"index_t", std::string(index_t)},
      {"whole", whole},
      {"row_loads", column_walk_row_loads(e, c, "    ", "")},  // once a column tile, before its rows
      {"loads", column_walk_loads(e, c, index_t)},
      {"draws", emit_draws(e, c, index_t)},
      // Row k of the ROWS in flight: its full and col inputs and its draws at [k].
      {"compute", emit_vector_epilogue(
                      e, contract, [&](std::size_t k) { return column_walk_input(e, k); }, "        ", "[k]")},
      {"stores", column_walk_stores(e, c, std::vector<bool>(plan.outputs.size(), false), "rk", "        ")},
  };
  layout.finish(ks);
  ks.text = render_template(embedded_template("elementwise_rows.cu.in"), vars, "elementwise_rows.cu.in");
  return ks;
}

}  // namespace epifuse
