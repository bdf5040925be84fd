// The mma.sync mainloop: f16, bf16 and tf32 GEMM on sm_80+ tensor cores
// (GemmTile, templates/gemm_mma.cu.in, docs/gemm.md), split-K included.
#include <algorithm>

#include "codegen/column_sums.hpp"
#include "codegen/gemm/mainloop.hpp"
#include "epifuse/errors.hpp"

namespace epifuse {

LaunchGeometry gemm_tile_geometry(const GemmTile& t, const Shape& shape, unsigned shared_bytes) {
  const std::int64_t tiles = tiles_of(shape, t.bm, t.bn);
  EPIFUSE_CHECK(tiles <= 0x7fffffff, "gemm: {}x{} needs {} tiles of {}x{}, more than one launch holds", shape.m,
                shape.n, tiles, t.bm, t.bn);
  LaunchGeometry g;
  g.grid[0] = static_cast<unsigned>(tiles);
  g.grid[1] = static_cast<unsigned>(t.split_k);
  g.grid[2] = static_cast<unsigned>(shape.batch);  // Note [Batched GEMM]: blockIdx.z is the batch
  g.block[0] = static_cast<unsigned>(t.warps_m * t.warps_n * 32);
  g.shared_bytes = shared_bytes;
  return g;
}

namespace {

// Split-K candidates only where a tile grid fills less than half of the
// GPU's SMs: at 1024^3 on an H100 (256 tiles of 64x64) every split tile
// lost to the plain ones (docs/perf/gemm.md), so they would only cost tuning time.
std::int64_t split_max_tiles(const DeviceInfo& device) { return device.multiprocessors / 2; }

int operand_bytes(const GemmProblem& p) { return static_cast<int>(size_of(p.spec.mainloop.a)); }

// A first choice without tuning: big tiles where they fill the GPU, small
// ones for small problems (a 64x128 GEMM is launch-bound). The tuner's picks
// on an H100 (docs/perf/gemm.md): 32x32 tiles of 4 warps up to 256^2 outputs,
// 64x64 tiles of 8 warps up to 512^2, 64x64 of 4 warps up to 2048^2, 128x256
// with a 4-deep ring above.
//
// tf32 (Note [Default GEMM tile]; on sm_90a the MN-major tf32 operands wgmma
// cannot read): its fragments of MN-major tiles are read word by word, so a
// tile's mainloop is long and the grid wants every SM busy. Over the H200
// sweep the 128x256 tile (64x64 warp tiles) ran 1.07-1.09x ahead of 128x128
// wherever the device's shared memory holds its ring; under a wave of tiles,
// split-K until the splits fill one (1.10-1.48x ahead of the unsplit tiles).
// Where 128x128 tiles fill their waves by more than a tenth more than 128x256
// ones (1536x6144x1536 and 3072^3: 576 tiles in five waves against 288 in
// three), 128x128 ran 1.10-1.11x ahead (H100, 2026-11-27,
// docs/perf/default-tiles.md). From one wave of 128x128 tiles to a third
// more, where the second wave is mostly idle, 64x64: the fastest at
// 768x3072x768 (144 tiles on 132 SMs; 128x256 1.09-1.10x behind, H100 and
// H200), 1024x2560x1024 and 1280x2048x2048 (160 tiles); at 192 tiles
// (1536x2048x1024, 2048x1536x2048) 128x256 won and 64x64 ran 1.07x (H200,
// 2026-11-28). At 64 rows and fewer the 64-row tile stays where it fills the
// GPU: at 16x14336x4096 128x256 ran 3.3x the fastest, 64x64 1.27x (H200).
// Split in four at K = 1024 (8 BK steps a split), 128x128 ran 1.11-1.13x
// 64x128 split in two at 512x1024x1024 (H100 and H200), and 1.12-1.13x its
// own split in two at 1024^3. Where four splits of 128x128 tiles would still
// fill under half a wave, from K = 4096, the 64-row tile's 64x64 split up to
// four: at 128x2048x4096 (16 tiles, 64 splits) 128x128 ran 1.47x its time,
// where at 96-256 rows with 32 tiles (128 splits) 128x128 was the fastest
// (H200, 2026-11-28; docs/runs/2026-11-28-h200-few-row-tiles/).
// The dual GEMM keeps the rules above tf32's (no sweep of its tf32 tiles yet).
GemmTile single_heuristic(const GemmProblem& p) {
  const Shape& s = p.shape;
  if (p.spec.mainloop.math == GemmMath::tf32 && !p.dual) {
    // The first of these whose ring the device's shared memory holds.
    const auto fitting = [&](std::initializer_list<GemmTile> tiles) {
      for (const GemmTile& t : tiles)
        if (gemm_block_shared_bytes(t, 4, false) <= p.device.shared_per_block) return t;
      return GemmTile{64, 64, 32, 2, 2, 3, 8};
    };
    // Split-K doubled, up to four splits, while the splits fill less than
    // `want` and each keeps at least 16 BK steps.
    const auto split = [&](GemmTile t, std::int64_t tiles, std::int64_t want) {
      while (t.split_k < 4 && tiles * t.split_k < want && s.k >= 16LL * t.bk * t.split_k) t.split_k *= 2;
      return t;
    };
    const std::int64_t sms = std::max(p.device.multiprocessors, 1);
    GemmTile t = s.m <= 64 ? GemmTile{64, 64, 64, 2, 2, 3, 8}
                           : fitting({GemmTile{128, 128, 32, 2, 4, 6, 8}, GemmTile{128, 128, 32, 2, 4, 3, 8}});
    const std::int64_t tiles = tiles_of(s, t.bm, t.bn);
    // 128x128 where its tiles fill the waves they take by a tenth more.
    const bool narrow_fills_more = t.bm == 128 && wave_fill(tiles, sms) > wave_fill(tiles_of(s, 128, 256), sms) + 0.1;
    // From one wave of 128x128 tiles to a third more (the second wave mostly idle), 64x64.
    if (t.bm == 128 && tiles >= sms && 3 * tiles < 4 * sms) return GemmTile{64, 64, 32, 2, 2, 4, 8};
    // 64 rows and fewer keep their 64-row tile (128x256 ran 3.3x its time at 16x14336x4096).
    if (tiles >= sms)
      return t.bm == 64 || narrow_fills_more
                 ? t
                 : fitting({GemmTile{128, 256, 32, 2, 4, 4, 8}, GemmTile{128, 128, 32, 2, 4, 4, 8},
                            GemmTile{128, 128, 32, 2, 4, 3, 8}});
    // Fill 90% of a wave (64x64 tiles: two), with at least 8 BK steps a split.
    const std::int64_t want = t.bm == 64 ? 2 * sms : sms * 9 / 10;
    // Where 128x128 tiles would split in four with under 16 BK steps a split,
    // 64x128 tiles split in two.
    if (t.bm == 128 && tiles * 2 < want && s.k >= 32LL * t.bk && s.k < 64LL * t.bk) {
      t = fitting({GemmTile{64, 128, 32, 2, 2, 6, 8}, GemmTile{64, 128, 32, 2, 2, 3, 8}});
      const std::int64_t narrow = tiles_of(s, t.bm, t.bn);
      if (narrow < want && s.k >= 16LL * t.bk) t.split_k = 2;
      return t;
    }
    // Where four splits of 128x128 tiles would still fill under half a wave,
    // from K = 4096, the 64-row tile's 64x64 and its splits.
    if (t.bm == 128 && tiles * 4 < sms / 2 && s.k >= 4096) {
      const GemmTile small{64, 64, 64, 2, 2, 3, 8};
      return split(small, tiles_of(s, small.bm, small.bn), 2 * sms);
    }
    return split(t, tiles, want);
  }
  if (s.m * s.n <= 256 * 256) return {32, 32, 64, 2, 2, 4, 8};
  if (s.m * s.n <= 512 * 512) return {64, 64, 32, 2, 4, 4, 8};
  if (s.m * s.n <= 2048 * 2048) {
    // Few rows and a deep K: the ring wants depth. At 64x8192x4096 six stages
    // ran 1.24-1.39x ahead of three over four chains (H100 and H200,
    // 2026-11-27, docs/perf/default-tiles.md).
    const GemmTile deep{64, 64, 64, 2, 2, 6, 8};
    if (!p.dual && few_rows_deep_k(s) && gemm_block_shared_bytes(deep, operand_bytes(p), false) <= p.device.shared_per_block)
      return deep;
    return {64, 64, 64, 2, 2, 3, 8};
  }
  if (p.spec.mainloop.math == GemmMath::tf32) return {128, 128, 32, 2, 4, 4, 8};
  return {128, 256, 32, 2, 4, 4, 8};
}

// The dual GEMM's: the single choice, its warp tile halved along N where it
// would hold more than 64x32 outputs (two accumulators each). tf32 fragments
// of MN-major tiles are read word by word: 32x32 warp tiles keep those clear
// of spills with two accumulators.
GemmTile dual_heuristic(GemmTile t, GemmMath math) {
  if (math == GemmMath::tf32 && t.bm / t.warps_m > 32) t.bm /= 2;
  while (t.bn / t.warps_n > 32 && t.bn > 16) t.bn /= 2;
  t.split_k = 1;
  return t;
}

// The first choices above assume the shared memory of an sm_80 or sm_90 block
// (163 or 227 KiB). Where the device has less (sm_86 and sm_89: 99 KiB), the
// same tile with a shallower ring, down to three stages; then half the tile
// (its longer side first) with the ring it had; two stages last. The 16-bit
// default for large problems, 128x256 in four stages, needs 136 KiB: on those
// GPUs it becomes 128x128 in four.
GemmTile fit_shared_memory(GemmTile t, const GemmProblem& p) {
  const auto fits = [&](const GemmTile& x) {
    return gemm_block_shared_bytes(x, operand_bytes(p), p.dual) <= p.device.shared_per_block;
  };
  const int stages = t.stages;
  for (;;) {
    for (t.stages = stages; t.stages >= 3; --t.stages)
      if (fits(t)) return t;
    if (t.bn >= t.bm && t.bn / 2 / t.warps_n >= 16)
      t.bn /= 2;
    else if (t.bm / 2 / t.warps_m >= 16)
      t.bm /= 2;
    else
      break;
  }
  t.stages = 2;  // the smallest ring; the check reports it if even this does not fit
  return t;
}

class MmaMainloop final : public GemmMainloop {
 public:
  void check(const TileConfig& tile, const GemmProblem& p) const override {
    const GemmTile& t = std::get<GemmTile>(tile);
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
    if (p.dual) {
      // Two accumulators a thread: a 64x64 warp tile would hold 256 (docs/dual-gemm.md).
      const auto [mi, ni] = warp_fragments(t);
      EPIFUSE_CHECK(mi * ni <= 16, "dual_gemm tile {}: a warp tile of {}x{} holds {} accumulators a thread for two "
                    "products; at most 64x32 (128)", t.str(), t.bm / t.warps_m, t.bn / t.warps_n, 2 * mi * ni * 4);
      EPIFUSE_CHECK(t.split_k == 1, "dual_gemm tile {}: a dual GEMM has no split-K", t.str());
    }
    if (has_column_sums(p.spec))  // Note [GEMM column sums]: a staged lane's four columns are fixed
      EPIFUSE_CHECK(t.bn / t.warps_n <= 128, "gemm tile {}: a chain with a col_sum needs warp tiles at most 128 "
                    "columns wide (BN / warps_n), got {}", t.str(), t.bn / t.warps_n);
    const std::uint32_t bytes = gemm_block_shared_bytes(t, operand_bytes(p), p.dual);
    EPIFUSE_CHECK(bytes <= p.device.shared_per_block,
                  "gemm tile {}: needs {} bytes of shared memory, more than the {} a block can have", t.str(), bytes,
                  p.device.shared_per_block);
  }

