// Elementwise pass 2 for a spec with column sums: fill
// templates/elementwise_col_sum.cu.in (Note [Column sums] in elementwise.hpp).
// Generated identifiers only: in<k>/out<k> pointers, v<node> values, d<k>
// draws, out<k>_s column sums.
#include <algorithm>

#include "codegen/elementwise/elementwise.hpp"
#include "codegen/epilogue.hpp"
#include "codegen/param_layout.hpp"
#include "codegen/template_engine.hpp"
#include "epifuse/errors.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

ColumnPaths column_paths(const ElementwisePlan& e) {
  ColumnPaths c;
  c.vector = e.row_vectors_aligned;
  c.scalar = !e.row_vectors_aligned || e.plan->path == KernelPath::general;
  return c;
}

std::string column_branch(const ColumnPaths& c, const std::string& vector, const std::string& scalar,
                          const std::string& indent) {
  if (!c.scalar) return indent + "{\n" + vector + indent + "}";
  if (!c.vector) return indent + "{\n" + scalar + indent + "}";
  return indent + "if (whole) {\n" + vector + indent + "} else {\n" + scalar + indent + "}";
}

std::string full_offset(const TensorPlan& t, std::string_view row) {
  return t.strided ? fmt::format("{} * p.ld_{} + c0", row, t.field) : "e0";
}

