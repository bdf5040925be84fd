// The wave mainloop, AMD's GEMM (WaveTile, templates/gemm_wave.cu.in,
// docs/amd.md): which instruction each AMD target has, the rules a tile must
// keep, the untuned choice, the tuner's candidates and the launch.
#include <algorithm>

#include <fmt/format.h>

#include "codegen/column_sums.hpp"
#include "codegen/gemm/mainloop.hpp"
#include "epifuse/errors.hpp"

namespace epifuse {

namespace {

bool mfma_arch(std::string_view t) { return t.starts_with("gfx90a") || t.starts_with("gfx94"); }
bool wmma_arch(std::string_view t) { return t.starts_with("gfx11"); }
int frag_rows(const WaveTile& t) { return t.op == 0 ? 32 : 16; }
int accumulators(const WaveTile& t) { return t.op == 0 ? 16 : 8; }


std::string wave_tile_problem(const WaveTile& t, const KernelSpec& spec, std::string_view target,
                              const DeviceInfo& device) {
  const Mainloop& ml = spec.mainloop;
  const bool dual = ml.kind == MainloopKind::dual_gemm;
  auto pow2 = [](int v) { return v > 0 && (v & (v - 1)) == 0; };
  const std::string name = t.str();
  if (t.op != 0 && t.op != 1) return fmt::format("wave tile {}: the op is mfma or wmma", name);
  if (!pow2(t.bm) || !pow2(t.bn) || t.bm < 16 || t.bn < 16 || t.bm > 256 || t.bn > 256)
    return fmt::format("wave tile {}: BM and BN must be powers of two in [16, 256]", name);
  if (t.bk != 16 && t.bk != 32 && t.bk != 64) return fmt::format("wave tile {}: BK must be 16, 32 or 64", name);
  if (!pow2(t.waves_m) || !pow2(t.waves_n) || t.waves_m * t.waves_n * t.lanes() > 1024)
    return fmt::format("wave tile {}: waves_m x waves_n must be powers of two, at most 1024 lanes a block", name);
  if (t.bm / t.waves_m % frag_rows(t) != 0 || t.bn / t.waves_n % frag_rows(t) != 0 || t.bm < t.waves_m * frag_rows(t))
    return fmt::format("wave tile {}: a wave's tile must be whole {}x{} fragments", name, frag_rows(t), frag_rows(t));
  if (t.group_m < 1 || t.group_m > 64) return fmt::format("wave tile {}: group_m must be in [1, 64]", name);
  if (t.fma != 0 && t.fma != 1) return fmt::format("wave tile {}: fma is 0 or 1", name);
  // Note [GEMM column sums]: a lane of the staged epilogue keeps four fixed
  // columns only where a wave's row of quads fits its lanes.
  if (has_column_sums(spec) && t.bn / t.waves_n > 4 * t.lanes())
    return fmt::format("wave tile {}: a chain with a col_sum needs wave tiles at most {} columns wide (BN / waves_n, "
                       "four a lane), got {}", name, 4 * t.lanes(), t.bn / t.waves_n);
  if (!t.fma && ml.a == DType::f32)
    return fmt::format("wave tile {}: f32 operands take the FMA form ({}-fma)", name, t.op == 0 ? ".mfma" : ".wmma");
  if (!t.fma && !target.empty() && !(t.op == 0 ? mfma_arch(target) : wmma_arch(target)))
    return fmt::format("wave tile {}: {} runs on {} only, not {}; the FMA form ({}-fma) runs anywhere", name,
                       t.op == 0 ? "MFMA" : "WMMA", t.op == 0 ? "gfx90a and gfx942" : "gfx11",
                       target, t.op == 0 ? ".mfma" : ".wmma");
  const int per_lane = (dual ? 2 : 1) * (t.bm / t.waves_m / frag_rows(t)) * (t.bn / t.waves_n / frag_rows(t)) *
                       accumulators(t);
  // MFMA keeps its accumulators in the 256 AGPRs; WMMA's share the VGPRs with
  // everything else (clang-19 spilled 246 VGPRs of a 128-accumulator gfx1100 tile).
  const int max_per_lane = t.op == 0 ? 128 : 64;
  if (per_lane > max_per_lane)
    return fmt::format("{} tile {}: a lane would hold {} accumulators; at most {} for {}", to_string(ml.kind), name,
                       per_lane, max_per_lane, t.op == 0 ? "MFMA" : "WMMA");
  // An AMD workgroup's LDS (gfx90a, gfx942, gfx10-12: 64 KiB), or NVIDIA's
  // opt-in shared memory for the FMA form in the GPU suite.
  const std::uint32_t limit = device.shared_per_block;
  const std::uint32_t bytes = wave_shared_bytes(t, static_cast<int>(size_of(ml.a)), dual);
  if (bytes > limit)
    return fmt::format("wave tile {}: needs {} bytes of shared memory, more than the {} a block can have{}", name, bytes,
                       limit, amd_target(target) ? " on AMD GPUs" : "");
  return {};
}

// MFMA on CDNA, WMMA on RDNA3, for f16 and bf16; otherwise the FMA form of
// the layout whose wave is the target's (64 lanes on gfx9, 32 on RDNA).
// Big tiles where they fill the GPU (a tile a CU), 64x64 below. Sizes were
// chosen by what the compilers make of them (no spills: the compile tier
// checks), not by timings: no AMD GPU has run them.
WaveTile wave_heuristic_tile(const KernelSpec& spec, const Shape& shape, std::string_view target,
                             const DeviceInfo& device) {
  const Mainloop& ml = spec.mainloop;
  const bool dual = ml.kind == MainloopKind::dual_gemm;
  const bool half = ml.a == DType::f16 || ml.a == DType::bf16;
  WaveTile t;
  t.op = target.starts_with("gfx9") ? 0 : 1;
  t.fma = half && (t.op == 0 ? mfma_arch(target) : wmma_arch(target)) ? 0 : 1;
  // The FMA form (f32, or an architecture without the instruction): 64x64,
  // which needs no more registers than an RDNA wave has.
  if (!half) return WaveTile{64, 64, 16, 2, 2, 8, t.op, 1};
  if (t.fma) return WaveTile{64, 64, 32, 2, 2, 8, t.op, 1};
  const bool big = tiles_of(shape, 128, dual ? 64 : 128) >= device.multiprocessors;
  if (!big) return WaveTile{64, 64, 32, 2, 2, 8, t.op, t.fma};
  if (dual) return t.op == 0 ? WaveTile{128, 64, 32, 2, 2, 8, 0, t.fma} : WaveTile{128, 64, 32, 4, 2, 8, 1, t.fma};
  return t.op == 0 ? WaveTile{128, 128, 32, 2, 2, 8, 0, t.fma} : WaveTile{128, 128, 32, 2, 4, 8, 1, t.fma};
}

std::vector<TileConfig> wave_candidates(const KernelSpec& spec, const Shape& shape, std::string_view target,
                                        const DeviceInfo& device) {
  const WaveTile first = wave_heuristic_tile(spec, shape, target, device);
  std::vector<TileConfig> out{first};
  for (WaveTile t : {WaveTile{128, 128, 32, 2, 2, 8}, WaveTile{128, 128, 32, 2, 4, 8}, WaveTile{128, 64, 32, 2, 2, 8},
                     WaveTile{128, 64, 32, 4, 2, 8},
                     WaveTile{64, 128, 32, 2, 2, 8}, WaveTile{64, 64, 32, 2, 2, 8}, WaveTile{64, 64, 64, 2, 2, 8},
                     WaveTile{64, 64, 16, 2, 2, 8}, WaveTile{32, 64, 64, 1, 2, 8}, WaveTile{32, 32, 64, 1, 1, 8}}) {
    t.op = first.op;
    t.fma = first.fma;
    if (wave_tile_problem(t, spec, target, device).empty() && std::find(out.begin(), out.end(), TileConfig{t}) == out.end())
      out.push_back(t);
  }
  return out;
}

class WaveMainloop final : public GemmMainloop {
 public:
  void check(const TileConfig& tile, const GemmProblem& p) const override {
    const std::string why = wave_tile_problem(std::get<WaveTile>(tile), p.spec, p.target, p.device);
    EPIFUSE_CHECK(why.empty(), "{}", why);
  }

