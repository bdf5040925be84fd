#pragma once
/// The JIT: KernelSpec -> CUDA source -> NVRTC -> cached kernel -> launch.
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "epifuse/reference.hpp"
#include "epifuse/spec.hpp"

namespace epifuse {

/// How an elementwise kernel is laid over the tensor.
struct TileConfig {
  int threads = 256;      ///< threads per block
  int vec = 0;            ///< elements per thread per step; 0: 16 bytes of the narrowest full tensor
  int blocks_per_sm = 0;  ///< grid: 0 covers every vector once; k > 0 is a grid-stride grid of k*SMs blocks
  friend bool operator==(const TileConfig&, const TileConfig&) = default;
  std::string str() const;  ///< "t256v8g4"
};

/// One field of a generated kernel's parameter struct (passed by value).
struct ParamField {
  enum class Kind { pointer, i64, u64, f64, f32, flag } kind;  ///< f64: 1.0/N; flag: int 0/1
  std::string name;     ///< "in0", "out1", "m", "alpha0", ...
  std::size_t offset;   ///< byte offset in the struct
};

/// Generated source and everything needed to launch it.
struct KernelSource {
  std::string name;                 ///< the __global__ function's name
  std::string text;                 ///< CUDA C++ source
  TileConfig tile;                  ///< with vec resolved
  std::vector<ParamField> params;
  std::size_t params_size = 0;
  std::vector<std::string> inputs;  ///< binding names of the in<k> pointers, in order
  std::vector<std::string> outputs; ///< binding names of the out<k> pointers, in order
  std::vector<double> alphas;       ///< values for alpha<k>
  std::vector<int> input_alignment;  ///< bytes each in<k> must be aligned to for the vector path (0: no need)
  std::vector<int> output_alignment;
  bool vector_only = false;          ///< no scalar path: launch only with pointers aligned as above
};

/// Which code paths a kernel carries. `fastest`: the vector path alone
/// wherever the shape allows it (M*N a multiple of vec), the scalar path too
/// where it does not. `general`: always both, so misaligned pointers work.
/// A vector-only kernel costs about 20% less NVRTC time (docs/PERF.md); the
/// Jit compiles the general one only when a launch brings misaligned pointers.
enum class KernelPath { fastest, general };

/// Lowers a spec for a shape (DESIGN §1): verify, plan operands, choose the
/// vector width, plan precision, emit the epilogue, render the template.
/// Deterministic: same spec, shape class, tile and path, same bytes.
KernelSource emit_kernel(const KernelSpec& spec, const Shape& shape, const TileConfig& tile = {},
                         KernelPath path = KernelPath::fastest);

/// Tile configurations the tuner tries for a spec and shape, best guess first.
std::vector<TileConfig> tile_candidates(const KernelSpec& spec, const Shape& shape);

/// Everything that changes a binary (DESIGN §5). Lookups compare the whole
/// key; the hash only picks the bucket. Input names are bindings, not code,
/// so two specs that differ only in names share a key.
struct CacheKey {
  std::string signature;       ///< canonical graph signature, binary (signature_bytes)
  std::string shape_class;     ///< what the code is specialised for, e.g. "row_aligned/i32"
  bool vector_only = false;    ///< compiled without the scalar path (KernelPath)
  TileConfig tile;             ///< with vec resolved
  std::string target;          ///< "sm_90a"
  std::string compiler;        ///< "NVRTC 13.0"
  std::string options;         ///< compile options, space separated
  std::uint64_t templates = 0; ///< hash of the embedded templates
  std::string version;         ///< epifuse's own version
  friend bool operator==(const CacheKey&, const CacheKey&) = default;
  std::uint64_t hash() const;
  std::string str() const;     ///< one line, for `epifuse compile` and logs
};

struct CacheStats {
  std::uint64_t hits = 0, misses = 0, compiles = 0, failures = 0, entries = 0;
  double compile_ms = 0;       ///< total NVRTC time over all compiles
};

/// A compiled kernel: its source metadata, binary and (with a GPU) loaded module.
class CompiledKernel {
 public:
  virtual ~CompiledKernel() = default;
  virtual const KernelSource& source() const = 0;
  virtual const CacheKey& key() const = 0;
  virtual const std::vector<char>& binary() const = 0;  ///< the cubin
  virtual double compile_ms() const = 0;
  /// Registers per thread and local (spill/stack) bytes, when loaded on a device.
  virtual int registers() const = 0;
  virtual int local_bytes() const = 0;
};

/// Device pointers bound in the order of KernelSource::inputs / outputs.
struct DeviceBindings {
  std::vector<std::uint64_t> inputs;
  std::vector<std::uint64_t> outputs;
};

/// The JIT: lowering, NVRTC, the in-memory cache, launches. Thread-safe; a
/// key is compiled once even when many threads ask for it at the same moment.
class Jit {
 public:
  /// `target` empty: the current device's (sm_90a on Hopper); with no GPU a
  /// target must be named. Throws RuntimeError when NVRTC is missing.
  explicit Jit(std::string target = "");
  ~Jit();
  Jit(const Jit&) = delete;
  Jit& operator=(const Jit&) = delete;

  const std::string& target() const;
  /// Builds the key without compiling anything (the cache's hit path).
  CacheKey key(const KernelSpec& spec, const Shape& shape, const TileConfig& tile = {}) const;
  /// Compiles (or finds) the kernel; loads it when a GPU is present.
  std::shared_ptr<const CompiledKernel> compile(const KernelSpec& spec, const Shape& shape,
                                                const TileConfig& tile = {});
  /// Launches on `stream` (nullptr: the default stream); asynchronous.
  /// Picks the vector path when every pointer is aligned for it.
  void launch(const CompiledKernel& kernel, const DeviceBindings& bindings, const Shape& shape,
              const LaunchArgs& args, void* stream = nullptr) const;
  /// Times each candidate tile on the given buffers and remembers the best for
  /// (signature, M, N); later compile(spec, shape) with a default tile uses it.
  struct TuneResult {
    TileConfig tile;
    double ms = 0;
    std::vector<std::pair<TileConfig, double>> all;  ///< every candidate's median ms
  };
  TuneResult tune(const KernelSpec& spec, const Shape& shape, const DeviceBindings& bindings,
                  const LaunchArgs& args, std::vector<TileConfig> candidates = {});
  /// The remembered tile for (spec, shape), or the default.
  TileConfig tuned_tile(const KernelSpec& spec, const Shape& shape) const;

  CacheStats stats() const;
  std::vector<CacheKey> cached_keys() const;
  void clear();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// Host-tensor convenience (examples, tests, `epifuse run`): uploads inputs,
/// poisons outputs (all bits set: NaN), launches, downloads the outputs.
/// `misalign_elements` shifts every device pointer by that many elements off
/// its allocation's 256-byte alignment (tests of the scalar path).
TensorMap run_on_device(Jit& jit, const KernelSpec& spec, const Shape& shape,
                        const TensorMap& inputs, const LaunchArgs& args,
                        const TileConfig& tile = {}, std::size_t misalign_elements = 0);

/// Why no GPU can be used (empty when one can): names the missing library or device.
std::string gpu_unavailable_reason();

}  // namespace epifuse