  std::optional<TileConfig> heuristic(const GemmProblem& p) const override {
    const GemmTile t = p.dual ? dual_heuristic(single_heuristic(p), p.spec.mainloop.math) : single_heuristic(p);
    return fit_shared_memory(t, p);
  }

  std::vector<TileConfig> candidates(const GemmProblem& p) const override {
    std::vector<TileConfig> out = p.dual ? dual_candidates() : single_candidates(p);
    // tf32 tiles hold twice the bytes: keep those that fit.
    const bool sums = has_column_sums(p.spec);
    std::erase_if(out, [&](const TileConfig& c) {
      const GemmTile& t = std::get<GemmTile>(c);
      return gemm_block_shared_bytes(t, operand_bytes(p), p.dual) > p.device.shared_per_block ||
             (sums && t.bn / t.warps_n > 128);
    });
    return out;
  }

  LaunchGeometry geometry(const KernelSource& source, const Shape& shape, int) const override {
    return gemm_tile_geometry(std::get<GemmTile>(source.tile), shape, source.shared_bytes);
  }

  // Split-K: one flag per output tile (zeroed), one BM x BN fp32 partial per
  // tile. Column sums after them (Note [GEMM column sums]): one arrival
  // counter per column tile (zeroed), and a partial row of N floats per row
  // tile for each col_sum (sized for every output: an upper bound, as the
  // elementwise family's).
  WorkspaceNeeds workspace(const KernelSource& source, const Shape& shape) const override {
    const GemmTile& t = std::get<GemmTile>(source.tile);
    WorkspaceNeeds w;
    if (t.split_k > 1) {
      const std::int64_t tiles = tiles_of(shape, t.bm, t.bn);
      w.zeroed = static_cast<std::size_t>(tiles) * 4;
      w.scratch = static_cast<std::size_t>(tiles) * t.bm * t.bn * 4;
    }
    if (gemm_sums_columns(source)) add_column_sum_workspace(w, source, shape, t.bm, t.bn);
    return w;
  }

