// The Jit: key -> cache -> (emit, NVRTC or hipRTC, load) -> launch.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>
#include <sstream>

#include "backend/cuda_driver.hpp"
#include "backend/device_runtime.hpp"
#include "backend/hip_runtime.hpp"
#include "backend/hiprtc.hpp"
#include "backend/nvrtc.hpp"
#include "codegen/family.hpp"
#include "codegen/template_engine.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "ir/limits.hpp"
#include "runtime/cache_records.hpp"
#include "runtime/disk_cache.hpp"
#include "runtime/kernel_cache.hpp"
#include "runtime/tensor_map_cache.hpp"

namespace epifuse {

namespace {

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
std::string tune_key(const std::string& signature, const Shape& shape) {
  return fmt::format("{}|{}x{}x{}", signature, shape.m, shape.n, shape.k);
}

}  // namespace

std::string gpu_unavailable_reason() {
  const std::string cuda = backend::device_unavailable_reason(Vendor::nvidia);
  if (cuda.empty() || backend::device_runtime_or_null(Vendor::amd)) return {};
  return fmt::format("{}; {}", cuda, backend::device_unavailable_reason(Vendor::amd));
}

struct Jit::Impl {
  std::string target_name;
  backend::Target target;                // an NVIDIA target
  std::optional<backend::AmdTarget> amd;  // or an AMD one (docs/amd.md)
  backend::Nvrtc* rtc = nullptr;          // NVIDIA targets; AMD ones go to hipRTC in a child process
  backend::DeviceRuntime* device = nullptr;  // null when this target cannot run here
  CudaDriver* driver = nullptr;  // the CUDA driver behind `device` on NVIDIA: tensor maps, clusters
  int multiprocessors = 0;
  std::string compiler, options;
  std::vector<std::string> extra_options;
  std::vector<backend::Header> headers;
  std::vector<backend::HipHeader> hip_headers;
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
    if (w.zeroed.size() < needs.zeroed || w.scratch.size() < needs.scratch) device->synchronize();
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
    k.tile = family.resolve_tile(spec, shape, tile, target_name);
    k.shape_class = std::string(family.shape_class(spec, k.tile, shape));
    k.path = family.path_for(spec, k.tile, shape);  // the general kernel is asked for at launch
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
  // The parameter struct, packed by role; false in `aligned` when a pointer
  // misses its fast-path alignment.
  void pack_params(const LoadedKernel& kernel, const DeviceBindings& b, const Shape& shape, const LaunchArgs& args,
                   void* stream, unsigned char* params, bool& aligned) const;
};

// Note [Disk cache hits]
// On a memory miss the source is emitted (well under a millisecond) before the
// disk is read: a record is used only when its whole key matches and the
// source it was compiled from hashes the same as the source emitted now, so an
// emitter change that somehow kept the key cannot run a stale binary. A record
// the driver refuses is compiled again and replaced. Everything the kernel
// needs at launch (parameters, geometry) comes from the fresh emission; the
// record holds only the cubin.
std::shared_ptr<const CompiledKernel> Jit::Impl::compile(const CacheKey& k, const KernelSpec& spec,
                                                         std::shared_ptr<const KernelSpec> owned,
                                                         const Shape& shape) {
  return cache.get_or_build(k, [&]() -> KernelCache::Entry {
    auto kernel = std::make_shared<LoadedKernel>();
    kernel->k = k;
    // The key says which kernel: its resolved tile and its path.
    kernel->src = emit_kernel(spec, shape, k.tile, k.path, target_name);
    EPIFUSE_ASSERT(kernel->src.path == k.path && kernel->src.tile == k.tile, "key and source disagree");
    kernel->spec = owned ? std::move(owned) : std::make_shared<const KernelSpec>(spec);
    kernel->family = &family_for(spec);
    kernel->shape = shape;
    // Disk, then NVRTC or hipRTC (Note [Disk cache hits]).
    const std::string disk_key = disk ? key_bytes(k) : std::string();
    const std::uint64_t text_hash = source_hash(kernel->src.text);
    if (disk) {
      const auto t0 = std::chrono::steady_clock::now();
      if (std::optional<std::string> payload = disk->load(DiskCache::Kind::kernel, disk_key))
        if (std::optional<KernelRecord> r = decode_kernel(*payload); r && r->source_hash == text_hash) {
          kernel->cubin = std::move(r->cubin);
          kernel->disk = true;
          kernel->ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        }
    }
    auto compile_source = [&] {
      if (amd) {
        backend::HiprtcBinary bin = backend::compile_hip_isolated(
            backend::inline_headers(kernel->src.text, hip_headers), kernel->src.name + ".hip", *amd);
        kernel->cubin = std::move(bin.code);
        kernel->ms = bin.compile_ms;
      } else {
        backend::CompiledBinary bin =
            rtc->compile(kernel->src.text, kernel->src.name + ".cu", target, extra_options, headers);
        kernel->cubin = std::move(bin.cubin);
        kernel->ms = bin.compile_ms;
      }
      kernel->disk = false;
      if (disk) disk->store(DiskCache::Kind::kernel, disk_key, encode_kernel({text_hash, kernel->ms, kernel->cubin}));
    };
    if (!kernel->disk) compile_source();
    if (device) {
      if (kernel->disk) {
        try {
          kernel->module.emplace(*device, kernel->cubin);
        } catch (const RuntimeError&) {
          compile_source();  // a record that is whole but that the driver refuses: compile and replace it
          kernel->module.emplace(*device, kernel->cubin);
        }
      } else {
        kernel->module.emplace(*device, kernel->cubin);
      }
      prepare_function(*kernel);
    }
    return kernel;
  });
}

// The loaded module's function, its attributes, and the opt-ins its shared
// memory and cluster size need.
void Jit::Impl::prepare_function(LoadedKernel& kernel) const {
  kernel.function = kernel.module->function(kernel.src.name);
  kernel.info = device->function_info(kernel.function);
  const int shared = static_cast<int>(kernel.src.shared_bytes);
  const int total = shared + kernel.info.static_shared_bytes;
  if (total > 48 * 1024) {  // above 48 KB (static and dynamic together) a kernel must opt in
    const int most = device->device(0).max_shared_per_block_optin;
    EPIFUSE_CHECK(total <= most, "tile {} needs {} bytes of shared memory per block; this GPU allows {}",
                  to_string(kernel.src.tile), total, most);
    device->set_max_dynamic_shared(kernel.function, shared);
  }
  if (kernel.src.cluster_blocks > 8) {
    EPIFUSE_ASSERT(driver, "a cluster kernel for {}: clusters are an NVIDIA feature", target_name);
    driver->allow_non_portable_cluster(static_cast<backend::CUfunction>(kernel.function));
  }
}

Jit::Jit(std::string target) : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  // Without a target, the GPU's: a CUDA GPU's if there is one, else an AMD GPU's.
  const bool amd = target.empty() ? !backend::device_runtime_or_null(Vendor::nvidia) &&
                                        backend::device_runtime_or_null(Vendor::amd)
                                  : backend::vendor_of(target) == Vendor::amd;
  if (amd) {
    d.init_amd(target);
  } else {
    d.init_nvidia(target);
  }
  d.disk = DiskCache::from_environment();
  if (d.device) d.device_name = d.device->device(0).name;
}