  std::optional<TileConfig> heuristic(const GemmProblem& p) const override {
    return wave_heuristic_tile(p.spec, p.shape, p.target, p.device);
  }

  std::vector<TileConfig> candidates(const GemmProblem& p) const override {
    return wave_candidates(p.spec, p.shape, p.target, p.device);
  }

  LaunchGeometry geometry(const KernelSource& source, const Shape& shape, int) const override {
    const WaveTile& v = std::get<WaveTile>(source.tile);
    const std::int64_t tiles = tiles_of(shape, v.bm, v.bn);
    EPIFUSE_CHECK(tiles <= 0x7fffffff, "gemm: {}x{} needs {} tiles of {}x{}, more than one launch holds", shape.m,
                  shape.n, tiles, v.bm, v.bn);
    LaunchGeometry g;
    g.grid[0] = static_cast<unsigned>(tiles);
    g.grid[2] = static_cast<unsigned>(shape.batch);  // Note [Batched GEMM]: blockIdx.z is the batch
    g.block[0] = static_cast<unsigned>(v.waves_m * v.waves_n * v.lanes());
    g.shared_bytes = source.shared_bytes;
    return g;
  }

  // Column sums (Note [GEMM column sums]): a counter per column tile (zeroed)
  // and a partial row per row tile and output (scratch), as mma.sync's.
  WorkspaceNeeds workspace(const KernelSource& source, const Shape& shape) const override {
    WorkspaceNeeds w;
    const WaveTile& v = std::get<WaveTile>(source.tile);
    if (gemm_sums_columns(source)) add_column_sum_workspace(w, source, shape, v.bm, v.bn);
    return w;
  }

  KernelSource emit(const GemmPlan& g) const override { return emit_gemm_wave(g); }
};

}  // namespace

bool amd_target(std::string_view target) { return target.starts_with("gfx"); }

const GemmMainloop& wave_mainloop() {
  static const WaveMainloop mainloop;
  return mainloop;
}

}  // namespace epifuse
