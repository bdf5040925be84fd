// The GEMM family's face to the pipeline (Note [Kernel families]).
#include <algorithm>

#include "codegen/family.hpp"
#include "codegen/gemm/gemm.hpp"
#include "epifuse/errors.hpp"

namespace epifuse {

namespace {

// Split-K candidates only where a tile grid fills less than half of the
// GPU's SMs: at 1024^3 on an H100 (256 tiles of 64x64) every split tile
// lost to the plain ones (docs/PERF.md), so they would only cost tuning time.
std::int64_t split_max_tiles(const DeviceInfo& device) { return device.multiprocessors / 2; }

std::int64_t tiles_of(const Shape& s, std::int64_t bm, std::int64_t bn) {
  return ((s.m + bm - 1) / bm) * ((s.n + bn - 1) / bn);
}

void check_tile(const GemmTile& t, int operand_bytes, bool dual, const DeviceInfo& device) {
  auto pow2 = [](int v) { return v > 0 && (v & (v - 1)) == 0; };
  EPIFUSE_CHECK(pow2(t.bm) && pow2(t.bn) && t.bm >= 16 && t.bn >= 16 && t.bm <= 256 && t.bn <= 256,
                "gemm tile {}: BM and BN must be powers of two in [16, 256]", t.str());
  EPIFUSE_CHECK(t.bk == 32 || t.bk == 64, "gemm tile {}: BK must be 32 or 64", t.str());
  EPIFUSE_CHECK(pow2(t.warps_m) && pow2(t.warps_n) && t.warps_m * t.warps_n <= 8,
                "gemm tile {}: warps_m x warps_n must be powers of two, at most 8 warps", t.str());
  EPIFUSE_CHECK(t.bm / t.warps_m >= 16 && t.bn / t.warps_n >= 16,
                "gemm tile {}: each warp's tile must be at least 16 x 16", t.str());
  EPIFUSE_CHECK(t.stages >= 2 && t.stages <= 8, "gemm tile {}: stages must be in [2, 8]", t.str());
  EPIFUSE_CHECK(t.group_m >= 1 && t.group_m <= 64, "gemm tile {}: group_m must be in [1, 64]", t.str());
  EPIFUSE_CHECK(t.split_k >= 1 && t.split_k <= 16, "gemm tile {}: split-K must be in [1, 16]", t.str());
  if (dual) {
    // Two accumulators a thread: a 64x64 warp tile would hold 256 (docs/dual-gemm.md).
    const auto [mi, ni] = warp_fragments(t);
    EPIFUSE_CHECK(mi * ni <= 16, "dual_gemm tile {}: a warp tile of {}x{} holds {} accumulators a thread for two "
                  "products; at most 64x32 (128)", t.str(), t.bm / t.warps_m, t.bn / t.warps_n, 2 * mi * ni * 4);
    EPIFUSE_CHECK(t.split_k == 1, "dual_gemm tile {}: a dual GEMM has no split-K", t.str());
  }
  EPIFUSE_CHECK(gemm_block_shared_bytes(t, operand_bytes, dual) <= device.shared_per_block,
                "gemm tile {}: needs {} bytes of shared memory, more than the {} a block can have", t.str(),
                gemm_block_shared_bytes(t, operand_bytes, dual), device.shared_per_block);
}

// A first choice without tuning: big tiles where they fill the GPU, small
// ones for small problems (a 64x128 GEMM is launch-bound). The tuner's picks
// on an H100 (docs/PERF.md v7, v10): 32x32 tiles of 4 warps up to 256^2
// outputs, 64x64 tiles of 8 warps up to 512^2,
// 64x64 of 4 warps up to 2048^2, 128x256 with a 4-deep ring above.
// On sm_90a f16/bf16 problems from this many outputs up take wgmma tiles.
constexpr std::int64_t k_wgmma_min_outputs = 1024 * 1024;
constexpr std::int64_t k_wgmma_only_outputs = 2048 * 2048;
// tf32 fragments of MN-major tiles are read word by word: 64x32 warp tiles
// keep those kernels clear of spills.
GemmTile heuristic_tile(const Shape& s, GemmMath math) {
  if (s.m * s.n <= 256 * 256) return {32, 32, 64, 2, 2, 4, 8};
  if (s.m * s.n <= 512 * 512) return {64, 64, 32, 2, 4, 4, 8};
  if (s.m * s.n <= 2048 * 2048) return {64, 64, 64, 2, 2, 3, 8};
  if (math == GemmMath::tf32) return {128, 128, 32, 2, 4, 4, 8};
  return {128, 256, 32, 2, 4, 4, 8};
}

// The exact fp32 kernel: 256 threads, each 4 or 8 rows by 4 or 8 columns
// (every tile here runs without spills on all four layouts and both load paths).
void check_simt_tile(const GemmTile& t, bool dual) {
  EPIFUSE_CHECK((t.bm == 64 || t.bm == 128) && (t.bn == 64 || t.bn == 128) && (t.bk == 8 || t.bk == 16) &&
                    t.warps_m * t.warps_n == 8 && t.stages == 2 && t.split_k == 1,
                "gemm tile {}: an f32 (FFMA) tile has BM, BN in {{64, 128}}, BK 8 or 16, 8 warps, 2 stages and no "
                "split-K",
                t.str());
  EPIFUSE_CHECK(t.group_m >= 1 && t.group_m <= 64, "gemm tile {}: group_m must be in [1, 64]", t.str());
  // Two accumulators and a third operand tile (static shared memory, 48 KB).
  EPIFUSE_CHECK(!dual || (t.bm * t.bn <= 128 * 64 && (t.bk == 8 || t.bm + 2 * t.bn <= 256)),
                "dual_gemm tile {}: an f32 (FFMA) dual tile has at most 128x64 or 64x128 outputs (two accumulators "
                "a thread), and BK 8 unless BM + 2 BN <= 256 (shared memory)",
                t.str());
}

// The largest f32 tile whose blocks still fill the GPU: an SM holds two
// 256-thread blocks of 128 registers, and a tile count of 3/4 of two blocks on
// each SM is a full enough wave.
GemmTile simt_heuristic_tile(const Shape& s, const DeviceInfo& device) {
  const auto tiles = [&](std::int64_t bm, std::int64_t bn) { return tiles_of(s, bm, bn); };
  const std::int64_t filled = std::int64_t{2} * device.multiprocessors * 3 / 4;
  if (tiles(128, 128) >= filled) return {128, 128, 8, 2, 4, 2, 8};
  if (tiles(128, 64) >= filled) return {128, 64, 8, 2, 4, 2, 8};
  return {64, 64, 8, 2, 4, 2, 8};
}

// ---- the Hopper mainloop (WgmmaTile, templates/gemm_sm90.cu.in, docs/hopper.md) ----

bool wgmma_target(std::string_view target) { return target == "sm_90a"; }

// The operands wgmma reads: f16 and bf16 in any layout, and f32 through tf32
// (rounded by the copy engine, docs/hopper.md) K-major only (A row-major, B
// col-major: wgmma has no transposed tf32).
bool wgmma_operands(const Mainloop& ml) {
  if (ml.a == DType::f16 || ml.a == DType::bf16) return true;
  return ml.a == DType::f32 && ml.math == GemmMath::tf32 && ml.a_layout == Layout::row && ml.b_layout == Layout::col;
}
// A stage's rows are 128 bytes of K: 64 16-bit elements, 32 tf32 ones.
int wgmma_bk(const Mainloop& ml) { return ml.a == DType::f32 ? 32 : 64; }

// wgmma operands whose rows the copy engine can address (16-byte strides),
// on an sm_90a target, with coordinates that fit TMA's 32-bit ones.
bool wgmma_applies(const KernelSpec& spec, const Shape& s, std::string_view target) {
  const Mainloop& ml = spec.mainloop;
  constexpr std::int64_t coord = 0x7fffffff;
  return wgmma_target(target) && wgmma_operands(ml) && gemm_shape_class(ml, s).starts_with("ld8") && s.m <= coord &&
         s.n <= coord && s.k <= coord && tiles_of(s, 128, 64) <= coord;
}

void check_wgmma_tile(const WgmmaTile& t, const KernelSpec& spec, const Shape& s, std::string_view target,
                      const DeviceInfo& device) {
  const Mainloop& ml = spec.mainloop;
  const bool dual = ml.kind == MainloopKind::dual_gemm;
  EPIFUSE_CHECK(target.empty() || wgmma_target(target), "gemm tile {}: wgmma tiles run on sm_90a only, not {}",
                t.str(), target);
  EPIFUSE_CHECK(wgmma_operands(ml),
                "gemm tile {}: wgmma tiles take f16 or bf16 operands, or f32 with \"math\": \"tf32\" where A is "
                "row-major and B col-major, not {}{} with A {} and B {}",
                t.str(), to_string(ml.a), ml.math == GemmMath::tf32 ? " (tf32)" : "", to_string(ml.a_layout),
                to_string(ml.b_layout));
  EPIFUSE_CHECK(s.m <= 0x7fffffff && s.n <= 0x7fffffff && s.k <= 0x7fffffff && tiles_of(s, t.bm, t.bn) <= 0x7fffffff,
                "gemm tile {}: the copy engine's coordinates are 32-bit: M, N, K and the tile count must be below 2^31",
                t.str());
  EPIFUSE_CHECK((t.bm == 128 || t.bm == 256 || (t.bm == 64 && t.pingpong)) && (t.bn == 64 || t.bn == 128 || t.bn == 256) &&
                    t.bk == wgmma_bk(ml),
                "gemm tile {}: a wgmma tile has BM 128 or 256 (or 64 ping-pong), BN 64, 128 or 256, and BK {} ({} "
                "operands: 128 bytes of K a row)",
                t.str(), wgmma_bk(ml), to_string(ml.a));
  // A consumer warpgroup's rows: BM/2 cooperative, BM ping-pong; a thread holds rows x BN / 128 accumulators.
  // A dual GEMM holds two accumulators per element.
  const int rows = t.pingpong ? t.bm : t.bm / 2, per_thread = rows * t.bn / 128 * (dual ? 2 : 1);
  EPIFUSE_CHECK(t.pingpong == 0 || t.pingpong == 1, "gemm tile {}: ping-pong is 0 or 1", t.str());
  EPIFUSE_CHECK(per_thread <= 128, "{} tile {}: a consumer warpgroup holds {} accumulators a thread; at most 128",
                to_string(ml.kind), t.str(), per_thread);
  EPIFUSE_CHECK(t.stages >= 2 && t.stages <= 8, "gemm tile {}: stages must be in [2, 8]", t.str());
  EPIFUSE_CHECK(t.group_m >= 1 && t.group_m <= 64, "gemm tile {}: group_m must be in [1, 64]", t.str());
  EPIFUSE_CHECK(t.cluster == 1 || t.cluster == 2,
                "gemm tile {}: the cluster is 1, or 2 (each block copies half of B: half its columns, or with BN 64 "
                "and B row-major half its k rows)",
                t.str());
  EPIFUSE_CHECK(wgmma_shared_bytes(t, dual) <= device.shared_per_block,
                "gemm tile {}: needs {} bytes of shared memory, more than the {} a block can have", t.str(),
                wgmma_shared_bytes(t, dual), device.shared_per_block);
}

// The dual GEMM's tiles (docs/dual-gemm.md): two accumulators a thread, so
// warp tiles of at most 64x32 (mma.sync) and 64 + 64 a consumer thread
// (wgmma), no split-K; FFMA thread tiles of 8x4. The ping-pong tiles (each
// warpgroup a whole 128x64 or 64x128 dual tile) come last; the 128x64 one is
// the default for large shapes (docs/PERF.md, w21).
std::vector<WgmmaTile> dual_wgmma_tiles(int bk) {
  return {WgmmaTile{128, 128, bk, 4, 8}, WgmmaTile{128, 128, bk, 4, 8, 2}, WgmmaTile{128, 64, bk, 6, 8},
          WgmmaTile{128, 64, bk, 6, 8, 1, 1}, WgmmaTile{64, 128, bk, 5, 8, 1, 1}};
}

class GemmFamily final : public KernelFamily {
 public:
  explicit GemmFamily(MainloopKind kind) : kind_(kind) {}
  MainloopKind kind() const override { return kind_; }