void Jit::Impl::init_nvidia(const std::string& target) {
  Impl& d = *this;
  // A bad target is the user's error whether or not NVRTC is here: check it first.
  if (!target.empty()) d.target = backend::parse_target(target);
  d.rtc = &backend::nvrtc();
  const bool has_gpu = backend::device_unavailable_reason(Vendor::nvidia).empty();
  if (target.empty()) {
    if (!has_gpu)
      throw RuntimeError(fmt::format("no GPU to run on or detect a target from ({}); emit and compile "
                                     "work with --target, e.g. sm_90a or gfx90a",
                                     gpu_unavailable_reason()));
    d.target = backend::detect_target(0);
  }
  d.target_name = d.target.str();
  if (has_gpu && backend::detect_target(0) == d.target) {
    d.driver = &backend::cuda();
    d.device = backend::device_runtime_or_null(Vendor::nvidia);
    d.driver->use_device(0);
    d.multiprocessors = d.driver->device(0).multiprocessors;
  }
  d.compiler = d.rtc->version_string();
  // EPIFUSE_NVRTC_OPTIONS: extra NVRTC options, space separated (experiments,
  // e.g. "-Ofc=mid"); they are part of every cache key.
  if (const char* extra = std::getenv("EPIFUSE_NVRTC_OPTIONS")) {
    std::istringstream words(extra);
    for (std::string w; words >> w;) d.extra_options.push_back(w);
  }
  // The key's options leave out -I folders: no template includes a toolkit
  // header, the compiler's version is in the key, and a path would keep two
  // checkouts or machines from sharing disk records (docs/disk-cache.md).
  std::vector<std::string> key_opts;
  for (const std::string& o : d.rtc->options(d.target, d.extra_options))
    if (!o.starts_with("-I")) key_opts.push_back(o);
  d.options = backend::join(key_opts, " ");
  for (const auto& [path, text] : embedded_templates())
    if (path.starts_with("common/")) d.headers.push_back({std::string(path), std::string(text)});
}

