#pragma once
// Every size limit epifuse enforces on what a user gives it, in one place
// (docs/limits.md lists each with where it is enforced and its message).
//
// Why limits at all: a chain is a handful of ops (the five studies of docs/design.md §0
// need at most 6), but the text it is read from is untrusted. Without bounds a
// 1 MB file of `[` exhausts memory, a 100,000-key object or a 200,000-op chain
// takes minutes, and `/dev/zero` is read until the host runs out of memory.
// Each limit is far above any real chain and low enough that everything up to
// it runs in milliseconds; the checks come before any expensive step.
#include <array>
#include <cstddef>
#include <cstdint>

namespace epifuse::limits {

// --- JSON text (src/json/text.cpp, while parsing: nothing is built past a limit) ---

/// Bytes of a chain file or text. A real chain is about 1 KB.
inline constexpr std::size_t k_max_chain_bytes = std::size_t{1} << 20;
/// Nesting depth of arrays and objects; the document itself is level 1. A chain
/// nests about 5 levels (spec, ops, op, args).
inline constexpr int k_max_depth = 64;
/// Keys in any one JSON object (inputs and outputs are objects: k_max_inputs
/// and k_max_outputs bound them further).
inline constexpr std::size_t k_max_object_keys = 256;
/// Elements in any one JSON array (ops and chain: k_max_ops bounds them further).
inline constexpr std::size_t k_max_array_elements = 4096;

// --- the graph (src/ir/graph.cpp, in the builder: the C++ API gets them too) ---

/// Op nodes in one graph.
inline constexpr std::size_t k_max_ops = 1024;
/// Tensor inputs of one graph (each an 8-byte pointer kernel parameter).
inline constexpr std::size_t k_max_inputs = 128;
/// Outputs of one graph (each an 8-byte pointer kernel parameter).
inline constexpr std::size_t k_max_outputs = 32;
/// scale ops in one graph: each alpha is a 4-byte kernel parameter.
inline constexpr std::size_t k_max_scale_ops = 256;
/// dropout ops in one graph. The RNG contract has room for 2^16 streams
/// (docs/design.md §4); a kernel with hundreds of masks is a mistake, not a workload.
inline constexpr std::size_t k_max_dropouts = 256;
/// Characters of an input, value or output name.
inline constexpr std::size_t k_max_name_length = 64;

// --- problem shapes (verify_shape, the JSON "shape", .npy headers) ---

/// One dimension of a problem shape or a tensor: 2^40.
inline constexpr std::int64_t k_max_dim = std::int64_t{1} << 40;
/// Elements of an [M,N] problem or a tensor: 2^48 (64-bit indexing everywhere).
inline constexpr std::int64_t k_max_elements = std::int64_t{1} << 48;
/// Problems in one batched GEMM launch: the mma.sync, SIMT and wave kernels take
/// the batch from blockIdx.z, whose grid dimension holds at most 65535.
inline constexpr std::int64_t k_max_batch = 65535;
/// Strided full [M,N] inputs and outputs of one GEMM launch (Shape::ld_inputs,
/// ld_outputs): each adds an 8-byte ld kernel parameter.
inline constexpr std::size_t k_max_strided_tensors = 64;

// --- the command line's tile options (tools/epifuse/jit_options.cpp) ---

inline constexpr int k_min_threads = 32;  ///< threads per block: a multiple of 32 ...
inline constexpr int k_max_threads = 1024;  ///< ... up to the CUDA block limit
inline constexpr int k_max_blocks_per_sm = 64;  ///< grid-stride grid: blocks per multiprocessor
/// Elements per thread per step that the templates implement (0 in a TileConfig: choose).
inline constexpr std::array<int, 5> k_vec_widths = {1, 2, 4, 8, 16};

// --- attribute values ---

/// A float attribute (scale alpha, dropout p) is a float32 kernel parameter, so
/// it must stay finite when rounded to float: |v| below the midpoint between
/// FLT_MAX and 2^128, which round-to-nearest-even takes to infinity.
inline constexpr double k_float32_overflow = 0x1.ffffffp+127;
/// Whether `v` rounds to a finite float32 (false for NaN and infinities).
constexpr bool finite_in_float32(double v) { return v < k_float32_overflow && v > -k_float32_overflow; }

// Note [Kernel parameter space]
// Kernel arguments travel in a parameter buffer of 4096 bytes on every toolkit
// before CUDA 12.1 (12.1+ on Volta and later allows 32764). The graph limits
// above keep the worst-case parameter struct of a generated kernel inside the
// old 4 KB, so that no chain the JSON layer accepts fails at launch:
//   8 bytes per input and per output pointer, 4 GEMM operand pointers, M, N, K
//   as int64, one double (1/N for row reductions), seed and offset as uint64,
//   the rng_state pointer, 4 bytes per scale alpha, an int64 ld per strided
//   GEMM operand (3) and strided [M,N] tensor, a batch count and 3 batch
//   strides, two workspace pointers, the vector flag, and, for
//   the later Hopper (TMA) path, 3 CUtensorMap blobs of 128 bytes aligned to 64.
inline constexpr std::size_t k_kernel_param_bytes = 4096;
inline constexpr std::size_t k_tensor_map_bytes = 128;
inline constexpr std::size_t k_tensor_map_align = 64;

constexpr std::size_t worst_case_kernel_params() {
  const std::size_t scalars = 8 * (k_max_inputs + k_max_outputs + 4)  // pointers
                              + 3 * 8                                 // M, N, K
                              + 8                                     // double
                              + 2 * 8                                 // seed, offset
                              + 8                                     // rng_state
                              + 4 * k_max_scale_ops                   // alphas
                              + 8 * (3 + k_max_strided_tensors)       // leading dimensions
                              + 4 * 8                                 // batch count and strides
                              + 2 * 8                                 // workspace
                              + 8;                                    // vector flag (padded)
  const std::size_t aligned = (scalars + k_tensor_map_align - 1) / k_tensor_map_align * k_tensor_map_align;
  return aligned + 3 * k_tensor_map_bytes;
}
static_assert(worst_case_kernel_params() <= k_kernel_param_bytes,
              "the graph limits must keep a kernel's parameters within 4 KB "
              "(Note [Kernel parameter space])");

}  // namespace epifuse::limits