  KernelSource emit(const GemmPlan& g) const override { return emit_gemm(g); }

 private:
  // Large tiles (8 warps of 64x64) for throughput, BK 64 for fewer barriers,
  // small tiles for problems that would not fill the GPU, and split-K where
  // even those leave most SMs idle and K is long enough to cut.
  // Deep rings (5-8 stages): one block per SM must keep enough bytes in
  // flight to cover the load latency (docs/perf/gemm.md).
  static std::vector<TileConfig> single_candidates(const GemmProblem& p) {
    const Shape& shape = p.shape;
    std::vector<TileConfig> out;
    for (const GemmTile t : {
        GemmTile{128, 256, 32, 2, 4, 4, 8}, GemmTile{128, 256, 32, 2, 4, 6, 8}, GemmTile{128, 256, 64, 2, 4, 4, 8},
        GemmTile{256, 128, 32, 4, 2, 6, 8}, GemmTile{256, 128, 64, 4, 2, 3, 8}, GemmTile{128, 128, 32, 2, 2, 6, 8},
        GemmTile{128, 128, 64, 2, 2, 4, 8}, GemmTile{128, 128, 32, 2, 4, 6, 8}, GemmTile{64, 128, 32, 2, 2, 6, 8},
        GemmTile{128, 64, 32, 2, 2, 6, 8},  GemmTile{64, 64, 32, 2, 2, 4, 8},   GemmTile{64, 64, 64, 2, 2, 3, 8},
        GemmTile{64, 64, 64, 2, 2, 6, 8},   GemmTile{64, 64, 32, 2, 4, 4, 8},   GemmTile{32, 64, 32, 1, 2, 4, 8}})
      out.push_back(t);
    // Grids of a few blocks (the GEMM study's 64x128 and 128x256 outputs):
    // 32x32 tiles of 16x16 warp tiles spread the operand loads over 4x the SMs,
    // and 4 stages of BK 64 have a K of 256 in flight at once (docs/perf/gemm.md).
    if (tiles_of(shape, 64, 64) < p.device.multiprocessors)
      for (const GemmTile t : {GemmTile{32, 32, 64, 2, 2, 4, 8}, GemmTile{32, 32, 64, 1, 1, 4, 8},
                               GemmTile{32, 64, 64, 1, 2, 4, 8}, GemmTile{16, 64, 64, 1, 2, 4, 8}})
        out.push_back(t);
    for (const GemmTile base : {GemmTile{128, 128, 32, 2, 4, 6, 8}, GemmTile{64, 128, 32, 2, 2, 6, 8},
                                GemmTile{64, 64, 64, 2, 2, 3, 8}, GemmTile{64, 64, 32, 2, 2, 4, 8}})
      for (int split : {2, 4}) {
        const std::int64_t tiles = tiles_of(shape, base.bm, base.bn);
        if (tiles > split_max_tiles(p.device) || shape.k < 8LL * base.bk * split) continue;
        GemmTile t = base;
        t.split_k = split;
        out.push_back(t);
      }
    return out;
  }