  TileConfig resolve_tile(const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& requested,
                          std::string_view target, const DeviceInfo& device) const override {
    const Mainloop& ml = spec.mainloop;
    EPIFUSE_CHECK(ml.a == ml.b, "gemm: A and B must have one dtype, got a={} b={}", to_string(ml.a), to_string(ml.b));
    // AMD targets run the wave kernel (docs/amd.md); elsewhere a wave tile is
    // asked for by name (the GPU suite runs its FMA form on NVIDIA).
    if (const auto* v = requested ? std::get_if<WaveTile>(&*requested) : nullptr) {
      check_wave_tile(*v, spec, target, device);
      return *v;
    }
    if (amd_target(target)) {
      EPIFUSE_CHECK(!requested, "tile {}: AMD targets take wave tiles (mBMxBNxBKwWMxWNgGROUP.OP, e.g. {})",
                    to_string(*requested), wave_heuristic_tile(spec, shape, target, device).str());
      const WaveTile t = wave_heuristic_tile(spec, shape, target, device);
      check_wave_tile(t, spec, target, device);
      return t;
    }
    if (requested) {
      if (const auto* w = std::get_if<WgmmaTile>(&*requested)) {
        check_wgmma_tile(*w, spec, shape, target, device);
        return *w;
      }
    } else if (wgmma_applies(spec, shape, target) && shape.m * shape.n >= k_wgmma_min_outputs) {
      const int bk = wgmma_bk(ml);
      // Dual: the cooperative 128x64 tile under a wave of 128x128 tiles; above,
      // the ping-pong 128x64 tile (w21; for tf32 the tuner's pick at 4096^3 and
      // 6% ahead of the cooperative 128x128 at (8192, 8192, 4096): docs/PERF.md,
      // session 14). All are candidates.
      if (dual()) {
        if (tiles_of(shape, 128, 128) < device.multiprocessors) return WgmmaTile{128, 64, bk, 6, 8};
        return WgmmaTile{128, 64, bk, 6, 8, 1, 1};
      }
      return tiles_of(shape, 128, 256) >= device.multiprocessors ? WgmmaTile{128, 256, bk, 4, 8} : WgmmaTile{128, 128, bk, 6, 8};
    }
    const bool simt = gemm_is_simt(ml);
    GemmTile tile = simt ? simt_heuristic_tile(shape, device) : heuristic_tile(shape, ml.math);
    if (dual()) tile = dual_heuristic_tile(tile, simt, ml.math);
    if (requested) {
      const auto* t = std::get_if<GemmTile>(&*requested);
      EPIFUSE_CHECK(t, "tile {}: a gemm kernel takes a gemm tile (BM, BN, BK, warps, stages)", to_string(*requested));
      tile = *t;
    }
    if (simt)
      check_simt_tile(tile, dual());
    else
      check_tile(tile, static_cast<int>(size_of(ml.a)), dual(), device);
    return tile;
  }

