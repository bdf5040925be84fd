#pragma once
// The Jit's insides, shared by jit.cpp (keys, caches, compiles, tuning) and
// jit_launch.cpp (parameters and launches). Internal to the runtime.
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "backend/cuda_driver.hpp"
#include "backend/device_runtime.hpp"
#include "backend/hiprtc.hpp"
#include "backend/nvrtc.hpp"
#include "codegen/family.hpp"
#include "codegen/template_engine.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "runtime/cache_records.hpp"
#include "runtime/disk_cache.hpp"
#include "runtime/kernel_cache.hpp"
#include "runtime/tensor_map_cache.hpp"

namespace epifuse {

namespace jit_detail {

using backend::CudaDriver;
using backend::Vendor;

struct LoadedKernel final : CompiledKernel {
  KernelSource src;
  CacheKey k;
  // What it was compiled from, for the general sibling a misaligned launch of
  // a vector-only kernel needs.
  std::shared_ptr<const KernelSpec> spec;
  Shape shape;
  const KernelFamily* family = nullptr;  // found once, so a launch looks nothing up
  std::vector<char> cubin;
  double ms = 0;
  bool disk = false;  // the cubin came from the disk cache
  std::optional<backend::DeviceModule> module;
  int ordinal = -1;  // the device `module` is loaded on
  backend::DeviceRuntime::FunctionHandle function = nullptr;
  backend::FunctionInfo info;
  // Blocks of it the whole GPU holds at once at its launch's block size and
  // shared memory (multiprocessors x cuOccupancyMaxActiveBlocksPerMultiprocessor,
  // or cuOccupancyMaxActiveClusters x the cluster's blocks), asked on the
  // first launch with a persistent grid; -1 until then.
  mutable std::atomic<int> occupancy{-1};

  const KernelSource& source() const override { return src; }
  const CacheKey& key() const override { return k; }
  const std::vector<char>& binary() const override { return cubin; }
  double compile_ms() const override { return ms; }
  bool from_disk() const override { return disk; }
  int registers() const override { return info.registers; }
  int local_bytes() const override { return info.local_bytes; }
};

// The key of (signature, M, N, K) in the tuner's memory: every dimension,
// since a GEMM's best tile depends on K as much as on M and N.
// A batched GEMM's tuned tile is its own (Note [Batched GEMM]: chosen for the
// whole batch, without split-K); an unbatched key is as it was.
inline std::string tune_key(const std::string& signature, const Shape& shape) {
  return shape.batch > 1 ? fmt::format("{}|{}x{}x{}x{}", signature, shape.m, shape.n, shape.k, shape.batch)
                         : fmt::format("{}|{}x{}x{}", signature, shape.m, shape.n, shape.k);
}

}  // namespace jit_detail

using jit_detail::CudaDriver;
using jit_detail::LoadedKernel;
using jit_detail::Vendor;
using jit_detail::tune_key;

struct Jit::Impl {
  std::string target_name;
  backend::Target target;                // an NVIDIA target
  std::optional<backend::AmdTarget> amd;  // or an AMD one (docs/amd.md)
  backend::Nvrtc* rtc = nullptr;          // NVIDIA targets; AMD ones go to hipRTC in a child process
  int ordinal = 0;                           // the device it loads and launches on
  backend::DeviceRuntime* device = nullptr;  // null when this target cannot run here
  CudaDriver* driver = nullptr;  // the CUDA driver behind `device` on NVIDIA: tensor maps, clusters
  int multiprocessors = 0;
  DeviceInfo device_info;  // what tile heuristics read (assumed_device where no GPU runs the target)
  std::string compiler, options;
  std::vector<std::string> extra_options;
  std::vector<backend::Header> headers;  // templates/common/*: NVRTC's, or inlined for hipRTC
  KernelCache cache;
  std::unique_ptr<DiskCache> disk;  // null when EPIFUSE_CACHE=0 (docs/disk-cache.md)
  std::string device_name;          // the GPU's, part of a tuned tile's disk key
  mutable std::mutex tuned_mutex;
  mutable std::unordered_map<std::string, TileConfig> tuned;
  mutable std::unordered_set<std::string> disk_asked;  // tune keys already looked up on disk
  // Launch scratch per stream (WorkspaceNeeds): kernels on one stream run in
  // turn and may share it; kernels on two streams may run at once and must not.
  struct Workspace {
    backend::DeviceMemory zeroed, scratch;
  };
  mutable TensorMapCache tensor_maps;
  mutable std::mutex workspace_mutex;
  mutable std::unordered_map<void*, Workspace> workspaces;