  // 64x32 warp tiles and below; narrow tiles for decode shapes (M of 16 to
  // 128 against a wide N: the grid fills the GPU along N).
  static std::vector<TileConfig> dual_candidates() {
    return {GemmTile{128, 128, 32, 2, 4, 4, 8}, GemmTile{128, 128, 64, 2, 4, 3, 8}, GemmTile{128, 64, 32, 2, 2, 4, 8},
            GemmTile{64, 128, 32, 1, 4, 4, 8},  GemmTile{64, 64, 32, 2, 2, 4, 8},   GemmTile{64, 64, 64, 2, 2, 3, 8},
            GemmTile{32, 64, 64, 1, 2, 4, 8},   GemmTile{16, 64, 64, 1, 2, 4, 8},   GemmTile{32, 32, 64, 2, 2, 4, 8},
            GemmTile{16, 32, 64, 1, 1, 6, 8}};
  }
};

}  // namespace

void add_column_sum_workspace(WorkspaceNeeds& w, const KernelSource& source, const Shape& shape, int bm, int bn) {
  const auto tiles_m = static_cast<std::size_t>((shape.m + bm - 1) / bm);
  const auto tiles_n = static_cast<std::size_t>((shape.n + bn - 1) / bn);
  w.zeroed += tiles_n * 4;
  w.scratch += source.outputs.size() * tiles_m * static_cast<std::size_t>(shape.n) * 4;
}

const GemmMainloop& mma_mainloop() {
  static const MmaMainloop mainloop;
  return mainloop;
}

}  // namespace epifuse
