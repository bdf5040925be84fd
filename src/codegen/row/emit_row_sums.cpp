// Row family emission of the reductions: the block reductions that end a
// stage (Note [Reductions of a stage]) and the [N] outputs' column sums
// (Note [Column sums]). emit_row.cpp places what these return in templates/row.cu.in.
// Generated identifiers only: acc<node> a thread's running reduction, v<node>
// its per-row result, red<node> a call's values, cs the column sums.
#include "codegen/row/emit_row_sums.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace epifuse {

// Note [Reductions of a stage]: a stage's reductions are independent of one
// another (plan_row.cpp cuts stages at the first reduction a value needs), so
// its sums go through the reducer in one call, as do its maxima: one barrier
// (or one cluster exchange) a call instead of one a reduction. The layernorm
// backward reduces three sums a row; with one call each its rows of 16,384
// bf16 spent seven block barriers a row (docs/perf/backward.md). A single
// reduction keeps the one-value call. The bits are those of separate calls:
// each value is combined in the same order.
std::string emit_stage_reductions(const RowPlan& r, const RowStage& st) {
  const Graph& g = r.plan->spec->graph;
  auto result = [](OpKind op, const std::string& sum) {
    return op == OpKind::row_mean ? fmt::format("(float)((double){} * p.n_inv)", sum) : sum;
  };
  std::string out;
  for (const bool maxima : {true, false}) {
    std::vector<std::uint32_t> ids;
    for (std::uint32_t id : st.reductions)
      if ((g.nodes()[id].op == OpKind::row_max) == maxima) ids.push_back(id);
    if (ids.empty()) continue;
    const char* call = maxima ? "max" : "sum";
    if (ids.size() == 1) {
      const std::uint32_t id = ids[0];
      out += fmt::format("    const float v{} = {};\n", id,
                         result(g.nodes()[id].op, fmt::format("red.{}(acc{})", call, id)));
      continue;
    }
    std::string values;
    for (std::uint32_t id : ids) values += fmt::format("{}acc{}", values.empty() ? "" : ", ", id);
    const std::string name = fmt::format("red{}", ids[0]);
    out += fmt::format("    float {}[{}] = {{{}}};  // Note [Reductions of a stage]\n    red.{}_n({});\n", name, ids.size(),
                       values, call, name);
    for (std::size_t i = 0; i < ids.size(); ++i)
      out += fmt::format("    const float v{} = {};\n", ids[i], result(g.nodes()[ids[i]].op, fmt::format("{}[{}]", name, i)));
  }
  return out;
}

// The most values one reducer call combines in this kernel (RED_VALUES).
int reduced_together(const RowPlan& r) {
  const Graph& g = r.plan->spec->graph;
  int most = 1;
  for (const RowStage& st : r.stages) {
    const auto maxima = std::count_if(st.reductions.begin(), st.reductions.end(),
                                      [&](std::uint32_t id) { return g.nodes()[id].op == OpKind::row_max; });
    most = std::max({most, static_cast<int>(maxima), static_cast<int>(st.reductions.size() - maxima)});
  }
  return most;
}

// Note [Column sums]: the [N] outputs. Each thread adds its columns' values
// over its rows into cs[C][ITEMS][VEC] (the last stage); after the rows the
// block's sums go into the tree of ef_col_sums_finish (common/row_reduce.cuh),
// whose partial rows and counters are the family's workspace
// (RowFamily::workspace): deterministic, no atomics on values. A tile's `t`
// takes ef_col_sums_finish_shared instead: the same tree and the same bits,
// the sums staged in the ring's bytes after the last row, so that the tree
// holds no second set of them in registers (the kernel's register count, and
// so the blocks a multiprocessor, is then the row loop's).
std::string emit_col_setup(const RowPlan& r) {
  if (r.col_sums.empty()) return "";
  return fmt::format(
      "\n  float cs[{}][ITEMS][VEC];  // this thread's columns summed over its rows (Note [Column sums])\n"
      "#pragma unroll\n  for (int k = 0; k < {}; ++k)\n#pragma unroll\n    for (int it = 0; it < ITEMS; ++it)\n"
      "#pragma unroll\n      for (int j = 0; j < VEC; ++j) cs[k][it][j] = 0.0f;",
      r.col_sums.size(), r.col_sums.size());
}

std::string emit_col_finish(const RowPlan& r) {
  const KernelPlan& plan = *r.plan;
  if (r.col_sums.empty()) return "";
  const std::size_t c = r.col_sums.size();
  std::string store;
  for (std::size_t i = 0; i < c; ++i) {
    const TensorPlan& t = plan.outputs[r.col_sums[i]];
    store += fmt::format("    if (k == {}) ef_store_vec<{}, VEC>(p.{} + col, v);\n", i, storage_type_name(t.dtype), t.field);
  }
  const std::string col_of =
      r.ring > 0 ? "    const int c = (it * THREADS + (int)threadIdx.x) * VEC;\n    return c < chunk ? (long long)(col0 + c) : -1ll;\n"
                 : "    const int c0 = (it * LANES + lane) * VEC;\n    return c0 < p.n ? (long long)c0 : -1ll;\n";
  // The lambdas both forms of the tree take: which column an item is, and where a sum goes.
  const std::string lambdas = fmt::format(
      "  __shared__ unsigned col_flag;\n"
      "  auto col_of = [&](int it) -> long long {{\n{0}  }};\n"
      "  auto col_store = [&](int k, long long col, const float (&v)[VEC]) {{\n{1}  }};\n",
      col_of, store);
  const std::string_view rank = r.tile.cluster > 1 ? "(int)ef_row_cluster_rank()" : "0";
  if (r.tile.tree)
    return fmt::format(
        "\n  // The [N] outputs: the block's column sums, then the grid's tree through the ring's shared memory\n"
        "  // (Note [Column sums]).\n{1}"
        "  ef_col_sums_finish_shared<{0}, ITEMS, VEC, THREADS, {2}>(cs, reinterpret_cast<float*>(ring), &col_flag,\n"
        "      p.col_counters, p.col_partials, p.n, red.unit(), red.units(), {3}, CLUSTER, col_of, col_store);",
        c, lambdas, k_col_sum_fan_in, rank);
  return fmt::format(
      "\n  // The [N] outputs: the block's column sums, then the grid's tree (Note [Column sums]).\n"
      "  __shared__ float col_buf[ROWS > 1 ? {0} * ITEMS * GROUP * VEC : 1];\n{1}"
      "  ef_col_sums_finish<{0}, ITEMS, VEC, THREADS, GROUP, {2}>(cs, col_buf, &col_flag, p.col_counters, p.col_partials, p.n,\n"
      "      red.unit(), red.units(), {3}, CLUSTER, col_of, col_store);",
      c, lambdas, k_col_sum_fan_in, rank);
}

}  // namespace epifuse