// An AMD target (docs/amd.md): keyed like an NVIDIA one, its full string
// (features included), hipRTC's version and options in the key; compiled in
// the hipRTC child from one source with the headers inlined; loaded and
// launched through the HIP runtime when device 0 can run it.
void Jit::Impl::init_amd(const std::string& text) {
  amd = text.empty() ? backend::detect_amd_target(0) : backend::parse_amd_target(text);
  target_name = amd->str();
  const backend::Hiprtc& hip = backend::hiprtc();  // RuntimeError when hipRTC is missing
  if (backend::HipRuntime* runtime = backend::hip_runtime_or_null()) {
    bool runs = false;
    try {
      runs = backend::runs_on(*amd, backend::detect_amd_target(0));
    } catch (const UserError&) {  // a GPU epifuse has no target for: compile only
    }
    if (runs) {
      device = runtime;
      device->use_device(0);
      multiprocessors = device->device(0).multiprocessors;
    }
  }
  compiler = hip.version_string();
  options = backend::join(hip.options(*amd, {}), " ");
  for (const auto& [path, text] : embedded_templates())
    if (path.starts_with("common/")) hip_headers.push_back({std::string(path), std::string(text)});
}

Jit::~Jit() = default;

const std::string& Jit::target() const { return impl_->target_name; }

CacheKey Jit::key(const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& tile) const {
  std::string sig = signature_bytes(spec);
  const std::optional<TileConfig> chosen = tile ? tile : impl_->tuned_tile(sig, shape);
  return impl_->make_key(std::move(sig), spec, shape, chosen);
}

std::shared_ptr<const CompiledKernel> Jit::compile(const KernelSpec& spec, const Shape& shape,
                                                   const std::optional<TileConfig>& tile) {
  const CacheKey k = key(spec, shape, tile);
  return impl_->compile(k, spec, nullptr, shape);
}

// Note [Variant kernels]: `epifuse bench --variant` times another source of
// the same kernel (emitted by another build, or edited by hand) in the same
// process as the fused kernel, rows taking turns: versions of the code measured
// against each other without the process-to-process noise of the clocks and
// of cuBLAS (+-3% at 4096^3, docs/PERF.md). It launches as the original does,
// so it must define the same kernel with the same parameter struct; it is not
// cached, and a misaligned launch runs the original's general kernel.
std::shared_ptr<const CompiledKernel> Jit::compile_variant(const CompiledKernel& like, std::string text) {
  const Impl& d = *impl_;
  const auto& original = static_cast<const LoadedKernel&>(like);
  const std::string& name = original.src.name;
  // The parameter struct, as the emitter writes it: `struct <name>_params {` ... `};`.
  auto params_struct = [&](const std::string& source) -> std::optional<std::string> {
    const std::string open = fmt::format("struct {}_params {{", name);
    const std::size_t at = source.find(open);
    if (at == std::string::npos) return std::nullopt;
    const std::size_t end = source.find("};", at);
    if (end == std::string::npos) return std::nullopt;
    return source.substr(at, end - at);
  };
  const std::optional<std::string> want = params_struct(original.src.text);
  EPIFUSE_ASSERT(want.has_value(), "kernel {} has no parameter struct in its source", name);
  EPIFUSE_CHECK(text.find(fmt::format("{}(", name)) != std::string::npos && params_struct(text).has_value(),
                "the variant defines no kernel {} with a parameter struct {}_params: emit it with the same chain, "
                "shape, target and tile (epifuse emit ... --tile {})",
                name, name, to_string(original.src.tile));
  EPIFUSE_CHECK(*params_struct(text) == *want,
                "the variant's {}_params differs from this build's: the launch would pack the wrong parameters",
                name);
  auto kernel = std::make_shared<LoadedKernel>();
  kernel->src = original.src;
  kernel->src.text = std::move(text);
  kernel->k = original.k;
  kernel->k.options += kernel->k.options.empty() ? "variant" : " variant";
  kernel->spec = original.spec;
  kernel->shape = original.shape;
  kernel->family = original.family;
  EPIFUSE_CHECK(!d.amd, "--variant: NVIDIA targets only (hipRTC kernels compile in a child process)");
  backend::CompiledBinary bin = d.rtc->compile(kernel->src.text, name + ".cu", d.target, d.extra_options, d.headers);
  kernel->cubin = std::move(bin.cubin);
  kernel->ms = bin.compile_ms;
  if (d.device) {
    kernel->module.emplace(*d.device, kernel->cubin);
    d.prepare_function(*kernel);
  }
  return kernel;
}