  std::string_view shape_class(const KernelSpec& spec, const TileConfig&, const Shape& shape) const override {
    return gemm_shape_class(spec.mainloop, shape);
  }

  // Without 16-byte loads (ld1) the kernel has one path, for any alignment.
  KernelPath path_for(const KernelSpec& spec, const TileConfig&, const Shape& shape) const override {
    return gemm_shape_class(spec.mainloop, shape).starts_with("ld8") ? KernelPath::fastest : KernelPath::general;
  }

  std::vector<TileConfig> tile_candidates(const KernelSpec& spec, const Shape& shape,
                                          std::string_view target, const DeviceInfo& device) const override {
    // f32 (FFMA): 8x8 outputs a thread for throughput, 8x4 and 4x4 where
    // fewer blocks would leave SMs idle; BK 16 halves the barriers.
    if (amd_target(target)) return wave_candidates(spec, shape, target, device);
    if (dual()) return dual_candidates(spec, shape, target, device);
    if (gemm_is_simt(spec.mainloop))
      return {GemmTile{128, 128, 8, 2, 4, 2, 8}, GemmTile{128, 128, 16, 2, 4, 2, 8}, GemmTile{128, 64, 8, 2, 4, 2, 8},
              GemmTile{128, 64, 16, 2, 4, 2, 8}, GemmTile{64, 128, 8, 2, 4, 2, 8},   GemmTile{64, 128, 16, 2, 4, 2, 8},
              GemmTile{64, 64, 8, 2, 4, 2, 8},   GemmTile{64, 64, 16, 2, 4, 2, 8}};
    // On sm_90a the wgmma tiles first (docs/hopper.md), then the mma.sync ones:
    // the tuner picks mma.sync where a problem is too small to fill the GPU.
    // From 2048^2 outputs (128 tiles of 128x256 and more) the wgmma tiles
    // beat every mma.sync one by a quarter or more (H100: 721 against 453
    // TFLOP/s at 4096^3, 745 against 646 at 8192^3; docs/PERF.md), so only
    // they are compiled: the tuner's NVRTC time stays within its budget.
    std::vector<TileConfig> out;
    if (wgmma_applies(spec, shape, target)) {
      const int bk = wgmma_bk(spec.mainloop);
      for (const WgmmaTile t : {WgmmaTile{128, 256, bk, 4, 8}, WgmmaTile{128, 256, bk, 4, 8, 2},
                                WgmmaTile{256, 128, bk, 4, 8}, WgmmaTile{256, 128, bk, 4, 8, 2},
                                WgmmaTile{128, 128, bk, 6, 8}, WgmmaTile{128, 128, bk, 6, 8, 1, 1},
                                WgmmaTile{128, 64, bk, 8, 8}})
        out.push_back(t);
      if (shape.m * shape.n >= k_wgmma_only_outputs) return out;
    }
    // Large tiles (8 warps of 64x64) for throughput, BK 64 for fewer barriers,
    // small tiles for problems that would not fill the GPU, and split-K where
    // even those leave most SMs idle and K is long enough to cut.
    // Deep rings (5-8 stages): one block per SM must keep enough bytes in
    // flight to cover the load latency (docs/PERF.md v6).
    for (const GemmTile t : {
        GemmTile{128, 256, 32, 2, 4, 4, 8}, GemmTile{128, 256, 32, 2, 4, 6, 8}, GemmTile{128, 256, 64, 2, 4, 4, 8},
        GemmTile{256, 128, 32, 4, 2, 6, 8}, GemmTile{256, 128, 64, 4, 2, 3, 8}, GemmTile{128, 128, 32, 2, 2, 6, 8},
        GemmTile{128, 128, 64, 2, 2, 4, 8}, GemmTile{128, 128, 32, 2, 4, 6, 8}, GemmTile{64, 128, 32, 2, 2, 6, 8},
        GemmTile{128, 64, 32, 2, 2, 6, 8},  GemmTile{64, 64, 32, 2, 2, 4, 8},   GemmTile{64, 64, 64, 2, 2, 3, 8},
        GemmTile{64, 64, 64, 2, 2, 6, 8},   GemmTile{64, 64, 32, 2, 4, 4, 8},   GemmTile{32, 64, 32, 1, 2, 4, 8}})
      out.push_back(t);
    // Grids of a few blocks (the GEMM study's 64x128 and 128x256 outputs):
    // 32x32 tiles of 16x16 warp tiles spread the operand loads over 4x the SMs,
    // and 4 stages of BK 64 have a K of 256 in flight at once (docs/PERF.md v10).
    if (tiles_of(shape, 64, 64) < device.multiprocessors)
      for (const GemmTile t : {GemmTile{32, 32, 64, 2, 2, 4, 8}, GemmTile{32, 32, 64, 1, 1, 4, 8},
                               GemmTile{32, 64, 64, 1, 2, 4, 8}, GemmTile{16, 64, 64, 1, 2, 4, 8}})
        out.push_back(t);
    for (const GemmTile base : {GemmTile{128, 128, 32, 2, 4, 6, 8}, GemmTile{64, 128, 32, 2, 2, 6, 8},
                                GemmTile{64, 64, 64, 2, 2, 3, 8}, GemmTile{64, 64, 32, 2, 2, 4, 8}})
      for (int split : {2, 4}) {
        const std::int64_t tiles = tiles_of(shape, base.bm, base.bn);
        if (tiles > split_max_tiles(device) || shape.k < 8LL * base.bk * split) continue;
        GemmTile t = base;
        t.split_k = split;
        out.push_back(t);
      }
    // tf32 tiles hold twice the bytes: keep those that fit.
    const int bytes = static_cast<int>(size_of(spec.mainloop.a));
    std::erase_if(out, [&](const TileConfig& c) {
      const auto* t = std::get_if<GemmTile>(&c);
      return t && gemm_block_shared_bytes(*t, bytes) > device.shared_per_block;
    });
    return out;
  }