namespace {

void layout_params(const ElementwisePlan& e, const ColumnPaths& c, ParamLayout& layout) {
  layout.add_graph_tensors(*e.plan, 0);
  layout.add(ParamRole::dim_m, 0, "m", "long long m", 8, 8);
  layout.add(ParamRole::dim_n, 0, "n", "long long n", 8, 8);
  layout.add_tensor_lds(*e.plan, 0);  // Note [Strided rows]: none for a dense shape
  layout.add_rng_and_scalars(*e.plan);
  layout.add(ParamRole::workspace, 0, "arrivals", "unsigned* arrivals", 8, 8);
  layout.add(ParamRole::workspace, 1, "partials", "float* partials", 8, 8);
  if (c.vector && c.scalar) layout.add(ParamRole::vector_flag, 0, "vectorized", "int vectorized", 4, 4);
}


// Full inputs of the ROWS rows r + k * S (vectors at e0, or element by
// element inside the row), and a col input's one value of each row: every
// row's loads are issued before any of them is used.
std::string emit_loads(const ElementwisePlan& e, const ColumnPaths& c, std::string_view index_t) {
  std::string decl, vec, scalar, col;
  for (const TensorPlan& t : e.plan->inputs) {
    const auto type = storage_type_name(t.dtype);
    const std::string& f = t.field;
    if (t.broadcast == Broadcast::full) {
      decl += fmt::format("      float {}_v[ROWS][VEC];\n", f);
      const std::string at = full_offset(t, "rk");  // Note [Strided rows]
      vec += fmt::format("          ef_load_vec<{}, VEC>(p.{} + {}, {}_v[k]);\n", type, f, at, f);
      scalar += fmt::format(
          "#pragma unroll\n          for (int j = 0; j < VEC; ++j) {}_v[k][j] = c0 + j < n ? ef_to_float(p.{}[{} + j]) : 0.0f;\n",
          f, f, at);
    } else if (t.broadcast == Broadcast::col) {
      decl += fmt::format("      float {}_v[ROWS][VEC];\n", f);
      col += fmt::format("        {{\n          const float s = ef_to_float(p.{}[rk]);\n#pragma unroll\n"
                         "          for (int j = 0; j < VEC; ++j) {}_v[k][j] = s;\n        }}\n",
                         f, f);
    }
  }
  if (decl.empty()) return "      // no full or col input";
  std::string body = col;
  if (!vec.empty()) body += column_branch(c, vec, scalar, "        ") + "\n";
  return decl + fmt::format("#pragma unroll\n      for (int k = 0; k < ROWS; ++k) {{\n        const {0} rk = r + k * S;\n"
                            "        if (rk >= m) break;\n        const {0} e0 = rk * n + c0;\n",
                            index_t) +
         body + "      }";
}

// Note [Staged column loads]: the loop over rows with the full inputs copied
// ST - 1 rows ahead into the thread's shared slots, ahead of the register
// loop it replaces on sm_80 and later (closed by `staged_end`); its body is
// the register loop's, for its one row (k = 0).
std::string staged_loop(const ElementwisePlan& e, int stages, std::string_view index_t, const std::string& body) {
  std::vector<const TensorPlan*> full;
  std::string cols;
  for (const TensorPlan& t : e.plan->inputs) {
    if (t.broadcast == Broadcast::full) full.push_back(&t);
    if (t.broadcast == Broadcast::col)
      cols += fmt::format("      float {0}_v[1][VEC];\n      {{\n        const float s = ef_to_float(p.{0}[rk]);\n"
                          "#pragma unroll\n        for (int j = 0; j < VEC; ++j) {0}_v[0][j] = s;\n      }}\n",
                          t.field);
  }
  auto copies = [&](std::string_view slot) {
    std::string out;
    for (std::size_t i = 0; i < full.size(); ++i)
      out += fmt::format("        ef_stage16(&stage[{}][{}][tid], p.{} + {});\n", slot, i, full[i]->field,
                         full[i]->strided ? full_offset(*full[i], "ahead") : "ahead * n + c0");  // Note [Strided rows]
    return out;
  };
  std::string reads;
  for (std::size_t i = 0; i < full.size(); ++i)
    reads += fmt::format(
        "      float {0}_v[1][VEC];\n"
        "      ef_load_vec<{1}, VEC>(reinterpret_cast<const {1}*>(&stage[slot][{2}][tid]), {0}_v[0]);\n",
        full[i]->field, storage_type_name(full[i]->dtype), i);
  return fmt::format(
      "\n#if !EF_HIP && __CUDA_ARCH__ >= 800  // Note [Staged column loads]: slots of this thread's own\n"
      "    constexpr int ST = {0};\n"
      "    const int tid = ty * (int)blockDim.x + lane;\n"
      "    const {3} S = ({3})gridDim.y * TY;\n"
      "    {3} ahead = ({3})blockIdx.y * TY + ty;  // the next row to copy\n"
      "#pragma unroll\n"
      "    for (int s = 0; s < ST - 1; ++s, ahead += S) {{\n"
      "      if (ahead < m) {{\n{4}      }}\n"
      "      ef_stage_commit();\n"
      "    }}\n"
      "    int slot = 0;  // row r's\n"
      "    for ({3} r = ({3})blockIdx.y * TY + ty; r < m; r += S, ahead += S) {{\n"
      "      const int next = slot == 0 ? ST - 1 : slot - 1;  // row r - S's, read already\n"
      "      if (ahead < m) {{\n{5}      }}\n"
      "      ef_stage_commit();\n"
      "      ef_stage_wait<ST - 1>();  // row r's copies have landed\n"
      "      constexpr int k = 0;\n"
      "      const {3} rk = r;\n"
      "      const {3} e0 = rk * n + c0;\n"
      "{6}{7}"
      "      slot = slot == ST - 1 ? 0 : slot + 1;\n"
      "{8}\n"
      "    }}\n"
      "    ef_stage_wait<0>();\n"
      "#else",
      stages, full.size(), e.tile.threads, index_t, copies("s"), copies("next"), reads, cols, body);
}

// The block's shared memory: `red` (a float a thread, for its rows' sums) and
// `last`, or with stages the slots, whose bytes `red` reuses once every thread
// has left the loop (the sums start with a barrier), and `last` from a
// barrier's vote: three rows of two 16-bit inputs' slots at 512 threads fill
// the 48 KB a block has without opting in (Note [Staged column loads]).
std::string shared_decls(int stages, std::size_t full, int threads) {
  if (stages == 0) return fmt::format("  __shared__ float red[{}];\n  __shared__ bool last;\n", threads);
  return fmt::format(
      "#if !EF_HIP && __CUDA_ARCH__ >= 800  // Note [Staged column loads]: the slots, then the rows' sums\n"
      "  __shared__ uint4 stage[{0}][{1}][{2}];\n"
      "  float* const red = reinterpret_cast<float*>(&stage[0][0][0]);\n"
      "#else\n"
      "  __shared__ float red[{2}];\n"
      "#endif\n",
      stages, full, threads);
}

std::string arrival(int stages) {
  if (stages == 0)
    return "  if (first) last = atomicAdd(&p.arrivals[blockIdx.x], 1u) == gridDim.y - 1;\n  __syncthreads();";
  return "  const bool last = __syncthreads_or(first && atomicAdd(&p.arrivals[blockIdx.x], 1u) == gridDim.y - 1);";
}

}  // namespace

