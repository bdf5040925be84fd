#pragma once
// Note [GEMM mainloops] (docs/gemm-mainloops.md)
// One class per GEMM mainloop and architecture: SIMT (exact f32 on FFMA),
// mma.sync (sm_80+ tensor cores), wgmma + TMA (sm_90a) and the AMD wave
// kernel (MFMA, WMMA or their FMA form). Each owns its tile type's rules, its
// untuned choice, its tuning candidates, its launch geometry and workspace, and
// calls its emitter; a dual GEMM is GemmProblem::dual for every one of them.
// GemmFamily (gemm_family.cpp) only chooses among them.
#include <optional>
#include <string_view>
#include <vector>

#include "codegen/family.hpp"
#include "codegen/gemm/gemm.hpp"
#include "epifuse/device_info.hpp"

namespace epifuse {

/// What a mainloop's choices read: the spec, the shape, the target ("sm_90a",
/// "gfx90a"; empty: none known) and the device's properties.
struct GemmProblem {
  const KernelSpec& spec;
  const Shape& shape;
  std::string_view target;
  const DeviceInfo& device;
  bool dual = false;  ///< A * B0 and A * B1, two accumulators (docs/dual-gemm.md)
  std::int64_t batches = 1;  ///< the launch's problems: shape.batch, or with `shape` their work shape, stacked in M (Note [Batched GEMM])
};

class GemmMainloop {
 public:
  virtual ~GemmMainloop() = default;
  /// UserError where `tile` (this mainloop's tile type) cannot run the problem.
  virtual void check(const TileConfig& tile, const GemmProblem& p) const = 0;
  /// The untuned tile; nullopt where this mainloop does not take the problem
  /// untuned (wgmma below its size, or without its target and operands).
  virtual std::optional<TileConfig> heuristic(const GemmProblem& p) const = 0;
  /// The tuner's tiles for the problem, best guess first (empty: none run it).
  virtual std::vector<TileConfig> candidates(const GemmProblem& p) const = 0;
  virtual LaunchGeometry geometry(const KernelSource& source, const Shape& shape, int multiprocessors) const = 0;
  virtual WorkspaceNeeds workspace(const KernelSource&, const Shape&) const { return {}; }
  virtual KernelSource emit(const GemmPlan& g) const = 0;
};

const GemmMainloop& simt_mainloop();   // mainloop_simt.cpp, templates/gemm_simt.cu.in
const GemmMainloop& mma_mainloop();    // mainloop_mma.cpp, templates/gemm_mma.cu.in
const GemmMainloop& wgmma_mainloop();  // mainloop_wgmma.cpp, templates/gemm_sm90.cu.in
const GemmMainloop& wave_mainloop();   // mainloop_wave.cpp, templates/gemm_wave.cu.in

/// Output tiles of BM x BN over M x N.
inline std::int64_t tiles_of(const Shape& s, std::int64_t bm, std::int64_t bn) {
  return ((s.m + bm - 1) / bm) * ((s.n + bn - 1) / bn);
}

// The share of one wave's slots that `tiles` blocks of one tile an SM keep
// busy over the waves they take: 1 for whole waves.
inline double wave_fill(std::int64_t tiles, std::int64_t sms) {
  const std::int64_t waves = (tiles + sms - 1) / sms;
  return static_cast<double>(tiles) / static_cast<double>(waves * sms);
}

// The share of the waves' slots that M x N outputs fill in tiles of bm x bn:
// wave_fill, less what the partial last row and column tiles leave idle.
inline double output_fill(const Shape& s, std::int64_t bm, std::int64_t bn, std::int64_t sms) {
  const std::int64_t tiles = tiles_of(s, bm, bn), waves = (tiles + sms - 1) / sms;
  return static_cast<double>(s.m) * static_cast<double>(s.n) / (static_cast<double>(bm * bn) * static_cast<double>(waves * sms));
}

// A few rows against a deep K, within mma.sync's 64x64 tiles (up to 2048^2
// outputs): mma.sync takes its 64x64 tile with a six-stage ring there, and
// sm_90a sends a staged 16-bit epilogue to it (Note [Default GEMM tile]).
inline bool few_rows_deep_k(const Shape& s) { return s.m <= 64 && s.k >= 4096 && s.m * s.n <= 2048 * 2048; }

/// Note [GEMM column sums]: adds a kernel's col_sum workspace, with tiles of
/// bm x bn, to `w`: a counter per column tile to `zeroed`, a partial row of N
/// floats per row tile and output to `scratch` (every output: an upper bound).
void add_column_sum_workspace(WorkspaceNeeds& w, const KernelSource& source, const Shape& shape, int bm, int bn);
/// The launch of a GemmTile kernel (SIMT and mma.sync alike): a block a tile, a split-K slice a grid row.
LaunchGeometry gemm_tile_geometry(const GemmTile& t, const Shape& shape, unsigned shared_bytes);

/// The wgmma tensor maps (mainloop_wgmma.cpp): ParamField::index says which operand and layout.
std::optional<TensorMap2d> wgmma_tensor_map(const ParamField& field, const OpaqueContext& context);
/// From this many outputs on sm_90a, only wgmma tiles are tuned (mainloop_wgmma.cpp).
bool wgmma_only(const GemmProblem& p);

}  // namespace epifuse
