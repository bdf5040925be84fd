// The Hopper GEMM's emitter (templates/gemm_sm90.cu.in, docs/hopper.md): the
// wgmma + TMA mainloop, the staged epilogue every GEMM template shares
// (gemm_parts.hpp), and the fragment epilogue that is this template's own.
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

// Note [Fragment epilogue]: the staged epilogue walks a lane's four
// consecutive columns, which the dropout contract's one Philox call per four
// elements needs, and so stages fp32 accumulators through shared memory and
// back (128 KB a 128x256 tile). A chain with no dropout, one output and that
// output 16-bit runs on the accumulator registers instead (two consecutive
// columns a lane, the fragment layout), and only its outputs go through
// shared memory, packed in pairs: half the bytes, and 16-byte stores of 64
// columns a warp chunk. At the power limit the fp32 round trip, not the stores,
// cost 9% of a 4096^3 GEMM; against the staged kernel in one process on an H100
// (docs/perf/gemm.md): GEMM alone 1.05 -> 1.03x cuBLAS at 4096^3, bias+GELU 1.13 -> 1.10x.
// Dropout chains keep the staged quads (lane pairs sharing Philox calls here were slower,
// 1.15 -> 1.17x at 4096^3: docs/perf/gemm.md, tried and rejected).
// Only [M,N] outputs count: a dgrad's dacc with its col_sum db keeps this path
// (Note [GEMM column sums]), the sum taken on the fragments.
const TensorPlan* full_output(const KernelPlan& plan) {
  const TensorPlan* out = nullptr;
  for (const TensorPlan& t : plan.outputs) {
    if (is_column_sum(plan.spec->graph.node(t.value))) continue;
    if (out) return nullptr;
    out = &t;
  }
  return out;
}

bool fragment_epilogue(const GemmPlan& g) {
  const KernelPlan& plan = *g.plan;
  const TensorPlan* out = full_output(plan);
  return g.wgmma && !g.dual && vector_stores(g) && plan.dropouts.empty() && out && size_of(out->dtype) == 2;
}

std::string emit_fragment_body(const GemmPlan& g, const EpilogueContract& contract) {
  if (!fragment_epilogue(g)) return "      // (not this kernel's: Note [Fragment epilogue])";
  const std::string out = full_output(*g.plan)->field;
  const std::string pad(14, ' ');
  return fmt::format(R"(      unsigned short* const st16 = reinterpret_cast<unsigned short*>(staging + (threadIdx.x / 32 - 4) * STAGE_WARP_FLOATS);
      // 16-byte stores where rows start 16-byte aligned; else 8-byte halves (N % 4 == 0).
      const bool v16 = (p.n & 7) == 0 && (reinterpret_cast<unsigned long long>({5}) & 15) == 0;
#pragma unroll 1
      for (int u = 0; u < MI * (BN / 64); ++u) {{
        const int mi = u / (BN / 64), c = u % (BN / 64);{3}
        float ch[8][4];
        fragment_chunk(ch, acc, u);
        __syncwarp();  // the previous chunk's reads of the staging area are done
#pragma unroll
        for (int f = 0; f < 8; ++f)
#pragma unroll
          for (int h = 0; h < 2; ++h) {{
            const long long row = m0 + wm + mi * 64 + warp * 16 + (lane >> 2) + h * 8;
            float {0}_q[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {{
              const long long col = n0 + c * 64 + f * 8 + (lane & 3) * 2 + e;
{1}
{2}
            }}
            *reinterpret_cast<unsigned*>(st16 + ((lane >> 2) + h * 8) * F16_SROW + f * 8 + (lane & 3) * 2) =
                ef_pack2(p.{0}, {0}_q[0], {0}_q[1]);
          }}{4}
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 4; ++i) {{
          const int r = i * 4 + (lane >> 3), c8 = (lane & 7) * 8;
          const uint4 v = *reinterpret_cast<const uint4*>(st16 + r * F16_SROW + c8);
          const long long row = m0 + wm + mi * 64 + warp * 16 + r, col = n0 + c * 64 + c8;
          if (row < p.m && col < p.n) {{
            auto* const dst = {5} + row * p.n + col;
            if (v16 && col + 7 < p.n) {{
              *reinterpret_cast<uint4*>(dst) = v;
            }} else {{  // N % 4 == 0: the first four columns are in, the last four may not be
              *reinterpret_cast<uint2*>(dst) = make_uint2(v.x, v.y);
              if (col + 7 < p.n) *reinterpret_cast<uint2*>(dst + 4) = make_uint2(v.z, v.w);
            }}
          }}
        }}
      }})",
                     out, emit_element_loads(g, pad, true),
                     emit_element(g, contract, "ch[f][2 * h + e]", pad, true, "[f * 2 + e]"),
                     emit_wgmma_chunk_decls(g, true), emit_wgmma_chunk_sums(g, true), tensor_pointer(g, out));
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
