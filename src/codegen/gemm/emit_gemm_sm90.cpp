// The Hopper GEMM's emitter (templates/gemm_sm90.cu.in, docs/hopper.md): the
// wgmma + TMA mainloop, the staged epilogue every GEMM template shares
// (gemm_parts.hpp), and the fragment epilogue that is this template's own.
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "codegen/column_sums.hpp"
#include "codegen/epilogue.hpp"
#include "codegen/gemm/gemm.hpp"
#include "codegen/gemm/gemm_parts.hpp"
#include "codegen/param_layout.hpp"
#include "codegen/template_engine.hpp"

namespace epifuse {

std::uint32_t wgmma_shared_bytes(const WgmmaTile& t, bool dual, int column_sums) {
  const auto stages = static_cast<std::uint32_t>(t.stages);
  // ring (A, B; a dual GEMM's B1 too), alignment slack, barriers, and the
  // epilogue's staging: 8 consumer warps x 16 rows x (32 + 4) floats (a dual
  // GEMM stages its two accumulators one after the other through it).
  const auto b_rows = static_cast<std::uint32_t>(t.bn) * (dual ? 2u : 1u);
  // A stage's rows are 128 bytes of K (BK 64 of 16-bit, 32 of tf32).
  // Column sums (Note [GEMM column sums]): a row of BN floats per consumer
  // warp and sum, and two arrival flags (one per ping-pong warpgroup).
  const auto sums = static_cast<std::uint32_t>(column_sums);
  return stages * (static_cast<std::uint32_t>(t.bm) + b_rows) * 128u + 1024u +
         16u * stages + 16u + 8u * 16u * 36u * 4u + (sums > 0 ? sums * 8u * static_cast<std::uint32_t>(t.bn) * 4u + 16u : 0u);
}

namespace {

// ef_wgmma(d, da, db): one wgmma.mma_async m64nBNk16 (f16, bf16) or m64nBNk8
// (tf32) with fp32 accumulators, A and B from shared memory; 16-bit operands
// each transposed (MN-major) or not, tf32 K-major only (no transpose operands).
// A dual GEMM's is ef_wgmma(d, d1, da, db): one m64n(2BN) wgmma over B and B1,
// which sit side by side in a stage as one 2BN-wide B tile (Note [One wgmma for
// two products]), d's registers first, then d1's.
std::string wgmma_function(const GemmPlan& g) {
  const int n = g.wgmma->bn * (g.dual ? 2 : 1);
  std::string regs, outs;
  for (int i = 0; i < n / 2; ++i) {
    const int j = i % (g.wgmma->bn / 2);
    regs += fmt::format("{}%{}", i ? ", " : "", i);
    outs += fmt::format("{}\"+f\"({}[{}][{}])", i ? ", " : "", i < g.wgmma->bn / 2 ? "d" : "d1", j / 4, j % 4);
  }
  const DType a = g.plan->spec->mainloop.a;
  const std::string op =
      a == DType::f32 ? fmt::format("m64n{}k8.f32.tf32.tf32 {{{}}}, %{}, %{}, 1, 1, 1", n, regs, n / 2, n / 2 + 1)
                      : fmt::format("m64n{0}k16.f32.{1}.{1} {{{2}}}, %{3}, %{4}, 1, 1, 1, {5}, {6}", n,
                                    a == DType::bf16 ? "bf16" : "f16", regs, n / 2, n / 2 + 1, g.a_kmajor ? 0 : 1,
                                    g.b_kmajor ? 0 : 1);
  return fmt::format(
      "__device__ __forceinline__ void ef_wgmma(float (&d)[NI][4], {}unsigned long long da, unsigned long long db) {{\n"
      "  asm volatile(\n"
      "      \"wgmma.mma_async.sync.aligned.{};\\n\"\n"
      "      : {}\n"
      "      : \"l\"(da), \"l\"(db));\n"
      "}}",
      g.dual ? "float (&d1)[NI][4], " : "", op, outs);
}

}  // namespace

// Note [Fragment epilogue]: the staged epilogue walks a lane's four
// consecutive columns, which the dropout contract's one Philox call per four
// elements needs, and so stages fp32 accumulators through shared memory and
// back (128 KB a 128x256 tile). A chain with no dropout and one or two
// outputs, all 16-bit, runs on the accumulator registers instead (two
// consecutive columns a lane, the fragment layout), and only its outputs go
// through shared memory, packed in pairs: half the bytes, and 16-byte stores of
// 64 columns a warp chunk. A second output's pairs wait in registers (16 a
// lane) while the first leaves through the staging area, then take its place.
// At the power limit the fp32 round trip, not the stores, cost 9% of a 4096^3
// GEMM; against the staged kernel in one process on an H100 (docs/perf/gemm.md):
// GEMM alone 1.05 -> 1.03x cuBLAS at 4096^3, bias+GELU 1.13 -> 1.10x.
// Dropout chains keep the staged quads (lane pairs sharing Philox calls here were slower,
// 1.15 -> 1.17x at 4096^3: docs/perf/gemm.md, tried and rejected).
// Only [M,N] outputs count: a dgrad's dacc with its col_sum db keeps this path
// (Note [GEMM column sums]), the sum taken on the fragments.
constexpr int k_fragment_outputs = 2;

bool wgmma_fragment_chain(const KernelSpec& spec) {
  const Graph& g = spec.graph;
  if (spec.mainloop.kind != MainloopKind::gemm) return false;
  if (std::any_of(g.nodes().begin(), g.nodes().end(),
                  [](const Node& n) { return n.kind == NodeKind::op && n.op == OpKind::dropout; }))
    return false;
  int full = 0;
  for (const Output& o : g.outputs()) {
    if (is_column_sum(g.node(o.value))) continue;
    if (++full > k_fragment_outputs || size_of(o.dtype) != 2) return false;
  }
  return full > 0;
}

namespace {

bool fragment_epilogue(const GemmPlan& g) {
  return g.wgmma && vector_stores(g) && wgmma_fragment_chain(*g.plan->spec);
}

// Note [Prefetched epilogue inputs]: an [M,N] input of the epilogue (a
// dgrad's saved pre-activation, a residual) read element by element after
// the mainloop cost a memory latency a chunk, and 2-byte loads that touch 8
// rows each: the dgrad + dGELU + dbias epilogue on the ping-pong 128x128 tile
// took 1.28x cuBLAS's GEMM at 8192^3 (H100, 2026-11-27; docs/gemm-backward.md).
// Instead each warp loads a chunk's rows of the input one chunk ahead, as
// whole vectors, the first chunk's while the tile's last wgmma run: the
// fragment epilogue as four 16-byte vectors a lane (16 rows x 64 columns),
// turned into the fragment layout through the warp's staging area; the
// staged epilogue as one vector a quad, which is already its walk. 0.99x
// there. At most k_prefetched_inputs inputs (16 or 32 registers each, beside
// 128 of accumulators); f32 inputs of the fragment epilogue (its staging
// area holds 16-bit rows) and row, column and scalar inputs load as before.
constexpr std::size_t k_prefetched_inputs = 2;

std::vector<std::size_t> prefetched_inputs(const GemmPlan& g) {
  const bool fragment = fragment_epilogue(g);
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < g.plan->inputs.size() && out.size() < k_prefetched_inputs; ++i) {
    const TensorPlan& t = g.plan->inputs[i];
    if (t.broadcast == Broadcast::full && (!fragment || size_of(t.dtype) == 2)) out.push_back(i);
  }
  return out;
}

// Words a staged quad of the input takes: 2 (16-bit) or 4 (f32).
int quad_words(const TensorPlan& t) { return static_cast<int>(size_of(t.dtype)); }

// Each prefetched input's value at the element, for emit_element_loads.
std::vector<std::string> held_values(const GemmPlan& g) {
  std::vector<std::string> held(g.plan->inputs.size());
  const bool fragment = fragment_epilogue(g);
  for (std::size_t i : prefetched_inputs(g)) {
    const TensorPlan& t = g.plan->inputs[i];
    const std::string type(storage_type_name(t.dtype));
    held[i] = fragment ? fmt::format("ef_word_half<{}>({}_f[f][h], e)", type, t.field)
              : quad_words(t) == 2 ? fmt::format("ef_word_half<{}>({}_q4[i][e >> 1], e & 1)", type, t.field)
                                   : fmt::format("__uint_as_float({}_q4[i][e])", t.field);
  }
  return held;
}

// The loads of chunk `u` (an expression) into each input's `_pf` registers.
std::string emit_prefetch_loads(const GemmPlan& g, const std::string& u, const std::string& pad) {
  const bool fragment = fragment_epilogue(g);
  const std::string width = fragment ? "64" : "CHUNK";
  std::string s = u == "0" ? pad + "const long long pf_row = m0 + wm + warp * 16, pf_col = n0;\n"
                           : fmt::format("{0}const long long pf_row = m0 + wm + ({1}) / (BN / {2}) * 64 + warp * 16, "
                                         "pf_col = n0 + ({1}) % (BN / {2}) * {2};\n",
                                         pad, u, width);
  for (std::size_t i : prefetched_inputs(g)) {
    const TensorPlan& t = g.plan->inputs[i];
    // Note [Strided epilogue tensors]: a strided input's rows lie its ld apart.
    const std::string ld = t.strided ? ", " + tensor_row_stride(t) : "";
    s += fragment ? fmt::format("{0}ef_prefetch_rows16({1}_pf, reinterpret_cast<const unsigned short*>({2}), pf_row, "
                                "pf_col, p.m, p.n{3}, {1}_vec, lane);\n",
                                pad, t.field, tensor_pointer(g, t), ld)
                  : fmt::format("{0}ef_prefetch_quads<{2}>({1}_pf, {3}, pf_row, pf_col, p.m, p.n{4}, {1}_vec, lane);\n",
                                pad, t.field, quad_words(t), tensor_pointer(g, t), ld);
  }
  s.pop_back();
  return s;
}

// Before the tile's last wgmma wait: the registers and chunk 0's loads.
std::string emit_prefetch_first(const GemmPlan& g) {
  const std::vector<std::size_t> inputs = prefetched_inputs(g);
  if (inputs.empty()) return {};
  const bool fragment = fragment_epilogue(g);
  std::string s = "\n    // The first chunk's [M,N] epilogue inputs, loaded while the last wgmma run\n"
                  "    // (Note [Prefetched epilogue inputs]).";
  for (std::size_t i : inputs) {
    const TensorPlan& t = g.plan->inputs[i];
    const int words = fragment ? 4 : quad_words(t);
    s += fmt::format("\n    const bool {0}_vec = ({5} & {1}) == 0 && (reinterpret_cast<unsigned long long>({4}) & {2}) == 0;"
                     "\n    unsigned {0}_pf[4][{3}];",
                     t.field, fragment ? 7 : 3, fragment ? 15 : 4 * words - 1, words, tensor_pointer(g, t),
                     tensor_row_stride(t));
  }
  s += "\n    {\n" + emit_prefetch_loads(g, "0", "      ") + "\n    }";
  return s;
}

// At the start of a chunk: its inputs into the element walk's registers, the
// next chunk's loads issued.
std::string emit_prefetch_step(const GemmPlan& g) {
  const std::vector<std::size_t> inputs = prefetched_inputs(g);
  if (inputs.empty()) return {};
  const bool fragment = fragment_epilogue(g);
  std::string s;
  for (std::size_t i : inputs) {
    const TensorPlan& t = g.plan->inputs[i];
    if (fragment) {
      s += fmt::format("\n        unsigned {0}_f[8][2];  // this chunk's {0}, fragment layout (Note [Prefetched epilogue inputs])"
                       "\n        ef_rows16_to_fragments<F16_SROW>({0}_f, {0}_pf, st16, lane);",
                       t.field);
    } else {
      s += fmt::format("\n        unsigned {0}_q4[4][{1}];  // this chunk's quads of {0} (Note [Prefetched epilogue inputs])"
                       "\n#pragma unroll\n        for (int i = 0; i < 4; ++i)"
                       "\n#pragma unroll\n          for (int w = 0; w < {1}; ++w) {0}_q4[i][w] = {0}_pf[i][w];",
                       t.field, quad_words(t));
    }
  }
  s += fmt::format("\n        if (u + 1 < MI * (BN / {})) {{  // the next chunk's, in flight during this one\n", fragment ? "64" : "CHUNK");
  s += emit_prefetch_loads(g, "u + 1", "          ") + "\n        }";
  return s;
}

// The full (non-col_sum) outputs, in binding order.
std::vector<const TensorPlan*> full_outputs(const KernelPlan& plan) {
  std::vector<const TensorPlan*> out;
  for (const TensorPlan& t : plan.outputs)
    if (!is_column_sum(plan.spec->graph.node(t.value))) out.push_back(&t);
  return out;
}

// A chunk's 16 rows x 64 columns of output `field` from the staging area, 16
// bytes a lane (8-byte halves where its rows are not 16-byte aligned), its
// rows `stride` elements apart (p.n, or a strided output's ld).
std::string emit_fragment_store(const std::string& pointer, const std::string& v16, const std::string& stride) {
  return fmt::format(R"(
#pragma unroll
        for (int i = 0; i < 4; ++i) {{
          const int r = i * 4 + (lane >> 3), c8 = (lane & 7) * 8;
          const uint4 v = *reinterpret_cast<const uint4*>(st16 + r * F16_SROW + c8);
          const long long row = m0 + wm + mi * 64 + warp * 16 + r, col = n0 + c * 64 + c8;
          if (row < p.m && col < p.n) {{
            auto* const dst = {0} + row * {2} + col;
            if ({1} && col + 7 < p.n) {{
              *reinterpret_cast<uint4*>(dst) = v;
            }} else {{  // N % 4 == 0: the first four columns are in, the last four may not be
              *reinterpret_cast<uint2*>(dst) = make_uint2(v.x, v.y);
              if (col + 7 < p.n) *reinterpret_cast<uint2*>(dst + 4) = make_uint2(v.z, v.w);
            }}
          }}
        }})",
                     pointer, v16, stride);
}