void Jit::Impl::pack_params(const LoadedKernel& kernel, const DeviceBindings& b, const Shape& shape,
                            const LaunchArgs& args, void* stream, unsigned char* params, bool& aligned) const {
  const KernelSource& ks = kernel.src;
  auto put = [&](const ParamField& f, const auto& v) {
    static_assert(std::is_trivially_copyable_v<std::decay_t<decltype(v)>>);
    EPIFUSE_ASSERT(f.size == sizeof v, "parameter '{}' is {} bytes, bound with {}", f.name, f.size, sizeof v);
    std::memcpy(params + f.offset, &v, sizeof v);
  };
  unsigned char* flag = nullptr;
  std::optional<std::pair<std::uint64_t, std::uint64_t>> scratch;  // (zeroed, free), looked up once
  aligned = true;
  for (const ParamField& f : ks.params) {
    switch (f.role) {
      case ParamRole::input:
      case ParamRole::output: {
        const bool in = f.role == ParamRole::input;
        const std::uint64_t ptr = in ? b.inputs[f.index] : b.outputs[f.index];
        const int need = in ? ks.input_alignment[f.index] : ks.output_alignment[f.index];
        if (need && ptr % need) aligned = false;
        put(f, ptr);
        break;
      }
      case ParamRole::dim_m: put(f, std::int64_t{shape.m}); break;
      case ParamRole::dim_n: put(f, std::int64_t{shape.n}); break;
      case ParamRole::dim_k: put(f, std::int64_t{shape.k}); break;
      case ParamRole::inv_n: put(f, 1.0 / static_cast<double>(shape.n)); break;
      case ParamRole::seed: put(f, std::uint64_t{args.seed}); break;
      case ParamRole::offset: put(f, std::uint64_t{args.offset}); break;
      case ParamRole::scalar: put(f, ks.scalars[f.index]); break;
      case ParamRole::vector_flag: flag = params + f.offset; break;
      case ParamRole::workspace: {
        if (!scratch) scratch = workspace(stream, kernel.family->workspace(ks, shape));
        put(f, f.index == 0 ? scratch->first : scratch->second);
        break;
      }
      case ParamRole::opaque: {
        EPIFUSE_ASSERT(f.size == 128, "an opaque parameter is a 128-byte tensor map");
        const std::optional<TensorMap2d> map = kernel.family->tensor_map(f, {ks, b.inputs, b.outputs, shape});
        EPIFUSE_ASSERT(!map || driver, "a tensor map for {}: TMA is an NVIDIA feature", target_name);
        if (map) tensor_maps.fill(*driver, *map, params + f.offset);  // else left zero
        break;
      }
    }
  }
  EPIFUSE_ASSERT(!ks.requires_alignment || flag == nullptr, "a kernel that requires alignment has no vector flag");
  if (flag) {
    const int vectorized = aligned ? 1 : 0;
    std::memcpy(flag, &vectorized, 4);
  }
}