int emitted_column_sum_stages(const ElementwisePlan& e) {
  const ColumnPaths paths = column_paths(e);
  return paths.vector && !paths.scalar ? e.tile.stages : 0;
}

// Draws at the element's flat index r*N + c (docs/design.md §4). On the vector
// path e0 is a multiple of VEC >= 4, so one Philox call serves four elements;
// inside a row that is not, each element takes its own word.
std::string column_walk_row_loads(const ElementwisePlan& e, const ColumnPaths& c, const std::string& indent,
                                  std::string_view guard) {
  const std::string inner = indent + "  ";
  std::string decl, vec, scalar;
  for (const TensorPlan& t : e.plan->inputs) {
    const auto type = storage_type_name(t.dtype);
    const std::string& f = t.field;
    if (t.broadcast == Broadcast::row) {
      decl += fmt::format("{}float {}_v[VEC];\n", indent, f);
      vec += fmt::format("{}{}ef_load_vec<{}, VEC>(p.{} + c0, {}_v);\n", inner, guard, type, f, f);
      scalar += fmt::format(
          "#pragma unroll\n{}for (int j = 0; j < VEC; ++j) {}_v[j] = c0 + j < n ? ef_to_float(p.{}[c0 + j]) : 0.0f;\n",
          inner, f, f);
    } else if (t.broadcast == Broadcast::scalar) {
      decl += fmt::format("{0}float {1}_v[VEC];\n{0}{{\n{2}const float s = ef_to_float(p.{1}[0]);\n#pragma unroll\n"
                          "{2}for (int j = 0; j < VEC; ++j) {1}_v[j] = s;\n{0}}}\n",
                          indent, f, inner);
    }
  }
  if (vec.empty()) return decl.empty() ? indent + "// no row or scalar input" : decl.substr(0, decl.size() - 1);
  return decl + column_branch(c, vec, scalar, indent);
}

std::string column_walk_draws(const ElementwisePlan& e, const ColumnPaths& c) {
  const KernelPlan& plan = *e.plan;
  const Graph& g = plan.spec->graph;
  std::string decl, vec, scalar;
  for (std::size_t k = 0; k < plan.dropouts.size(); ++k) {
    const Node& n = g.node(plan.dropouts[k]);
    decl += fmt::format("      unsigned d{}[VEC];  // dropout stream {} ({})\n", k, n.stream, to_string(n.rng));
    if (n.rng == RngMode::philox4) {
      vec += fmt::format(
          "#pragma unroll\n        for (int j = 0; j < VEC; j += 4) {{  // one Philox call, four draws\n"
          "          const ef_u32x4 w = ef_philox4_draws(rng.seed, rng.offset, {0}u, (unsigned long long)(e0 + j) >> 2);\n"
          "          d{1}[j] = w.x;\n          d{1}[j + 1] = w.y;\n          d{1}[j + 2] = w.z;\n          d{1}[j + 3] = w.w;\n"
          "        }}\n",
          n.stream, k);
      scalar += fmt::format(
          "#pragma unroll\n        for (int j = 0; j < VEC; ++j) "
          "d{}[j] = ef_philox4_draw(rng.seed, rng.offset, {}u, (unsigned long long)(e0 + j));\n",
          k, n.stream);
    } else {
      const std::string line = fmt::format(
          "#pragma unroll\n        for (int j = 0; j < VEC; ++j) "
          "d{}[j] = ef_triton_draw(rng.seed, rng.offset, (unsigned long long)(e0 + j));\n",
          k);
      vec += line;
      scalar += line;
    }
  }
  if (decl.empty()) return "      // no dropout: no draws";
  return decl + column_branch(c, vec, scalar, "      ");
}