// Whether output k's rows start 16-byte aligned (the first output's flag keeps
// the name it had when the epilogue had one output).
std::string v16_name(std::size_t k, const std::string& field) { return k == 0 ? "v16" : field + "_v16"; }

// The fragment epilogue's loop (Note [Fragment epilogue]). With a second
// output its packed pairs wait in registers (16 a lane) while the first goes
// out through the staging area, then take its place.
std::string emit_fragment_body(const GemmPlan& g, const EpilogueContract& contract) {
  if (!fragment_epilogue(g)) return "      // (not this kernel's: Note [Fragment epilogue])";
  const std::vector<const TensorPlan*> outs = full_outputs(*g.plan);
  const std::string pad(14, ' ');
  std::string aligned, quads, held, stage_rest;
  for (std::size_t k = 0; k < outs.size(); ++k) {
    const std::string& f = outs[k]->field;
    aligned += fmt::format("\n      const bool {} = ({} & 7) == 0 && (reinterpret_cast<unsigned long long>({}) & 15) == 0;",
                           v16_name(k, f), tensor_row_stride(*outs[k]), tensor_pointer(g, f));
    quads += fmt::format("\n            float {}_q[2];", f);
    if (k == 0) continue;
    held += fmt::format("\n        unsigned {}_pairs[8][2];  // packed, until the staging area is free", f);
    stage_rest += fmt::format(R"(
        __syncwarp();  // the staging area's reads are done
#pragma unroll
        for (int f = 0; f < 8; ++f)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            *reinterpret_cast<unsigned*>(st16 + ((lane >> 2) + h * 8) * F16_SROW + f * 8 + (lane & 3) * 2) = {0}_pairs[f][h];
        __syncwarp();{1})",
                              f, emit_fragment_store(tensor_pointer(g, f), v16_name(k, f), tensor_row_stride(*outs[k])));
  }
  std::string pack;
  for (std::size_t k = 1; k < outs.size(); ++k)
    pack += fmt::format("\n            {0}_pairs[f][h] = ef_pack2(p.{0}, {0}_q[0], {0}_q[1]);", outs[k]->field);
  return fmt::format(R"(      unsigned short* const st16 = reinterpret_cast<unsigned short*>(staging + (threadIdx.x / 32 - 4) * STAGE_WARP_FLOATS);
      // 16-byte stores where rows start 16-byte aligned; else 8-byte halves (N % 4 == 0).{6}
#pragma unroll 1
      for (int u = 0; u < MI * (BN / 64); ++u) {{
        const int mi = u / (BN / 64), c = u % (BN / 64);{3}
        float ch[8][4];
        fragment_chunk(ch, acc, u);{7}
        __syncwarp();  // the previous chunk's reads of the staging area are done{5}
#pragma unroll
        for (int f = 0; f < 8; ++f)
#pragma unroll
          for (int h = 0; h < 2; ++h) {{
            const long long row = m0 + wm + mi * 64 + warp * 16 + (lane >> 2) + h * 8;{8}
#pragma unroll
            for (int e = 0; e < 2; ++e) {{
              const long long col = n0 + c * 64 + f * 8 + (lane & 3) * 2 + e;
{1}
{2}
            }}
            *reinterpret_cast<unsigned*>(st16 + ((lane >> 2) + h * 8) * F16_SROW + f * 8 + (lane & 3) * 2) =
                ef_pack2(p.{0}, {0}_q[0], {0}_q[1]);{9}
          }}{4}
        __syncwarp();{10}{11}
      }})",
                     outs[0]->field, emit_element_loads(g, pad, true, held_values(g)),
                     emit_element(g, contract, "ch[f][2 * h + e]", pad, true, "[f * 2 + e]"),
                     emit_wgmma_chunk_decls(g, true), emit_wgmma_chunk_sums(g, true), emit_prefetch_step(g), aligned,
                     held, quads, pack, emit_fragment_store(tensor_pointer(g, outs[0]->field), "v16", tensor_row_stride(*outs[0])),
                     stage_rest);
}

