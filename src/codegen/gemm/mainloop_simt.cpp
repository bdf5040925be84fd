// The SIMT mainloop: exact f32 GEMM on FFMA (GemmTile, templates/gemm_simt.cu.in).
// 256 threads, each 4 or 8 rows by 4 or 8 columns (every tile here runs without
// spills on all four layouts and both load paths).
#include "codegen/gemm/mainloop.hpp"
#include "epifuse/errors.hpp"

namespace epifuse {

namespace {

class SimtMainloop final : public GemmMainloop {
 public:
  void check(const TileConfig& tile, const GemmProblem& p) const override {
    const GemmTile& t = std::get<GemmTile>(tile);
    EPIFUSE_CHECK((t.bm == 64 || t.bm == 128) && (t.bn == 64 || t.bn == 128) && (t.bk == 8 || t.bk == 16) &&
                      t.warps_m * t.warps_n == 8 && t.stages == 2 && t.split_k == 1,
                  "gemm tile {}: an f32 (FFMA) tile has BM, BN in {{64, 128}}, BK 8 or 16, 8 warps, 2 stages and no "
                  "split-K",
                  t.str());
    EPIFUSE_CHECK(t.group_m >= 1 && t.group_m <= 64, "gemm tile {}: group_m must be in [1, 64]", t.str());
    // Two accumulators and a third operand tile (static shared memory, 48 KB).
    EPIFUSE_CHECK(!p.dual || (t.bm * t.bn <= 128 * 64 && (t.bk == 8 || t.bm + 2 * t.bn <= 256)),
                  "dual_gemm tile {}: an f32 (FFMA) dual tile has at most 128x64 or 64x128 outputs (two accumulators "
                  "a thread), and BK 8 unless BM + 2 BN <= 256 (shared memory)",
                  t.str());
  }

  // The largest tile whose blocks still fill the GPU: an SM holds two
  // 256-thread blocks of 128 registers, and a tile count of 3/4 of two blocks
  // on each SM is a full enough wave. A dual tile keeps at most 128x64 outputs
  // (two accumulators a thread).
  std::optional<TileConfig> heuristic(const GemmProblem& p) const override {
    const auto tiles = [&](std::int64_t bm, std::int64_t bn) { return tiles_of(p.shape, bm, bn); };
    const std::int64_t filled = std::int64_t{2} * p.device.multiprocessors * 3 / 4;
    GemmTile t{64, 64, 8, 2, 4, 2, 8};
    if (tiles(128, 128) >= filled)
      t = {128, 128, 8, 2, 4, 2, 8};
    else if (tiles(128, 64) >= filled)
      t = {128, 64, 8, 2, 4, 2, 8};
    if (p.dual && t.bm * t.bn > 128 * 64) t.bn = 64;
    return t;
  }

  // 8x8 outputs a thread for throughput, 8x4 and 4x4 where fewer blocks would
  // leave SMs idle; BK 16 halves the barriers. Dual: thread tiles of 8x4 at most.
  std::vector<TileConfig> candidates(const GemmProblem& p) const override {
    if (p.dual)
      return {GemmTile{128, 64, 8, 2, 4, 2, 8}, GemmTile{64, 128, 8, 2, 4, 2, 8}, GemmTile{64, 64, 8, 2, 4, 2, 8},
              GemmTile{64, 64, 16, 2, 4, 2, 8}};
    return {GemmTile{128, 128, 8, 2, 4, 2, 8}, GemmTile{128, 128, 16, 2, 4, 2, 8}, GemmTile{128, 64, 8, 2, 4, 2, 8},
            GemmTile{128, 64, 16, 2, 4, 2, 8},  GemmTile{64, 128, 8, 2, 4, 2, 8},   GemmTile{64, 128, 16, 2, 4, 2, 8},
            GemmTile{64, 64, 8, 2, 4, 2, 8},    GemmTile{64, 64, 16, 2, 4, 2, 8}};
  }

  LaunchGeometry geometry(const KernelSource& source, const Shape& shape, int) const override {
    return gemm_tile_geometry(std::get<GemmTile>(source.tile), shape, source.shared_bytes);
  }

  KernelSource emit(const GemmPlan& g) const override { return emit_gemm(g); }
};

}  // namespace

const GemmMainloop& simt_mainloop() {
  static const SimtMainloop mainloop;
  return mainloop;
}

}  // namespace epifuse