// Note [Outputs that pass an input through]: in the walking kernels (column
// sums, strided rows) an [M,N] output whose value is a full input (dresidual =
// dy in a residual's backward) is stored from the input's loaded vector, not
// from the epilogue's copy of it. The values are the same floats; the form
// matters to hipRTC 5.2 (ROCm 5.2's LLVM), which at -O3 did not finish the bf16
// backward of bias+GELU+dropout+residual for gfx90a in 120 s with the copy
// (docs/amd.md) and compiles it in 0.5 s without.
std::string column_walk_stores(const ElementwisePlan& e, const ColumnPaths& c, const std::vector<bool>& sums,
                               std::string_view row, std::string_view input_row) {
  std::string vec, scalar;
  for (std::size_t k = 0; k < e.plan->outputs.size(); ++k) {
    if (sums[k]) continue;
    const TensorPlan& t = e.plan->outputs[k];
    const auto type = storage_type_name(t.dtype);
    const std::string at = full_offset(t, row);  // Note [Strided rows]
    std::string from = t.field + "_v";
    for (const TensorPlan& in : e.plan->inputs)
      if (in.value == t.value && in.broadcast == Broadcast::full) from = fmt::format("{}_v{}", in.field, input_row);
    vec += fmt::format("        ef_store_vec<{}, VEC>(p.{} + {}, {});\n", type, t.field, at, from);
    scalar += fmt::format("          if (c0 + j < n) p.{}[{} + j] = ef_from_float<{}>({}[j]);\n", t.field, at, type, from);
  }
  if (vec.empty()) return "      // no full output";
  return column_branch(c, vec, "#pragma unroll\n        for (int j = 0; j < VEC; ++j) {\n" + scalar + "        }\n", "      ");
}

// Full tensors and row inputs move as vectors on the vector path; a col_sum's
// [N] output is stored element by element.
int column_walk_alignment(const ElementwisePlan& e, const ColumnPaths& c, const TensorPlan& t) {
  if (!c.vector) return 0;
  const Node& n = e.plan->spec->graph.node(t.value);
  const bool column_sum = n.kind == NodeKind::op && is_col_reduction(n.op);
  if (column_sum || (t.broadcast != Broadcast::full && t.broadcast != Broadcast::row)) return 0;
  return static_cast<int>(std::min<std::size_t>(16, e.tile.vec * size_of(t.dtype)));
}

namespace {

std::string emit_accumulate(const KernelPlan& plan, const std::vector<bool>& sums) {
  std::string s = "#pragma unroll\n      for (int j = 0; j < VEC; ++j) {";
  for (std::size_t k = 0; k < plan.outputs.size(); ++k)
    if (sums[k]) s += fmt::format(" {0}_s[j] += {0}_v[j];", plan.outputs[k].field);
  return s + " }";
}

std::string emit_sum_decls(const KernelPlan& plan, const std::vector<bool>& sums) {
  std::string s;
  for (std::size_t k = 0; k < plan.outputs.size(); ++k)
    if (sums[k])
      s += fmt::format("  float {0}_s[VEC];  // the column sum of output {1}\n#pragma unroll\n"
                       "  for (int j = 0; j < VEC; ++j) {0}_s[j] = 0.0f;\n",
                       plan.outputs[k].field, k);
  s.pop_back();
  return s;
}

// Each sum's block partial into partials[sum][blockIdx.y][column].
std::string emit_block_partials(const KernelPlan& plan, const std::vector<bool>& sums, std::string_view index_t) {
  std::string s = fmt::format("  const {0} sum_stride = ({0})gridDim.y * slice_stride;\n", index_t);
  int q = 0;
  for (std::size_t k = 0; k < plan.outputs.size(); ++k) {
    if (!sums[k]) continue;
    s += fmt::format(
        "  {2}_rows_sum<VEC>({0}_s, red);\n"
        "  if (ty == 0) {{\n    float* q = p.partials + {1} * sum_stride + part0;\n#pragma unroll\n"
        "    for (int j = 0; j < VEC; ++j) q[j] = {0}_s[j];\n  }}\n",
        plan.outputs[k].field, q++, plan.kernel_name);
  }
  s.pop_back();
  return s;
}

// The column tile's totals in its last block: slices s = ty, ty + TY, ... per
// row of threads, then those rows in order.
std::string emit_final_sums(const KernelPlan& plan, const std::vector<bool>& sums, std::string_view index_t) {
  std::string s;
  int q = 0;
  for (std::size_t k = 0; k < plan.outputs.size(); ++k) {
    if (!sums[k]) continue;
    const TensorPlan& t = plan.outputs[k];
    s += fmt::format(
        "  {{\n    float t[VEC];\n#pragma unroll\n    for (int j = 0; j < VEC; ++j) t[j] = 0.0f;\n"
        "#pragma unroll 4\n"
        "    for ({3} s = ty; s < ({3})gridDim.y; s += TY) {{\n"
        "      const float* q = p.partials + {0} * sum_stride + s * slice_stride + ({3})blockIdx.x * TN + lane * VEC;\n"
        "#pragma unroll\n      for (int j = 0; j < VEC; ++j) t[j] += ef_col_partial_load(q + j);  // another block's: L2\n    }}\n"
        "    {4}_rows_sum<VEC>(t, red);\n"
        "    if (ty == 0) {{\n#pragma unroll\n"
        "      for (int j = 0; j < VEC; ++j)\n        if (c0 + j < n) p.{1}[c0 + j] = ef_from_float<{2}>(t[j]);\n"
        "    }}\n  }}\n",
        q++, t.field, storage_type_name(t.dtype), index_t, plan.kernel_name);
  }
  s.pop_back();
  return s;
}

}  // namespace