// Note [Batched GEMM]: the persistent walk runs over batch x the problem's
// units, batch-major; the producer's copies take the unit's batch as the
// plane of the 3-D tensor maps, and the consumers offset the epilogue's
// tensors (batch_setup). Unbatched, every variable is the 2-D spelling.
TemplateVars wgmma_batch_vars(const GemmPlan& g) {
  TemplateVars v = batch_vars(g, "(long long)(unit / units)", "    ");
  for (const char* operand : {"a_ptr", "b_ptr", "b1"}) v.erase(operand);  // TMA reads the operands
  const bool b = g.batched;
  v.insert({{"all_units", b ? "units * (int)p.batch" : "units"},
            {"tile_unit", b ? "unit % units" : "unit"},
            {"tma_load", b ? "ef_tma_load_3d" : "ef_tma_load_2d"},
            {"tma_load_multicast", b ? "ef_tma_load_3d_multicast" : "ef_tma_load_2d_multicast"},
            {"unit_batch", b ? ", unit / units" : ""},
            {"batch_coord", b ? ", batch" : ""},
            {"batch_param", b ? ", int batch" : ""}});
  return v;
}

}  // namespace

KernelSource emit_gemm_sm90(const GemmPlan& g) {
  const KernelPlan& plan = *g.plan;
  const WgmmaTile& t = *g.wgmma;
  KernelSource ks;
  // The copy engine reads A and B: their base addresses must be 16-byte
  // aligned (row strides are, in shape class ld8); a misaligned launch takes
  // the mma.sync general kernel of the same key.
  ks.inputs = operand_bindings(g);
  ks.input_alignment.assign(ks.inputs.size(), 16);
  bind_epilogue_tensors(g, ks);
  ParamLayout layout;
  operand_params(g, layout);
  layout.add(ParamRole::opaque, g.a_kmajor ? a_kmajor_map : a_mmajor_map, "tma_a", "ef_tensor_map tma_a", 128, 64);
  layout.add(ParamRole::opaque, g.b_kmajor ? b_kmajor_map : b_nmajor_map, "tma_b", "ef_tensor_map tma_b", 128, 64);
  if (g.dual)
    layout.add(ParamRole::opaque, g.b_kmajor ? b1_kmajor_map : b1_nmajor_map, "tma_b1", "ef_tensor_map tma_b1", 128, 64);
  const int sums = column_sum_count(*plan.spec);
  if (sums > 0) {  // Note [GEMM column sums]: as the mma.sync kernel's (no split-K here)
    layout.add(ParamRole::workspace, 0, "col_counters", "unsigned* col_counters", 8, 8);
    layout.add(ParamRole::workspace, 1, "col_partials", "float* col_partials", 8, 8);
  }
  ks.requires_alignment = true;
  ks.shared_bytes = wgmma_shared_bytes(t, g.dual, sums);
  const EpilogueContract contract = epilogue_contract(plan);
  TemplateVars vars = common_vars(plan, contract, layout);
  vars.insert({
      {"operand_t", std::string(storage_type_name(plan.spec->mainloop.a))},
      {"dual", g.dual ? "true" : "false"},
      {"tma_b1", g.dual ? "tma_b1" : "tma_b"},
      {"bm", std::to_string(t.bm)},
      {"bn", std::to_string(t.bn)},
      {"bk", std::to_string(t.bk)},
      {"stages", std::to_string(t.stages)},
      {"group_m", std::to_string(t.group_m)},
      {"cluster", std::to_string(t.cluster)},
      {"pingpong", t.pingpong ? "true" : "false"},
      {"cluster_dims", t.cluster > 1 ? fmt::format("__cluster_dims__({}, 1, 1)", t.cluster) : ""},
      {"a_kmajor", g.a_kmajor ? "true" : "false"},
      {"b_kmajor", g.b_kmajor ? "true" : "false"},
      {"wgmma_function", wgmma_function(g)},
      {"acc1_operand", g.dual ? "acc1[mi], " : ""},
  });
  vars.merge(staged_vars(g, contract, 12));
  vars.merge(wgmma_batch_vars(g));
  vars.emplace("epilogue_prefetch", emit_prefetch_first(g));
  vars.emplace("staged_prefetch", fragment_epilogue(g) ? std::string() : emit_prefetch_step(g));
  if (!fragment_epilogue(g) && !prefetched_inputs(g).empty())
    vars.insert_or_assign("staged_loads", emit_element_loads(g, std::string(12, ' '), true, held_values(g)));
  vars.emplace("fragment_epilogue", fragment_epilogue(g) ? "true" : "false");
  vars.emplace("fragment_body", emit_fragment_body(g, contract));
  vars.emplace("column_sum_setup", emit_wgmma_column_setup(g));
  vars.emplace("staged_column_decls", emit_wgmma_chunk_decls(g, false));
  vars.emplace("staged_column_chunk", emit_wgmma_chunk_sums(g, false));
  vars.emplace("column_sums", emit_wgmma_column_sums(g));
  layout.finish(ks);
  ks.text = render_template(embedded_template("gemm_sm90.cu.in"), vars, "gemm_sm90.cu.in");
  return ks;
}


}  // namespace epifuse