void Jit::launch(const CompiledKernel& compiled, const DeviceBindings& b, const Shape& shape,
                 const LaunchArgs& args, void* stream) const {
  const Impl& d = *impl_;
  const auto& kernel = static_cast<const LoadedKernel&>(compiled);
  const KernelSource& ks = kernel.src;
  const KernelFamily& family = *kernel.family;
  EPIFUSE_CHECK(d.device && kernel.function,
                "kernel for {} cannot run here: {}", d.target_name,
                gpu_unavailable_reason().empty() ? "the GPU is a different architecture"
                                                 : gpu_unavailable_reason());
  EPIFUSE_CHECK(b.inputs.size() == ks.inputs.size() && b.outputs.size() == ks.outputs.size(),
                "launch: {} inputs and {} outputs bound, the kernel takes {} and {}",
                b.inputs.size(), b.outputs.size(), ks.inputs.size(), ks.outputs.size());
  if (shape.m == 0 || shape.n == 0) return;  // an empty result: nothing to compute, no zero-size grid
  EPIFUSE_CHECK(family.shape_class(*kernel.spec, ks.tile, shape) == kernel.k.shape_class,
                "launch: shape {}x{}x{} is of class {}, not {} that this kernel was compiled for", shape.m,
                shape.n, shape.k, family.shape_class(*kernel.spec, ks.tile, shape), kernel.k.shape_class);

  alignas(64) unsigned char params[limits::k_kernel_param_bytes];
  std::memset(params, 0, ks.params_size);
  bool aligned = true;
  d.pack_params(kernel, b, shape, args, stream, params, aligned);
  if (ks.requires_alignment && !aligned) {
    // The first misaligned launch compiles the general kernel (scalar path
    // included); later ones find it in the cache.
    CacheKey general = kernel.k;
    general.path = KernelPath::general;
    auto sibling = impl_->compile(general, *kernel.spec, kernel.spec, kernel.shape);
    launch(*sibling, b, shape, args, stream);
    return;
  }
  LaunchGeometry g = family.geometry(ks, shape, d.multiprocessors);
  if (g.persistent_work > 0) {
    // A persistent grid: as many blocks as the GPU holds at once. Clusters
    // are placed whole within a GPC, so multiprocessors x blocks per
    // multiprocessor would overcount them (measured: a second, partial wave
    // made cluster-of-8 rows 1.6x slower); the driver counts clusters itself.
    int occupancy = kernel.occupancy.load(std::memory_order_relaxed);
    const int threads = static_cast<int>(g.block[0] * g.block[1] * g.block[2]);
    if (occupancy < 0) {
      if (g.grid_multiple > 1) {
        EPIFUSE_ASSERT(d.driver, "a cluster launch for {}: clusters are an NVIDIA feature", d.target_name);
        const int clusters = d.driver->max_active_clusters(static_cast<backend::CUfunction>(kernel.function),
                                                           static_cast<int>(g.grid_multiple), threads, g.shared_bytes);
        occupancy = clusters > 0 ? clusters * static_cast<int>(g.grid_multiple) : 0;
      }
      if (occupancy <= 0)
        occupancy = d.multiprocessors * std::max(1, d.device->max_active_blocks_per_sm(kernel.function, threads, g.shared_bytes));
      kernel.occupancy.store(occupancy, std::memory_order_relaxed);
    }
    // `occupancy` is the grid's blocks in all (not per multiprocessor).
    const std::int64_t blocks = std::min<std::int64_t>(g.persistent_work, occupancy);
    const std::int64_t granule = std::max(1u, g.grid_multiple);
    g.grid[0] = static_cast<unsigned>(std::max(granule, blocks / granule * granule));
  }
  void* kernel_args[] = {params};
  d.device->launch(kernel.function, {g.grid[0], g.grid[1], g.grid[2]}, {g.block[0], g.block[1], g.block[2]},
                   kernel_args, g.shared_bytes, stream);
}

std::vector<std::shared_ptr<const CompiledKernel>> Jit::compile_all(const KernelSpec& spec, const Shape& shape,
                                                                  const std::vector<TileConfig>& tiles) {
  // NVRTC compiles in parallel threads (each owns its program; the cache
  // compiles a key once). A tile the device refuses (a UserError, e.g. more
  // shared memory than it has) leaves a null entry; anything else is rethrown.
  std::vector<std::shared_ptr<const CompiledKernel>> out(tiles.size());
  std::vector<std::exception_ptr> errors(tiles.size());
  std::atomic<std::size_t> next{0};
  const std::size_t workers =
      std::max<std::size_t>(1, std::min<std::size_t>(std::thread::hardware_concurrency(), tiles.size()));
  std::vector<std::thread> pool;
  for (std::size_t w = 0; w < workers; ++w)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next++) < tiles.size();) {
        try {
          out[i] = compile(spec, shape, tiles[i]);
        } catch (const UserError&) {
          out[i] = nullptr;
        } catch (...) {
          errors[i] = std::current_exception();
        }
      }
    });
  for (auto& t : pool) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  EPIFUSE_CHECK(std::any_of(out.begin(), out.end(), [](const auto& k) { return k != nullptr; }),
                "no tile candidate of this kernel can run on this GPU");
  return out;
}