  // Split-K: one flag per output tile (zeroed), one BM x BN fp32 partial per tile.
  WorkspaceNeeds workspace(const KernelSource& source, const Shape& shape) const override {
    const auto* gemm = std::get_if<GemmTile>(&source.tile);
    if (!gemm) return {};
    const GemmTile& t = *gemm;
    if (t.split_k == 1) return {};
    const std::int64_t tiles = tiles_of(shape, t.bm, t.bn);
    return {static_cast<std::size_t>(tiles) * 4, static_cast<std::size_t>(tiles) * t.bm * t.bn * 4};
  }

  KernelSource emit(KernelPlan& plan) const override {
    plan.shape_class = shape_class(*plan.spec, plan.tile, plan.shape);
    plan.path = std::max(plan.path, path_for(*plan.spec, plan.tile, plan.shape));
    plan.kernel_name = kernel_name(plan);
    if (std::holds_alternative<WgmmaTile>(plan.tile) && plan.path == KernelPath::general) {
      // Pointers the copy engine cannot take (or rows it cannot address): the
      // key's general kernel is the mma.sync one, under the wgmma key.
      const TileConfig wgmma = plan.tile;
      plan.tile = k_wgmma_fallback_tile;
      KernelSource ks = emit_gemm(plan_gemm(plan));
      plan.tile = wgmma;
      ks.tile = wgmma;
      return ks;
    }
    return emit_gemm(plan_gemm(plan));
  }

