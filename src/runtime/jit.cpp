// The Jit: key -> cache -> (emit, NVRTC or hipRTC, load) -> launch.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>
#include <sstream>

#include "backend/code_object.hpp"
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
#include "runtime/local_gpu.hpp"
#include "runtime/jit_impl.hpp"
#include "runtime/tensor_map_cache.hpp"

namespace epifuse {

std::string gpu_unavailable_reason() {
  const std::string cuda = backend::device_unavailable_reason(Vendor::nvidia);
  if (cuda.empty() || backend::device_runtime_or_null(Vendor::amd)) return {};
  return fmt::format("{}; {}", cuda, backend::device_unavailable_reason(Vendor::amd));
}

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
    kernel->src = emit_kernel(spec, shape, k.tile, k.path, target_name, device_info);
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
        if (std::optional<KernelRecord> r = decode_kernel(*payload);
            r && r->source_hash == text_hash &&
            backend::code_object_problem({r->cubin.data(), r->cubin.size()}, target_name).empty()) {
          kernel->cubin = std::move(r->cubin);
          kernel->disk = true;
          kernel->ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        }
    }
    auto compile_source = [&] {
      if (amd) {
        backend::HiprtcBinary bin = backend::compile_hip_isolated(
            backend::inline_headers(kernel->src.text, headers), kernel->src.name + ".hip", *amd);
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
      const backend::DeviceScope scope(device, ordinal);
      kernel->ordinal = ordinal;
      if (kernel->disk) {
        try {
          kernel->module.emplace(*device, kernel->cubin, ordinal);
        } catch (const RuntimeError&) {
          compile_source();  // a record that is whole but that the driver refuses: compile and replace it
          kernel->module.emplace(*device, kernel->cubin, ordinal);
        }
      } else {
        kernel->module.emplace(*device, kernel->cubin, ordinal);
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
    const int most = device->device(ordinal).max_shared_per_block_optin;
    EPIFUSE_CHECK(total <= most, "tile {} needs {} bytes of shared memory per block; this GPU allows {}",
                  to_string(kernel.src.tile), total, most);
    device->set_max_dynamic_shared(kernel.function, shared);
  }
  if (kernel.src.cluster_blocks > 8) {
    EPIFUSE_ASSERT(driver, "a cluster kernel for {}: clusters are an NVIDIA feature", target_name);
    driver->allow_non_portable_cluster(static_cast<backend::CUfunction>(kernel.function));
  }
}

Jit::Jit(std::string target, int device) : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  EPIFUSE_CHECK(device >= 0, "device {} does not exist: devices are numbered from 0", device);
  d.ordinal = device;
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
  if (d.device) d.device_name = d.device->device(d.ordinal).name;
  // The heuristics' view of this GPU; the assumed one where the target cannot run here.
  d.device_info = d.device ? device_view(d.target_name, d.device->device(d.ordinal)) : assumed_device(d.target_name);
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
    d.target = backend::detect_target(d.ordinal);
  }
  d.target_name = d.target.str();
  if (has_gpu) {
    // UserError for a device that does not exist, whether or not a target was named.
    backend::cuda().device(d.ordinal);
    if (backend::detect_target(d.ordinal) == d.target) {
      d.driver = &backend::cuda();
      d.device = backend::device_runtime_or_null(Vendor::nvidia);
      d.multiprocessors = d.driver->device(d.ordinal).multiprocessors;
    }
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
  d.headers = backend::template_headers();
}

// An AMD target (docs/amd.md): keyed like an NVIDIA one, its full string
// (features included), hipRTC's version and options in the key; compiled in
// the hipRTC child from one source with the headers inlined; loaded and
// launched through the HIP runtime when device 0 can run it.
void Jit::Impl::init_amd(const std::string& text) {
  amd = text.empty() ? backend::detect_amd_target(ordinal) : backend::parse_amd_target(text);
  target_name = amd->str();
  const backend::Hiprtc& hip = backend::hiprtc();  // RuntimeError when hipRTC is missing
  if (backend::HipRuntime* runtime = backend::hip_runtime_or_null()) {
    bool runs = false;
    try {
      runs = backend::runs_on(*amd, backend::detect_amd_target(ordinal));
    } catch (const UserError&) {  // a GPU epifuse has no target for: compile only
    }
    if (runs) {
      device = runtime;
      multiprocessors = device->device(ordinal).multiprocessors;
    }
  }
  compiler = hip.version_string();
  options = backend::join(hip.options(*amd, {}), " ");
  headers = backend::template_headers();
}

// The workspaces are freed on the Jit's device (Note [Device scopes]).
Jit::~Jit() {
  try {
    const backend::DeviceScope scope(impl_->device, impl_->ordinal);
    impl_.reset();
  } catch (...) {  // entering the device failed (a driver torn down at exit): free as before
    impl_.reset();
  }
}

