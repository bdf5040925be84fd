// The GEMM family's face to the pipeline (Note [Kernel families]): it chooses
// among the GEMM mainloops (Note [GEMM mainloops], mainloop.hpp) and holds
// what they share: the shape class, the path, the kernel's name. Registered
// twice, as `gemm` and as `dual_gemm` (GemmProblem::dual).
#include <algorithm>

#include "codegen/family.hpp"
#include "codegen/gemm/mainloop.hpp"
#include "epifuse/errors.hpp"

namespace epifuse {

namespace {

// Note [Batched GEMM] (gemm.hpp): a batched problem's tiles are chosen for
// its whole work, the batches stacked in M (a heuristic counts tiles against
// the GPU's SMs); split-K is not batched, and batches fill the GPU anyway.
Shape batch_work_shape(const Shape& shape) {
  if (shape.batch == 1) return shape;
  Shape work = shape;
  work.m = shape.m * shape.batch;
  work.batch = 1;
  work.batch_stride_a = work.batch_stride_b = work.batch_stride_b1 = Shape::dense_batch;
  return work;
}

TileConfig without_split_k(TileConfig tile, const Shape& shape, bool requested) {
  auto* t = std::get_if<GemmTile>(&tile);
  if (shape.batch == 1 || !t || t->split_k == 1) return tile;
  EPIFUSE_CHECK(!requested, "tile {}: split-K is not built for a batched GEMM (batch {}); take a tile without it",
                to_string(tile), shape.batch);
  t->split_k = 1;
  return tile;
}

class GemmFamily final : public KernelFamily {
 public:
  explicit GemmFamily(MainloopKind kind) : kind_(kind) {}
  MainloopKind kind() const override { return kind_; }

  // A requested tile goes to the mainloop of its type; untuned, AMD targets
  // take the wave kernel, sm_90a the wgmma one where it applies, the rest
  // SIMT (exact f32) or mma.sync. Every one of them sums a col_sum output's
  // columns (Note [GEMM column sums]). On NVIDIA a wave tile is asked for
  // by name (the GPU suite runs its FMA form there).
  TileConfig resolve_tile(const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& requested,
                          std::string_view target, const DeviceInfo& device) const override {
    const Mainloop& ml = spec.mainloop;
    EPIFUSE_CHECK(ml.a == ml.b, "gemm: A and B must have one dtype, got a={} b={}", to_string(ml.a), to_string(ml.b));
    const GemmProblem p = problem(spec, shape, target, device);
    const Shape work_shape = batch_work_shape(shape);
    GemmProblem work = problem(spec, work_shape, target, device);
    work.batches = shape.batch;
    if (requested && std::holds_alternative<WaveTile>(*requested)) {
      wave_mainloop().check(*requested, p);
      return *requested;
    }
    if (amd_target(target)) {
      const TileConfig t = *wave_mainloop().heuristic(work);
      EPIFUSE_CHECK(!requested, "tile {}: AMD targets take wave tiles (mBMxBNxBKwWMxWNgGROUP.OP, e.g. {})",
                    to_string(*requested), to_string(t));
      wave_mainloop().check(t, p);
      return t;
    }
    if (requested && std::holds_alternative<WgmmaTile>(*requested)) {
      wgmma_mainloop().check(*requested, p);
      return *requested;
    }
    if (!requested)
      if (std::optional<TileConfig> w = wgmma_mainloop().heuristic(work)) return *w;
    const GemmMainloop& sync = sync_mainloop(ml);
    TileConfig tile;
    if (requested) {
      EPIFUSE_CHECK(std::holds_alternative<GemmTile>(*requested),
                    "tile {}: a gemm kernel takes a gemm tile (BM, BN, BK, warps, stages)", to_string(*requested));
      tile = without_split_k(*requested, shape, true);
    } else {
      tile = without_split_k(*sync.heuristic(work), shape, false);
    }
    sync.check(tile, p);
    return tile;
  }