KernelSource emit_column_sums(const ElementwisePlan& e) {
  const KernelPlan& plan = *e.plan;
  const std::vector<bool> sums = column_sum_outputs(*plan.spec);
  const ColumnPaths c = column_paths(e);
  KernelSource ks;
  bind_graph_tensors(plan, ks, [&](const TensorPlan& t) { return column_walk_alignment(e, c, t); });
  ks.tile = e.tile;  // vec resolved
  ParamLayout layout;
  layout_params(e, c, layout);
  ks.requires_alignment = c.vector && !c.scalar;

  const EpilogueContract contract = epilogue_contract(plan);
  const std::string_view index_t = e.index32 ? "int" : "long long";
  std::string whole = "  // one path: no alignment flag";
  if (c.vector && c.scalar) whole = "  const bool whole = p.vectorized != 0;  // every pointer aligned for vectors";
  TemplateVars vars{
      {"kernel", plan.kernel_name},
      {"description", describe_chain(plan)},
      {"rng_state", rng_state_setup(plan, "    ")},
      {"param_fields", layout.fields_text()},
      {"epilogue_signature", epilogue_signature(plan, contract)},
      {"epilogue_body", epilogue_body(plan)},
      {"vec", std::to_string(e.tile.vec)},
      {"threads", std::to_string(e.tile.threads)},
      {"min_blocks", std::to_string(column_sum_blocks_per_sm(e.tile))},
      {"index_t", std::string(index_t)},
      {"whole", whole},
      {"sum_decls", emit_sum_decls(plan, sums)},
      {"row_loads", column_walk_row_loads(e, c, "  ", "if (in_columns) ")},
      {"loads", emit_loads(e, c, index_t)},
      {"rows", std::to_string(column_sum_rows_in_flight(e.tile))},
      {"draws", column_walk_draws(e, c)},
      // A full or per-row input is loaded per row k of the ROWS in flight.
      {"compute", emit_vector_epilogue(e, contract,
                                       [&](std::size_t k) {
                                         const TensorPlan& t = e.plan->inputs[k];
                                         const bool per_row = t.broadcast == Broadcast::full ||
                                                              t.broadcast == Broadcast::col;
                                         return fmt::format("{}_v{}[j]", t.field, per_row ? "[k]" : "");
                                       },
                                       "      ")},
      {"stores", column_walk_stores(e, c, sums, "rk", "[k]")},
      {"accumulate", emit_accumulate(plan, sums)},
      {"block_partials", emit_block_partials(plan, sums, index_t)},
      {"final_sums", emit_final_sums(plan, sums, index_t)},
  };
  const int stages = emitted_column_sum_stages(e);
  std::string staged, staged_end;
  if (stages > 0) {
    const std::string body =
        vars.at("draws") + "\n" + vars.at("compute") + "\n" + vars.at("stores") + "\n" + vars.at("accumulate");
    staged = staged_loop(e, stages, index_t, body);
    staged_end = "\n#endif  // Note [Staged column loads]";
  }
  vars.emplace("staged_loop", staged);
  vars.emplace("staged_end", staged_end);
  std::size_t full = 0;
  for (const TensorPlan& t : plan.inputs) full += t.broadcast == Broadcast::full;
  vars.emplace("shared", shared_decls(stages, full, e.tile.threads));
  vars.emplace("arrive", arrival(stages));
  layout.finish(ks);
  ks.text = render_template(embedded_template("elementwise_col_sum.cu.in"), vars, "elementwise_col_sum.cu.in");
  return ks;
}

}  // namespace epifuse