  // The field's index says which operand and layout (TensorMapIndex).
  std::optional<TensorMap2d> tensor_map(const ParamField& field, const OpaqueContext& c) const override {
    const auto& t = std::get<WgmmaTile>(c.source.tile);
    const auto m = static_cast<std::uint64_t>(c.shape.m), n = static_cast<std::uint64_t>(c.shape.n),
               k = static_cast<std::uint64_t>(c.shape.k);
    const auto bm = static_cast<unsigned>(t.bm), bn = static_cast<unsigned>(t.bn);
    // A box row is 128 bytes: BK 64 of 16-bit elements, or 32 f32 ones that
    // the copy engine rounds to tf32 on the way (docs/hopper.md).
    const int es = 128 / t.bk;
    const auto box_inner = static_cast<unsigned>(t.bk);
    // MN-major B: [64 k][64 n] boxes; with a cluster and one such block (BN 64)
    // each block copies half of its k rows.
    const unsigned nmajor_box = t.bn / 64 >= t.cluster ? 64u : 64u / static_cast<unsigned>(t.cluster);
    auto map = [&](std::uint64_t base, std::uint64_t inner, std::uint64_t outer, unsigned box_outer) {
      // A base the copy engine cannot take sends the launch to the general
      // kernel (KernelSource::requires_alignment), which has no maps; an empty
      // K is never loaded. Neither needs a map.
      return base % 16 != 0 || inner == 0 || outer == 0 || (inner * es) % 16 != 0
                 ? std::nullopt
                 : std::optional<TensorMap2d>(
                       TensorMap2d{base, inner, outer, inner * es, box_inner, box_outer, es, es == 4});
    };
    switch (field.index) {
      case a_kmajor_map: return map(c.inputs[0], k, m, bm);              // [M][K]
      case a_mmajor_map: return map(c.inputs[0], m, k, 64);              // [K][M] (16-bit)
      case b_kmajor_map: return map(c.inputs[1], k, n, bn / t.cluster);  // [N][K], a block's share
      case b_nmajor_map: return map(c.inputs[1], n, k, nmajor_box);      // [K][N]
      case b1_kmajor_map: return map(c.inputs[2], k, n, bn / t.cluster);
      case b1_nmajor_map: return map(c.inputs[2], n, k, nmajor_box);
      default: EPIFUSE_ASSERT(false, "unknown tensor map {}", field.index);
    }
    return std::nullopt;
  }