  std::string_view shape_class(const KernelSpec& spec, const TileConfig&, const Shape& shape) const override {
    return gemm_shape_class(spec.mainloop, shape);
  }

  // Without 16-byte loads (ld1) the kernel has one path, for any alignment.
  KernelPath path_for(const KernelSpec& spec, const TileConfig&, const Shape& shape) const override {
    return gemm_shape_class(spec.mainloop, shape).starts_with("ld8") ? KernelPath::fastest : KernelPath::general;
  }

  // AMD: the wave tiles. Exact f32: the SIMT tiles. On sm_90a the wgmma tiles
  // first (docs/hopper.md), then the mma.sync ones: the tuner picks mma.sync
  // where a problem is too small to fill the GPU; above wgmma_only's size
  // wgmma tiles alone. A chain with a col_sum alike (every mainloop sums columns).
  std::vector<TileConfig> tile_candidates(const KernelSpec& spec, const Shape& shape, std::string_view target,
                                          const DeviceInfo& device) const override {
    const Shape work_shape = batch_work_shape(shape);
    GemmProblem p = problem(spec, work_shape, target, device);
    p.batches = shape.batch;
    if (amd_target(target)) {
      return wave_mainloop().candidates(p);
    }
    if (gemm_is_simt(spec.mainloop)) {
      return simt_mainloop().candidates(p);
    }
    std::vector<TileConfig> out = wgmma_mainloop().candidates(p);
    if (!out.empty() && wgmma_only(p)) return out;
    std::vector<TileConfig> sync = mma_mainloop().candidates(p);
    if (shape.batch > 1)  // Note [Batched GEMM]: no split-K
      std::erase_if(sync, [](const TileConfig& t) { return std::get<GemmTile>(t).split_k > 1; });
    out.insert(out.end(), sync.begin(), sync.end());
    return out;
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
      KernelSource ks = mma_mainloop().emit(plan_gemm(plan));
      plan.tile = wgmma;
      ks.tile = wgmma;
      return ks;
    }
    return mainloop_of(plan.tile, plan.spec->mainloop).emit(plan_gemm(plan));
  }

  std::optional<TensorMap2d> tensor_map(const ParamField& field, const OpaqueContext& c) const override {
    return wgmma_tensor_map(field, c);
  }

  // SIMT and mma.sync kernels launch alike (gemm_tile_geometry) and size
  // their workspace alike (a SIMT tile has no split-K; the column sums' is
  // add_column_sum_workspace): a GemmTile's is mma.sync's.
  LaunchGeometry geometry(const KernelSource& source, const Shape& shape, int multiprocessors) const override {
    return mainloop_of(source.tile).geometry(source, shape, multiprocessors);
  }

  WorkspaceNeeds workspace(const KernelSource& source, const Shape& shape) const override {
    return mainloop_of(source.tile).workspace(source, shape);
  }

 private:
  GemmProblem problem(const KernelSpec& spec, const Shape& shape, std::string_view target,
                      const DeviceInfo& device) const {
    return GemmProblem{spec, shape, target, device, kind_ == MainloopKind::dual_gemm, shape.batch};
  }
  // The GemmTile mainloops: exact f32 on FFMA, the rest on tensor cores.
  static const GemmMainloop& sync_mainloop(const Mainloop& ml) {
    return gemm_is_simt(ml) ? simt_mainloop() : mma_mainloop();
  }
  static const GemmMainloop& mainloop_of(const TileConfig& tile, const Mainloop& ml) {
    if (std::holds_alternative<WgmmaTile>(tile)) return wgmma_mainloop();
    if (std::holds_alternative<WaveTile>(tile)) return wave_mainloop();
    return sync_mainloop(ml);
  }
  static const GemmMainloop& mainloop_of(const TileConfig& tile) {
    if (std::holds_alternative<WgmmaTile>(tile)) return wgmma_mainloop();
    if (std::holds_alternative<WaveTile>(tile)) return wave_mainloop();
    return mma_mainloop();
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