const std::string& Jit::target() const { return impl_->target_name; }
int Jit::device() const { return impl_->ordinal; }

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
// of cuBLAS (+-3% at 4096^3, docs/perf/gemm.md). It launches as the original does,
// so it must define the same kernel with the same parameter struct; it is not
// cached, and a misaligned launch runs the original's general kernel. A probe
// that lays out its shared memory anew (a row kernel's ring in other stages)
// may ask for another amount of dynamic shared memory with a line
// `// epifuse-variant: shared_bytes=N`; the launch then gives it N bytes.
constexpr std::string_view k_variant_shared_bytes = "// epifuse-variant: shared_bytes=";

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
  EPIFUSE_CHECK(!d.amd, "--variant: NVIDIA targets only (hipRTC kernels compile in a child process)");
  const std::optional<std::string> want = params_struct(original.src.text), got = params_struct(text);
  EPIFUSE_ASSERT(want.has_value(), "kernel {} has no parameter struct in its source", name);
  EPIFUSE_CHECK(text.find(fmt::format("{}(", name)) != std::string::npos && got.has_value(),
                "the variant defines no kernel {} with a parameter struct {}_params: emit it with the same chain, "
                "shape, target and tile (epifuse emit ... --tile {})",
                name, name, to_string(original.src.tile));
  EPIFUSE_CHECK(*got == *want,
                "the variant's {}_params differs from this build's: the launch would pack the wrong parameters",
                name);
  auto kernel = std::make_shared<LoadedKernel>();
  kernel->src = original.src;
  if (const std::size_t at = text.find(k_variant_shared_bytes); at != std::string::npos) {
    const char* digits = text.c_str() + at + k_variant_shared_bytes.size();
    char* end = nullptr;
    const unsigned long long bytes = std::strtoull(digits, &end, 10);
    EPIFUSE_CHECK(end != digits && bytes <= (1ull << 20), "the variant's '{}' needs a byte count (at most 1 MiB)",
                  k_variant_shared_bytes);
    kernel->src.shared_bytes = static_cast<std::uint32_t>(bytes);
  }
  kernel->src.text = std::move(text);
  kernel->k = original.k;
  kernel->k.options += kernel->k.options.empty() ? "variant" : " variant";
  kernel->spec = original.spec;
  kernel->shape = original.shape;
  kernel->family = original.family;
  backend::CompiledBinary bin = d.rtc->compile(kernel->src.text, name + ".cu", d.target, d.extra_options, d.headers);
  kernel->cubin = std::move(bin.cubin);
  kernel->ms = bin.compile_ms;
  if (d.device) {
    const backend::DeviceScope scope(d.device, d.ordinal);
    kernel->ordinal = d.ordinal;
    kernel->module.emplace(*d.device, kernel->cubin, d.ordinal);
    d.prepare_function(*kernel);
  }
  return kernel;
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
  if (candidates.empty()) candidates = tile_candidates(spec, shape);
  // The runtime of the target's vendor (RuntimeError when there is none); a
  // GPU of another architecture gets as far as the first launch's UserError.
  backend::DeviceRuntime& drv = impl_->device ? *impl_->device : backend::device_runtime(backend::vendor_of(target()));
  const backend::DeviceScope scope(&drv, impl_->ordinal);
  // Launches back to back in batches of ~0.2 ms or more, so a few-microsecond
  // kernel is timed as it runs in a stream, not with each launch's host cost
  // between the events (which once ranked 64x64 tiles first at 1024^3).
  //
  // Note [Tuning in turns]: the candidates take turns, batch by batch, in both
  // rounds, as `epifuse bench` times its rows (docs/bench.md). Timed one after
  // another, a large problem heats the GPU to its power limit during the first
  // candidates, and the clock each one gets decides more than its tile: at
  // 8192^3 the 128x256 tile, timed first, read 1.449 ms against 1.52-1.57 for
  // the ping-pong tiles; in turns the order is the other way round (1.529
  // against 1.496-1.515) (docs/perf/gemm.md, "Tuning in turns").
  const auto batch_for = [](double once_ms) { return std::clamp(static_cast<int>(0.2 / std::max(once_ms, 1e-3)), 1, 16); };
  const auto in_turns = [&](const std::vector<std::shared_ptr<const CompiledKernel>>& ks, int reps) {
    std::vector<std::function<void()>> fns;
    double fastest = 1e30;
    for (const auto& k : ks) {
      fns.push_back([&, k] { launch(*k, b, shape, args); });
      fastest = std::min(fastest, backend::median_ms(drv, fns.back(), 3));  // also the warm-up
    }
    return backend::median_ms_interleaved(drv, fns, reps, batch_for(fastest));
  };
  // Two rounds: every candidate briefly, then the best few again for longer,
  // so run-to-run noise (a few percent) rarely picks a worse tile.
  TuneResult result;
  std::vector<std::shared_ptr<const CompiledKernel>> kernels = compile_all(spec, shape, candidates);
  std::erase(kernels, nullptr);  // tiles this GPU cannot run (compile_all says why)
  const std::vector<double> first = in_turns(kernels, 9);
  std::vector<std::pair<double, std::shared_ptr<const CompiledKernel>>> ranked;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    result.all.push_back({kernels[i]->source().tile, first[i], kernels[i]->compile_ms()});
    ranked.push_back({first[i], kernels[i]});
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  ranked.resize(std::min<std::size_t>(ranked.size(), 4));
  std::vector<std::shared_ptr<const CompiledKernel>> finalists;
  for (const auto& r : ranked) finalists.push_back(r.second);
  const std::vector<double> second = in_turns(finalists, 41);
  result.ms = 1e30;
  for (std::size_t i = 0; i < finalists.size(); ++i)
    if (second[i] < result.ms) {
      result.ms = second[i];
      result.tile = finalists[i]->source().tile;
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

std::vector<TileConfig> Jit::tile_candidates(const KernelSpec& spec, const Shape& shape) const {
  return epifuse::tile_candidates(spec, shape, target(), impl_->device_info);
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