  LaunchGeometry geometry(const KernelSource& source, const Shape& shape, int multiprocessors) const override {
    if (const auto* w = std::get_if<WgmmaTile>(&source.tile); w && source.path == KernelPath::fastest) {
      // Persistent: one block per SM (the ring takes its shared memory), each
      // walking tiles blockIdx.x, + gridDim.x, ...
      // A cluster's blocks walk units of `cluster` vertically adjacent tiles.
      const std::int64_t units = tiles_of(shape, std::int64_t{w->bm} * w->cluster, w->bn);
      const std::int64_t slots = multiprocessors > 0 ? multiprocessors / w->cluster : units;
      LaunchGeometry g;
      g.grid[0] = static_cast<unsigned>(std::min(units, slots) * w->cluster);
      g.block[0] = 384;
      g.shared_bytes = source.shared_bytes;
      return g;
    }
    if (const auto* v = std::get_if<WaveTile>(&source.tile)) {
      const std::int64_t tiles = tiles_of(shape, v->bm, v->bn);
      EPIFUSE_CHECK(tiles <= 0x7fffffff, "gemm: {}x{} needs {} tiles of {}x{}, more than one launch holds", shape.m,
                    shape.n, tiles, v->bm, v->bn);
      LaunchGeometry g;
      g.grid[0] = static_cast<unsigned>(tiles);
      g.block[0] = static_cast<unsigned>(v->waves_m * v->waves_n * v->lanes());
      g.shared_bytes = source.shared_bytes;
      return g;
    }
    const GemmTile t = std::holds_alternative<WgmmaTile>(source.tile) ? k_wgmma_fallback_tile
                                                                       : std::get<GemmTile>(source.tile);
    const std::int64_t tiles = tiles_of(shape, t.bm, t.bn);
    EPIFUSE_CHECK(tiles <= 0x7fffffff, "gemm: {}x{} needs {} tiles of {}x{}, more than one launch holds", shape.m,
                  shape.n, tiles, t.bm, t.bn);
    LaunchGeometry g;
    g.grid[0] = static_cast<unsigned>(tiles);
    g.grid[1] = static_cast<unsigned>(t.split_k);
    g.block[0] = static_cast<unsigned>(t.warps_m * t.warps_n * 32);
    g.shared_bytes = source.shared_bytes;
    return g;
  }

