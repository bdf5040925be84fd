#pragma once
/// Code generation: KernelSpec + shape + tile -> kernel source and everything a
/// launch needs to bind it (docs/design.md §1). Needs no GPU and no compiler.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epifuse/device_info.hpp"
#include "epifuse/spec.hpp"
#include "epifuse/tile.hpp"

namespace epifuse {

/// Which code paths a kernel carries. `fastest`: only what the shape needs, so
/// a family may leave out the path for pointers that are not aligned for its
/// vector accesses (the elementwise family does, when M*N is a multiple of
/// vec). `general`: always able to run with any pointer alignment. The Jit
/// compiles the general kernel only when a launch brings misaligned pointers.
enum class KernelPath : std::uint8_t { fastest, general };

/// What a kernel parameter is bound to at launch. The launch binds by role,
/// never by the field's name.
enum class ParamRole : std::uint8_t {
  input,        ///< device pointer: DeviceBindings::inputs[index]
  output,       ///< device pointer: DeviceBindings::outputs[index]
  dim_m,        ///< int64 M
  dim_n,        ///< int64 N
  dim_k,        ///< int64 K
  inv_n,        ///< double 1.0 / N
  seed,         ///< uint64 dropout seed
  offset,       ///< uint64 dropout Philox offset
  rng_state,    ///< device pointer to {seed, offset base} (LaunchArgs::rng_state), or null
  scalar,       ///< float KernelSource::scalars[index] (a scale's alpha)
  vector_flag,  ///< int: 1 when every pointer is aligned as KernelSource says
  opaque,       ///< `size` bytes the family fills at launch (a CUtensorMap, 64-byte aligned)
  workspace,    ///< device pointer to launch scratch (KernelFamily::workspace): index 0 the
                ///< zeroed part (zero at launch, and the kernel leaves it zero), 1 the rest
  ld,           ///< int64 leading dimension of input `index`: a strided GEMM operand
                ///< (Shape::lda, ldb, ldb1 for inputs 0, 1, 2) or, after the operands,
                ///< a strided full [M,N] input of the chain, in any family (Shape::ld_inputs)
  batch,        ///< int64 Shape::batch, a batched GEMM's problem count
  batch_stride, ///< int64 elements between batches of GEMM operand `index` (0: shared)
  output_ld,    ///< int64 leading dimension of output `index`, a strided full [M,N]
                ///< output of a chain, in any family (Shape::ld_outputs)
  n_magic,      ///< uint64 exact division by N of an index below 2^31: the multiplier m
                ///< (low word) and shift l (high word) of n_magic() (Note [Division by N])
};

// Note [Division by N]
// The flat elementwise kernel finds a vector's row and column from its index e0 where
// an operand is broadcast or a tensor strided. Over strided rows with 32-bit indices
// (e0 < 2^30) it divides exactly by one multiply-high and a shift: for 1 <= n < 2^31, l = ceil(log2 n)
// and m = ceil(2^(31+l) / n); then for every 0 <= e < 2^31, e / n == __umulhi(2e, m) >> l,
// since 2e < 2^32, __umulhi(2e, m) = floor(e m / 2^31), and floor(e m / 2^(31+l)) ==
// floor(e / n) because 2^(31+l) <= m n < 2^(31+l) + 2^l (Granlund and Montgomery,
// "Division by invariant integers using multiplication", theorem 4.2, numerators of 31
// bits); m < 2^32 since n > 2^(l-1). The fp64 reciprocal (the dense and the 64-bit
// kernels') puts a conversion, a multiply, a conversion back and a correction step
// before every load that needs the row: a strided tensor's loads waited on it, and a
// strided residual ran 1.078x its dense copy on an H200, 1.027x with the exact division.
// Dense kernels keep the reciprocal: only a broadcast operand's load waits there, and
// the exact division measured 0.6-0.8% slower (docs/perf/elementwise.md).

/// Note [Division by N]: m | l << 32 for 1 <= n < 2^31.
std::uint64_t n_magic(std::int64_t n);

/// One field of a generated kernel's parameter struct (passed by value).
struct ParamField {
  ParamRole role;
  std::uint32_t index = 0;  ///< input, output, scalar: which one
  std::uint32_t offset = 0, size = 0, align = 0;
  std::string name;         ///< the field's identifier in the generated struct ("in0", "m")
};

/// Generated source and everything needed to launch it.
struct KernelSource {
  std::string name;                   ///< the __global__ function's name
  std::string text;                   ///< CUDA C++ source
  TileConfig tile;                    ///< resolved: no defaults left
  KernelPath path = KernelPath::fastest;
  std::vector<ParamField> params;     ///< in struct order
  std::size_t params_size = 0;        ///< bytes, a multiple of the largest alignment
  std::vector<std::string> inputs;    ///< binding names of DeviceBindings::inputs, in order
  std::vector<std::string> outputs;   ///< binding names of DeviceBindings::outputs, in order
  std::vector<float> scalars;         ///< values of the scalar parameters
  std::uint32_t shared_bytes = 0;     ///< dynamic shared memory per block
  /// Blocks of the kernel's thread-block cluster (__cluster_dims__); above 8,
  /// a non-portable size, the loader opts the kernel in.
  std::uint32_t cluster_blocks = 1;
  std::vector<int> input_alignment;   ///< bytes each input must be aligned to for the fast path (0: none)
  std::vector<int> output_alignment;
  /// The kernel has no path for pointers aligned less than the above: a
  /// misaligned launch must use the general kernel of the same key.
  bool requires_alignment = false;
};

/// Lowers a spec for a shape (docs/design.md §1): verify, plan operands, plan
/// precision, then the spec's kernel family resolves the tile and emits.
/// `tile` nullopt: the family's default for `target` ("sm_90a"; empty: none
/// known, so no architecture-specific tile). Deterministic: same spec, shape
/// class, tile and path, same bytes.
/// The untuned tile is chosen for assumed_device(target).
KernelSource emit_kernel(const KernelSpec& spec, const Shape& shape,
                         const std::optional<TileConfig>& tile = std::nullopt,
                         KernelPath path = KernelPath::fastest, std::string_view target = {});
/// emit_kernel for a known device: its multiprocessors and shared memory steer the untuned tile.
KernelSource emit_kernel(const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& tile,
                         KernelPath path, std::string_view target, const DeviceInfo& device);

/// Tile configurations the tuner tries for a spec and shape on `target`, best guess first
/// (for assumed_device(target), or for `device`).
std::vector<TileConfig> tile_candidates(const KernelSpec& spec, const Shape& shape, std::string_view target = {});
std::vector<TileConfig> tile_candidates(const KernelSpec& spec, const Shape& shape, std::string_view target,
                                        const DeviceInfo& device);

}  // namespace epifuse