Jit::TuneResult Jit::tune(const KernelSpec& spec, const Shape& shape, const DeviceBindings& b,
                          const LaunchArgs& args, std::vector<TileConfig> candidates) {
  EPIFUSE_CHECK(shape.m > 0 && shape.n > 0, "tune: M={} N={} is an empty problem: there is nothing to time",
                shape.m, shape.n);
  if (candidates.empty()) candidates = tile_candidates(spec, shape, target());
  // The runtime of the target's vendor (RuntimeError when there is none); a
  // GPU of another architecture gets as far as the first launch's UserError.
  backend::DeviceRuntime& drv = impl_->device ? *impl_->device : backend::device_runtime(backend::vendor_of(target()));
  // Launches back to back in batches of ~0.2 ms or more, so a few-microsecond
  // kernel is timed as it runs in a stream, not with each launch's host cost
  // between the events (which once ranked 64x64 tiles first at 1024^3).
  auto time_tile = [&](const CompiledKernel& kernel, int reps) {
    const double once = backend::median_ms(drv, [&] { launch(kernel, b, shape, args); }, 3);
    const int batch = std::clamp(static_cast<int>(0.2 / std::max(once, 1e-3)), 1, 16);
    return backend::median_ms(drv, [&] { launch(kernel, b, shape, args); }, reps, batch);
  };
  // Two rounds: every candidate briefly, then the best few again for longer,
  // so run-to-run noise (a few percent) rarely picks a worse tile.
  TuneResult result;
  const std::vector<std::shared_ptr<const CompiledKernel>> kernels = compile_all(spec, shape, candidates);
  std::vector<std::pair<double, std::shared_ptr<const CompiledKernel>>> ranked;
  for (const auto& kernel : kernels) {
    if (!kernel) continue;  // a tile this GPU cannot run (compile_all says why)
    const double ms = time_tile(*kernel, 9);
    result.all.push_back({kernel->source().tile, ms, kernel->compile_ms()});
    ranked.push_back({ms, kernel});
  }
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  ranked.resize(std::min<std::size_t>(ranked.size(), 4));
  result.ms = 1e30;
  for (const auto& [first_ms, kernel] : ranked) {
    const double ms = time_tile(*kernel, 41);
    if (ms < result.ms) {
      result.ms = ms;
      result.tile = kernel->source().tile;
    }
  }
  drv.synchronize();
  const std::string tk = tune_key(signature_bytes(spec), shape);
  {
    std::lock_guard lock(impl_->tuned_mutex);
    impl_->tuned[tk] = result.tile;
  }
  if (impl_->disk)
    impl_->disk->store(DiskCache::Kind::tuned, impl_->tuned_disk_key(tk), encode_tuned({result.tile, result.ms}));
  return result;
}

std::optional<TileConfig> Jit::tuned_tile(const KernelSpec& spec, const Shape& shape) const {
  return impl_->tuned_tile(signature_bytes(spec), shape);
}

CacheStats Jit::stats() const {
  CacheStats s = impl_->cache.stats();
  if (const DiskCache* disk = impl_->disk.get()) {
    const DiskCache::Stats d = disk->stats();
    s.disk_dir = disk->root().string();
    s.disk_writable = d.writable;
    s.disk_hits = d.hits;
    s.disk_misses = d.misses;
    s.disk_rejected = d.rejected;
    s.disk_writes = d.writes;
    s.disk_evicted = d.evicted;
    s.disk_files = d.files;
    s.disk_bytes = d.bytes;
  }
  return s;
}
std::vector<CacheKey> Jit::cached_keys() const { return impl_->cache.keys(); }
void Jit::clear() {
  impl_->cache.clear();
  std::lock_guard lock(impl_->tuned_mutex);
  impl_->tuned.clear();
  impl_->disk_asked.clear();
}
std::vector<DiskEntry> Jit::disk_entries() const {
  std::vector<DiskEntry> out;
  if (!impl_->disk) return out;
  for (const DiskCache::EntryInfo& e : impl_->disk->entries())
    out.push_back({e.path.string(), e.kind == DiskCache::Kind::kernel ? "kernel" : "tuned", e.bytes, e.valid});
  return out;
}
std::size_t Jit::clear_disk() { return impl_->disk ? impl_->disk->clear() : 0; }

}  // namespace epifuse