 private:
  bool dual() const { return kind_ == MainloopKind::dual_gemm; }

  // The untuned single-GEMM choice, its warp tile halved along N where it
  // would hold more than 64x32 outputs (two accumulators each).
  // tf32 fragments of MN-major tiles are read word by word: 32x32 warp tiles
  // keep those clear of spills with two accumulators.
  static GemmTile dual_heuristic_tile(GemmTile t, bool simt, GemmMath math) {
    if (simt) {
      if (t.bm * t.bn > 128 * 64) t.bn = 64;
      return t;
    }
    if (math == GemmMath::tf32 && t.bm / t.warps_m > 32) t.bm /= 2;
    while (t.bn / t.warps_n > 32 && t.bn > 16) t.bn /= 2;
    t.split_k = 1;
    return t;
  }

  std::vector<TileConfig> dual_candidates(const KernelSpec& spec, const Shape& shape, std::string_view target,
                                          const DeviceInfo& device) const {
    std::vector<TileConfig> out;
    if (gemm_is_simt(spec.mainloop)) {
      for (const GemmTile t : {GemmTile{128, 64, 8, 2, 4, 2, 8}, GemmTile{64, 128, 8, 2, 4, 2, 8},
                               GemmTile{64, 64, 8, 2, 4, 2, 8}, GemmTile{64, 64, 16, 2, 4, 2, 8}})
        out.push_back(t);
      return out;
    }
    if (wgmma_applies(spec, shape, target)) {
      for (const WgmmaTile& t : dual_wgmma_tiles(wgmma_bk(spec.mainloop))) out.push_back(t);
      if (shape.m * shape.n >= k_wgmma_only_outputs) return out;
    }
    // 64x32 warp tiles and below; narrow tiles for decode shapes (M of 16 to
    // 128 against a wide N: the grid fills the GPU along N).
    for (const GemmTile t : {GemmTile{128, 128, 32, 2, 4, 4, 8}, GemmTile{128, 128, 64, 2, 4, 3, 8},
                             GemmTile{128, 64, 32, 2, 2, 4, 8}, GemmTile{64, 128, 32, 1, 4, 4, 8},
                             GemmTile{64, 64, 32, 2, 2, 4, 8}, GemmTile{64, 64, 64, 2, 2, 3, 8},
                             GemmTile{32, 64, 64, 1, 2, 4, 8}, GemmTile{16, 64, 64, 1, 2, 4, 8},
                             GemmTile{32, 32, 64, 2, 2, 4, 8}, GemmTile{16, 32, 64, 1, 1, 6, 8}})
      out.push_back(t);
    const int bytes = static_cast<int>(size_of(spec.mainloop.a));
    std::erase_if(out, [&](const TileConfig& c) {
      const auto* t = std::get_if<GemmTile>(&c);
      return t && gemm_block_shared_bytes(*t, bytes, true) > device.shared_per_block;
    });
    return out;
  }

  MainloopKind kind_;
};

}  // namespace

const KernelFamily& gemm_family() {
  static const GemmFamily family(MainloopKind::gemm);
  return family;
}

const KernelFamily& dual_gemm_family() {
  static const GemmFamily family(MainloopKind::dual_gemm);
  return family;
}

}  // namespace epifuse
