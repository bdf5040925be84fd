#pragma once
// Note [Kernel families]
// A kernel family is what one mainloop kind needs beyond the shared pipeline:
// its tile type and candidates, the shape class its code is specialised for,
// its own lowering passes and template, and its launch geometry. The rest of
// the pipeline (plan_operands, plan_precision, the epilogue emitter, the Jit,
// the cache, the tuner, the launch) sees only this interface. A new family is
// a folder src/codegen/<family>/ implementing it, its tile type in
// include/epifuse/tile.hpp, and one line in src/codegen/families.cpp
// (docs/architecture.md); families that share a mainloop kind split its
// graphs with generates() (the row and elementwise families).
#include <optional>
#include <string>
#include <span>
#include <string_view>
#include <vector>

#include "codegen/kernel_plan.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/device_info.hpp"

namespace epifuse {

struct LaunchGeometry {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_bytes = 0;  // dynamic shared memory
  /// > 0: a persistent grid over this many work items (rows): the launch sets
  /// grid[0] to min(persistent_work, multiprocessors x the kernel's occupancy
  /// at this block size), asked of the driver once per kernel.
  std::int64_t persistent_work = 0;
  /// A persistent grid is rounded down to a multiple of this (the blocks of a
  /// thread-block cluster: a row family's cluster tile).
  unsigned grid_multiple = 1;
};

/// Device scratch a launch needs (ParamRole::workspace): `zeroed` bytes that are
/// zero when the kernel starts and that it leaves zero (split-K's tile flags),
/// and `scratch` bytes of anything (split-K's partial sums). The Jit keeps both
/// per stream, so kernels launched on one stream share them in turn.
struct WorkspaceNeeds {
  std::size_t zeroed = 0, scratch = 0;
};

/// A 2-D TMA descriptor as a family asks for it: a row-major matrix of `outer`
/// rows of `inner` elements, rows `row_bytes` apart, copied in boxes of
/// box_inner x box_outer with the 128-byte swizzle. The runtime encodes it
/// with the driver and caches it (codegen does not reach the driver). With
/// `batches` > 1 it is 3-D: that many such matrices `batch_bytes` apart, the
/// batch the outermost coordinate, boxes one matrix deep (Note [Batched GEMM]).
struct TensorMap2d {
  std::uint64_t base = 0, inner = 0, outer = 0, row_bytes = 0;
  unsigned box_inner = 0, box_outer = 0;
  int element_bytes = 2;
  bool tf32 = false;  ///< f32 elements the copy engine rounds to tf32 (CU_TENSOR_MAP_DATA_TYPE_TFLOAT32)
  std::uint64_t batches = 1, batch_bytes = 0;
  friend bool operator==(const TensorMap2d&, const TensorMap2d&) = default;
};

/// What the launch knows when it fills an opaque parameter.
struct OpaqueContext {
  const KernelSource& source;
  std::span<const std::uint64_t> inputs, outputs;  // device pointers, bound as KernelSource says
  const Shape& shape;
};

class KernelFamily {
 public:
  virtual ~KernelFamily() = default;
  virtual MainloopKind kind() const = 0;
  /// Whether this family generates `spec`: by default, a spec of its mainloop
  /// kind. Families that share a mainloop kind split its graphs here (the row
  /// family takes elementwise graphs with a row reduction, the elementwise
  /// family the rest); all but the kind's own return false from by_kind().
  virtual bool generates(const KernelSpec& spec) const { return spec.mainloop.kind == kind(); }
  /// Whether family_for(kind()) names this family.
  virtual bool by_kind() const { return true; }
  /// The tile a key holds: `requested` with its defaults resolved, or the
  /// family's default; UserError for a tile of another family or out of range,
  /// or one `target` cannot run ("sm_90a"; empty: no target known, emission only)
  /// or `device` cannot hold (its shared memory).
  virtual TileConfig resolve_tile(const KernelSpec& spec, const Shape& shape,
                                  const std::optional<TileConfig>& requested, std::string_view target,
                                  const DeviceInfo& device) const = 0;
  /// resolve_tile on the device assumed for `target` (no GPU known).
  TileConfig resolve_tile(const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& requested,
                          std::string_view target) const {
    return resolve_tile(spec, shape, requested, target, assumed_device(target));
  }
  /// What the code is specialised for besides spec, tile and path: part of the
  /// key, and a launch checks its shape has the kernel's class. A literal, so
  /// the cache's hit path formats nothing.
  virtual std::string_view shape_class(const KernelSpec& spec, const TileConfig& resolved,
                                       const Shape& shape) const = 0;
  /// The path a key gets for `fastest`: `general` when the shape itself needs it.
  virtual KernelPath path_for(const KernelSpec& spec, const TileConfig& resolved, const Shape& shape) const = 0;
  virtual std::vector<TileConfig> tile_candidates(const KernelSpec& spec, const Shape& shape,
                                                  std::string_view target, const DeviceInfo& device) const = 0;
  /// The family's passes after the generic ones: fills plan.shape_class and
  /// plan.kernel_name, returns the rendered source.
  virtual KernelSource emit(KernelPlan& plan) const = 0;
  virtual LaunchGeometry geometry(const KernelSource& source, const Shape& shape, int multiprocessors) const = 0;
  /// The scratch a launch of `source` at `shape` needs (none by default).
  virtual WorkspaceNeeds workspace(const KernelSource&, const Shape&) const { return {}; }
  /// The tensor map a ParamRole::opaque field holds; nullopt leaves it zero
  /// (a launch that will take the general path, or a map that is never read).
  /// Families that declare no opaque field keep this.
  virtual std::optional<TensorMap2d> tensor_map(const ParamField& field, const OpaqueContext& context) const;
};

/// The family of a mainloop kind; UserError naming the implemented ones when
/// there is none yet.
const KernelFamily& family_for(MainloopKind kind);
/// The family of a spec: the first in the registry that generates it (the row
/// family for an elementwise graph with a row reduction, else its mainloop's);
/// UserError for a graph no family can generate (a GEMM whose chain reduces rows).
const KernelFamily& family_for(const KernelSpec& spec);
/// The spec's first row reduction (a softmax's max, a norm's sum), or null.
const Node* row_reduction_of(const KernelSpec& spec);

/// Note [Strided epilogue tensors]: "/ld_in<i>" for each strided full input,
/// then "/ld_out<j>" for each strided output, the flags a shape class ends
/// with (the lds' values are not in it); empty for a dense shape.
std::string tensor_ld_flags(const Shape& shape);
/// A shape class built at run time (one with strided tensors' flags), kept for
/// the process: the family returns classes as views, and the set of strided
/// tensors a process launches is small.
std::string_view interned_shape_class(std::string shape_class);

}  // namespace epifuse