  // The stream's workspace, grown to `needs`. Growing waits for the GPU: an
  // older, smaller buffer may still be in use by a launch in flight.
  std::pair<std::uint64_t, std::uint64_t> workspace(void* stream, const WorkspaceNeeds& needs) const {
    std::lock_guard lock(workspace_mutex);
    Workspace& w = workspaces[stream];
    if (w.zeroed.size() < needs.zeroed || w.scratch.size() < needs.scratch) {
      // Allocating waits for the device, which a stream being captured into a
      // CUDA graph must not (the capture would be invalidated): say so instead.
      EPIFUSE_CHECK(!device->capturing(stream),
                    "this kernel needs {} bytes of launch workspace on a stream that is being captured into a CUDA "
                    "graph, and has none there yet: run it once on that stream before capturing (the workspace is "
                    "kept per stream, as in torch.cuda.graph(g, stream=s) after a warm-up on s)",
                    needs.zeroed + needs.scratch);
      device->synchronize();
    }
    if (w.zeroed.size() < needs.zeroed) {
      w.zeroed = backend::DeviceMemory(*device, needs.zeroed);
      w.zeroed.fill_bytes(0);
      device->synchronize();
    }
    if (w.scratch.size() < needs.scratch) w.scratch = backend::DeviceMemory(*device, needs.scratch);
    return {w.zeroed.ptr(), w.scratch.ptr()};
  }

  // What every key of this Jit shares: target, compiler, options, templates, version.
  CacheKey base_key() const {
    CacheKey k;
    k.target = target_name;
    k.compiler = compiler;
    k.options = options;
    k.templates = templates_hash();
    k.version = EPIFUSE_VERSION;
    return k;
  }
  CacheKey make_key(std::string sig, const KernelSpec& spec, const Shape& shape,
                    const std::optional<TileConfig>& tile) const {
    // family_for(spec): a walk over a few nodes (a row reduction picks the row family).
    const KernelFamily& family = family_for(spec);
    CacheKey k = base_key();
    k.signature = std::move(sig);
    k.tile = family.resolve_tile(spec, shape, tile, target_name, device_info);
    k.shape_class = std::string(family.shape_class(spec, k.tile, shape));
    k.path = family.path_for(spec, k.tile, shape);  // the general kernel is asked for at launch
    k.bindings = binding_names_hash(spec);
    return k;
  }
  // A tuned tile is kept for this GPU model, target, toolkit and epifuse build.
  std::string tuned_disk_key(const std::string& tk) const {
    CacheKey k = base_key();
    k.signature = tk;
    k.shape_class = device_name;
    return "tuned|" + key_bytes(k);
  }
  // Memory first, then disk (a tile tuned by an earlier process). The disk is
  // asked once per (signature, shape) and process: compile(spec, shape) with
  // no tile looks here on every call, and the hit path does no file I/O.
  std::optional<TileConfig> tuned_tile(const std::string& sig, const Shape& shape) const {
    const std::string tk = tune_key(sig, shape);
    {
      std::lock_guard lock(tuned_mutex);
      auto it = tuned.find(tk);
      if (it != tuned.end()) return it->second;
      if (!disk || !device || !disk_asked.insert(tk).second) return std::nullopt;
    }
    const std::optional<std::string> payload = disk->load(DiskCache::Kind::tuned, tuned_disk_key(tk));
    if (!payload) return std::nullopt;
    const std::optional<TunedRecord> r = decode_tuned(*payload);
    if (!r) return std::nullopt;
    std::lock_guard lock(tuned_mutex);
    return tuned.try_emplace(tk, r->tile).first->second;
  }
  // `owned` is the spec as a kernel keeps it, when the caller has one; else
  // the spec is copied, and only on a miss, so the hit path copies nothing.
  std::shared_ptr<const CompiledKernel> compile(const CacheKey& k, const KernelSpec& spec,
                                                std::shared_ptr<const KernelSpec> owned, const Shape& shape);
  void prepare_function(LoadedKernel& kernel) const;
  // What the constructor sets up for each vendor's targets ("" detects the GPU's).
  void init_nvidia(const std::string& target);
  void init_amd(const std::string& text);
  // Jit::launch: the checks, the parameters, the grid, the device's launch. Here
  // so that tools/perf/launch_dry.cpp can time it on a device runtime that
  // launches nothing (the host's share of a launch, without a GPU).
  void launch(const CompiledKernel& kernel, const DeviceBindings& b, const Shape& shape, const LaunchArgs& args,
              void* stream);
  // The parameter struct, packed by role; false in `aligned` when a pointer
  // misses its fast-path alignment.
  void pack_params(const LoadedKernel& kernel, const DeviceBindings& b, const Shape& shape, const LaunchArgs& args,
                   void* stream, unsigned char* params, bool& aligned) const;
};

}  // namespace epifuse
