#pragma once
/// The JIT: KernelSpec -> kernel source -> NVRTC (NVIDIA) or hipRTC (AMD) -> cached kernel -> launch.
#include <cstdint>
#include <optional>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "epifuse/codegen.hpp"
#include "epifuse/launch.hpp"
#include "epifuse/spec.hpp"
#include "epifuse/tensor.hpp"

namespace epifuse {

/// Everything that changes a binary (docs/design.md §5). Lookups compare the whole
/// key; the hash only picks the bucket. Input names are bindings, not code:
/// two specs that differ only in names share a binary (one disk record, one
/// NVRTC compile), but each gets a kernel of its own in memory, whose
/// KernelSource::inputs and outputs are its own names (Note [Binding names]).
struct CacheKey {
  std::string signature;       ///< canonical graph signature, binary (signature_bytes)
  std::string shape_class;     ///< what the code is specialised for, e.g. "row_aligned/i32"
  KernelPath path = KernelPath::fastest;  ///< fastest may leave out the misaligned-pointer path
  TileConfig tile;             ///< resolved (the family's defaults filled in)
  std::string target;          ///< "sm_90a", "gfx90a:xnack-" (the full string, features included)
  std::string compiler;        ///< "NVRTC 13.0", "hipRTC 9.0 (ROCm 5.2.21153)"
  std::string options;         ///< compile options, space separated
  std::uint64_t templates = 0; ///< hash of the embedded templates
  std::string version;         ///< epifuse's own version
  /// The spec's binding names (inputs, outputs), hashed: in the memory cache's
  /// key, not in the disk's (key_bytes) nor in hash() (the bucket).
  std::uint64_t bindings = 0;
  friend bool operator==(const CacheKey&, const CacheKey&) = default;
  std::uint64_t hash() const;
  std::string str() const;     ///< one line, for `epifuse compile` and logs
};

struct CacheStats {
  std::uint64_t hits = 0, misses = 0, compiles = 0, failures = 0, entries = 0;
  double compile_ms = 0;       ///< total NVRTC time over all compiles
  /// The disk cache (docs/disk-cache.md); `disk_dir` empty when it is off.
  std::string disk_dir;
  bool disk_writable = false;  ///< false once a write failed: memory only from then on
  std::uint64_t disk_hits = 0, disk_misses = 0, disk_rejected = 0, disk_writes = 0, disk_evicted = 0;
  std::uint64_t disk_files = 0, disk_bytes = 0;  ///< what the folder holds (every process's records)
};

/// A record file of the disk cache, for `epifuse cache list`.
struct DiskEntry {
  std::string path;
  std::string kind;    ///< "kernel" or "tuned"
  std::uint64_t bytes = 0;
  bool valid = false;  ///< reads back whole (size, checksum, format)
};

/// A compiled kernel: its source metadata, binary and (with a GPU) loaded module.
class CompiledKernel {
 public:
  virtual ~CompiledKernel() = default;
  virtual const KernelSource& source() const = 0;
  virtual const CacheKey& key() const = 0;
  virtual const std::vector<char>& binary() const = 0;  ///< the cubin, or an AMD target's code object
  /// NVRTC's time; for a kernel found on disk, the time it took to read it back.
  virtual double compile_ms() const = 0;
  /// True when the binary came from the disk cache rather than NVRTC.
  virtual bool from_disk() const = 0;
  /// Registers per thread and local (spill/stack) bytes, when loaded on a device.
  virtual int registers() const = 0;
  virtual int local_bytes() const = 0;
};

/// Device pointers bound in the order of KernelSource::inputs / outputs.
struct DeviceBindings {
  std::vector<std::uint64_t> inputs;
  std::vector<std::uint64_t> outputs;
};

/// The JIT: lowering, NVRTC, the in-memory and disk caches, launches.
/// Thread-safe; a key is compiled once even when many threads ask for it at
/// the same moment (and, through the disk cache, once per machine).
class Jit {
 public:
  /// `target` empty: the current device's (sm_90a on Hopper; with no CUDA GPU,
  /// an AMD GPU's gcnArchName, e.g. gfx90a:sramecc+:xnack-); with no GPU a
  /// target must be named. AMD targets ("gfx90a") compile with hipRTC in a
  /// child process and run through the HIP runtime (docs/amd.md). Throws
  /// RuntimeError when the target's compiler (NVRTC, hipRTC) is missing.
  /// `device`: the GPU it loads and launches on (CUDA or HIP ordinal), whose
  /// target an empty `target` means; UserError when there is no such device.
  /// The calling thread's current device is left as it was (Note [Device
  /// scopes]): a Jit for device 1 launches on device 1's streams from a
  /// thread whose current device is 0.
  explicit Jit(std::string target = "", int device = 0);
  ~Jit();
  Jit(const Jit&) = delete;
  Jit& operator=(const Jit&) = delete;

  const std::string& target() const;
  /// The device ordinal it loads and launches on.
  int device() const;
  /// Builds the key without compiling anything (the cache's hit path).
  /// `tile` nullopt: the tuned tile for (spec, shape) if tune() chose one, else the family default.
  CacheKey key(const KernelSpec& spec, const Shape& shape,
               const std::optional<TileConfig>& tile = std::nullopt) const;
  /// Compiles (or finds) the kernel; loads it when a GPU is present.
  std::shared_ptr<const CompiledKernel> compile(const KernelSpec& spec, const Shape& shape,
                                                const std::optional<TileConfig>& tile = std::nullopt);
  /// Another source of `like`'s kernel (`epifuse bench --variant`, Note
  /// [Variant kernels]): compiled, not cached, launched like `like`. UserError
  /// unless it defines the same kernel with the same parameter struct.
  std::shared_ptr<const CompiledKernel> compile_variant(const CompiledKernel& like, std::string text);
  /// Launches on `stream` (nullptr: the default stream); asynchronous.
  /// Picks the vector path when every pointer is aligned for it.
  void launch(const CompiledKernel& kernel, const DeviceBindings& bindings, const Shape& shape,
              const LaunchArgs& args, void* stream = nullptr) const;
  /// Compiles every tile in parallel threads; a tile this GPU cannot run (a
  /// UserError) gives a null entry. UserError when none can run.
  std::vector<std::shared_ptr<const CompiledKernel>> compile_all(const KernelSpec& spec, const Shape& shape,
                                                                 const std::vector<TileConfig>& tiles);
  /// Times each candidate tile on the given buffers and remembers the best for
  /// (signature, M, N, K); later compile(spec, shape) without a tile uses it.
  struct TunedCandidate {
    TileConfig tile;
    double ms = 0;          ///< median time of one launch
    double compile_ms = 0;  ///< its NVRTC compile, whenever that was
  };
  struct TuneResult {
    TileConfig tile;
    double ms = 0;
    std::vector<TunedCandidate> all;  ///< every candidate that ran
  };
  /// Empty `candidates`: this GPU's (tile_candidates()).
  TuneResult tune(const KernelSpec& spec, const Shape& shape, const DeviceBindings& bindings,
                  const LaunchArgs& args, std::vector<TileConfig> candidates = {});
  /// The tiles tune() times by default: the family's candidates for this GPU
  /// (its multiprocessors, shared memory and bandwidth), and the default tile
  /// compile() would take untuned where they leave it out.
  std::vector<TileConfig> tile_candidates(const KernelSpec& spec, const Shape& shape) const;
  /// The remembered tile for (spec, shape); nullopt when none was tuned.
  std::optional<TileConfig> tuned_tile(const KernelSpec& spec, const Shape& shape) const;

  CacheStats stats() const;
  std::vector<CacheKey> cached_keys() const;
  /// Empties the in-memory cache and the tuned tiles (the disk keeps its records).
  void clear();
  /// The disk cache's records (empty when it is off).
  std::vector<DiskEntry> disk_entries() const;
  /// Removes every disk record; returns how many files went.
  std::size_t clear_disk();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// Host-tensor convenience (examples, tests, `epifuse run`): uploads inputs,
/// poisons outputs (all bits set: NaN), launches, downloads the outputs.
/// `misalign_elements` shifts every device pointer by that many elements off
/// its allocation's 256-byte alignment (tests of the scalar path). A GEMM
/// operand the shape gives an ld (Shape::lda, ldb, ldb1) is uploaded with its
/// rows ld elements apart and the gaps poisoned (Note [Strided operands]), as
/// is a strided full input (Shape::ld_inputs). A strided output
/// (Shape::ld_outputs) is poisoned gaps and all; its rows come back dense, and
/// a gap the kernel wrote is an InternalError (Note [Strided epilogue tensors]).
TensorMap run_on_device(Jit& jit, const KernelSpec& spec, const Shape& shape,
                        const TensorMap& inputs, const LaunchArgs& args,
                        const std::optional<TileConfig>& tile = std::nullopt,
                        std::size_t misalign_elements = 0);

/// Why no GPU can be used (empty when a CUDA or an AMD GPU can): names each
/// vendor's missing library or device.
std::string gpu_unavailable_reason();

}  // namespace epifuse
