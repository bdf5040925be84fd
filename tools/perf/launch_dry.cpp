// The host's share of a launch, timed without a GPU (docs/perf/host.md, "Launch
// and cache hit"): Jit::launch's checks, parameter packing and grid on a device
// runtime that launches nothing, per call, with the heap allocations counted.
// What `epifuse bench` reports as the host launch is this plus the driver's
// context query and cuLaunchKernel.
//
//   build/epifuse_launch_dry [--check | --gpu] [CHAIN.json [M N [K]]]   (default: add_mul, 256 x 256)
//
// Rows: the launch alone (what bench times, less the driver); with the device
// pointers copied into a new DeviceBindings per call, as the C ABI did; with
// the C ABI's reused bindings (ef_launch_record, the Python module's path).
// --check: exits 1 unless the launch path allocates nothing and the runtime saw
// every launch (ctest runs it so). Kernels with TMA tensor maps (wgmma) need
// the CUDA driver to encode them and cannot run dry.
//
// --gpu (on a CUDA GPU): the same kernel compiled and launched for real, as
// `epifuse bench` times it (the mean of 200 launches, the median of 21 rounds),
// against the driver's launch alone (CudaDriver::launch, a context query and
// cuLaunchKernel, with the parameters packed once), on the default stream and
// on a stream of its own: what of the host launch is the Jit's, and what the
// driver's.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <vector>

#include "backend/device_runtime.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/device_info.hpp"
#include "epifuse/json.hpp"
#include "ir/limits.hpp"
#include "runtime/jit_impl.hpp"

// Every heap allocation of the process, counted (the unaligned forms: what
// std::vector and std::string use).
static std::atomic<long> g_allocations{0};
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace {

using namespace epifuse;
using backend::DeviceRuntime;

// A device runtime on which every launch succeeds and does nothing; anything
// else a launch should never ask for throws.
class DryRuntime final : public DeviceRuntime {
 public:
  long launches = 0;

  std::string version_string() const override { return "dry run"; }
  const backend::DeviceInfo& device(int) const override { return info_; }
  void use_device(int) override {}
  bool enter_device(int, void**) override { return false; }
  void leave_device(void*) noexcept override {}
  void synchronize() override {}
  ModuleHandle load_module(const void*) override { return refuse("load_module"); }
  void unload_module(ModuleHandle) noexcept override {}
  FunctionHandle get_function(ModuleHandle, const std::string&) override { return refuse("get_function"); }
  backend::FunctionInfo function_info(FunctionHandle) override { return {}; }
  void set_max_dynamic_shared(FunctionHandle, int) override {}
  int max_active_blocks_per_sm(FunctionHandle, int, std::size_t) override { return 4; }
  void launch(FunctionHandle, backend::Dim3, backend::Dim3, void**, unsigned, StreamHandle) override { ++launches; }
  DevicePtr alloc(std::size_t) override { refuse("alloc"); return 0; }
  void free(DevicePtr) noexcept override {}
  void copy_to_device(DevicePtr, const void*, std::size_t) override { refuse("copy_to_device"); }
  void copy_to_host(void*, DevicePtr, std::size_t) override { refuse("copy_to_host"); }
  void memset8(DevicePtr, unsigned char, std::size_t) override { refuse("memset8"); }
  EventHandle create_event() override { return refuse("create_event"); }
  void destroy_event(EventHandle) noexcept override {}
  void record(EventHandle, StreamHandle) override { refuse("record"); }
  void synchronize_event(EventHandle) override { refuse("synchronize_event"); }
  float elapsed_ms(EventHandle, EventHandle) override { refuse("elapsed_ms"); return 0; }

 private:
  static void* refuse(const char* what) { throw std::runtime_error(std::string("a dry launch asked for ") + what); }
  backend::DeviceInfo info_;
};

struct Timing {
  double median_ns = 0, lowest_ns = 0, allocations = 0;
};

// Median and lowest over rounds of the mean time of `calls` calls of `f`, and
// the heap allocations per call.
template <class F>
Timing time_calls(F&& f, int calls = 20000, int rounds = 21) {
  for (int i = 0; i < 1000; ++i) f();
  std::vector<double> ns;
  ns.reserve(static_cast<std::size_t>(rounds));  // no allocation of ours in the count
  const long before = g_allocations.load();
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) f();
    ns.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / calls);
  }
  const double allocations = static_cast<double>(g_allocations.load() - before) / (double(calls) * rounds);
  std::sort(ns.begin(), ns.end());
  return {ns[ns.size() / 2], ns.front(), allocations};
}

// Median over rounds of the mean host time of 200 back-to-back calls of `f`, in
// us, the device drained between rounds (bench's host launch).
template <class F>
double launch_us(DeviceRuntime& device, F&& f) {
  constexpr int launches = 200, rounds = 21;
  f();
  device.synchronize();
  std::vector<double> us;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < launches; ++i) f();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / launches);
    device.synchronize();
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// --gpu: the Jit's launch against the driver's alone, for real.
int on_gpu(const KernelSpec& spec, const Shape& shape) {
  Jit::Impl d;
  d.ordinal = 0;
  d.init_nvidia("");  // the GPU's target; d.device and d.driver when it can run
  EPIFUSE_CHECK(d.device && d.driver, "--gpu: no CUDA GPU runs {}", d.target_name);
  d.device_info = assumed_device(d.target_name);
  d.device_info.multiprocessors = static_cast<std::uint32_t>(d.multiprocessors);
  const backend::DeviceScope scope(d.device, d.ordinal);
  const auto compiled = d.compile(d.make_key(signature_bytes(spec), spec, shape, std::nullopt), spec, nullptr, shape);
  const auto& kernel = static_cast<const LoadedKernel&>(*compiled);
  const KernelSource& ks = kernel.src;
  // Buffers larger than any binding of the shape needs (f32 and wider, M x N, M x K or K x N).
  const std::size_t bytes = 8 * static_cast<std::size_t>(std::max({shape.m * shape.n, shape.m * std::max<std::int64_t>(shape.k, 1),
                                                                    std::max<std::int64_t>(shape.k, 1) * shape.n}));
  std::vector<backend::DeviceMemory> memory;
  DeviceBindings bound;
  for (std::size_t i = 0; i < ks.inputs.size() + ks.outputs.size(); ++i) {
    memory.emplace_back(*d.device, bytes);
    memory.back().fill_bytes(0);
    (i < ks.inputs.size() ? bound.inputs : bound.outputs).push_back(memory.back().ptr());
  }
  const LaunchArgs largs{1, 2, 0};
  backend::CUstream own = d.driver->create_stream();
  std::printf("host launch on %s, %s %lldx%lldx%lld, kernel %s: the mean of 200 launches, median of 21 rounds\n",
              d.device->device(d.ordinal).name.c_str(), spec.name.c_str(), static_cast<long long>(shape.m),
              static_cast<long long>(shape.n), static_cast<long long>(shape.k), ks.name.c_str());
  for (void* stream : {static_cast<void*>(nullptr), static_cast<void*>(own)}) {
    const char* where = stream ? "a stream of its own" : "the default stream";
    const double jit = launch_us(*d.device, [&] { d.launch(kernel, bound, shape, largs, stream); });
    alignas(64) unsigned char params[limits::k_kernel_param_bytes] = {};
    bool aligned = true;
    d.pack_params(kernel, bound, shape, largs, stream, params, aligned);
    const LaunchGeometry g = kernel.family->geometry(ks, shape, d.multiprocessors);
    EPIFUSE_CHECK(aligned && g.persistent_work == 0, "--gpu: the driver-alone row needs an aligned, non-persistent launch");
    void* kernel_args[] = {params};
    const double driver = launch_us(*d.device, [&] {
      d.driver->launch(static_cast<backend::CUfunction>(kernel.function), {g.grid[0], g.grid[1], g.grid[2]},
                       {g.block[0], g.block[1], g.block[2]}, kernel_args, g.shared_bytes,
                       static_cast<backend::CUstream>(stream));
    });
    std::printf("  %-20s Jit launch %6.2f us, driver's launch alone %6.2f us, the Jit's share %+6.2f us\n", where, jit,
                driver, jit - driver);
  }
  d.device->synchronize();
  d.driver->destroy_stream(own);
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<std::string> args(argv + 1, argv + argc);
  const bool check = !args.empty() && args.front() == "--check";
  if (check) args.erase(args.begin());
  const bool gpu = !args.empty() && args.front() == "--gpu";
  if (gpu) args.erase(args.begin());
  const std::string path = args.empty() ? std::string(EPIFUSE_SOURCE_DIR "/examples/chains/add_mul.json") : args[0];
  const KernelSpec spec = load_spec(path);
  Shape shape{256, 256, 0};
  if (args.size() >= 3) shape = {std::stoll(args[1]), std::stoll(args[2]), args.size() >= 4 ? std::stoll(args[3]) : 0};
  if (gpu) return on_gpu(spec, shape);

  // A Jit's insides as its constructor sets them up for an H100 (sm_90a), with
  // the dry runtime as its device.
  DryRuntime runtime;
  Jit::Impl d;
  d.target = backend::parse_target("sm_90a");
  d.target_name = d.target.str();
  d.device_info = assumed_device(d.target_name);
  d.device = &runtime;
  d.ordinal = 0;
  d.multiprocessors = static_cast<int>(d.device_info.multiprocessors);
  // The kernel as Jit::Impl::compile makes it, less the compile and the load.
  LoadedKernel kernel;
  kernel.k = d.make_key(signature_bytes(spec), spec, shape, std::nullopt);
  kernel.src = emit_kernel(spec, shape, kernel.k.tile, kernel.k.path, d.target_name, d.device_info);
  kernel.spec = std::make_shared<const KernelSpec>(spec);
  kernel.family = &family_for(spec);
  kernel.shape = shape;
  kernel.ordinal = 0;
  kernel.function = &runtime;  // any handle but null: the dry runtime reads none

  // 256-byte aligned device addresses, as an allocator gives them (the fast path), 4 GiB
  // apart so that no two share memory (Note [Overlapping bindings]).
  std::vector<std::uint64_t> ins, outs;
  for (std::size_t i = 0; i < kernel.src.inputs.size(); ++i) ins.push_back(0x7f0000000000ull + (i << 32));
  for (std::size_t i = 0; i < kernel.src.outputs.size(); ++i) outs.push_back(0x7f8000000000ull + (i << 32));
  const DeviceBindings bound{ins, outs};
  const LaunchArgs largs{1, 2, 0};

  const Timing alone = time_calls([&] { d.launch(kernel, bound, shape, largs, nullptr); });
  const Timing copied = time_calls([&] {
    DeviceBindings b;  // the C ABI's bindings_of per call
    b.inputs.assign(ins.begin(), ins.end());
    b.outputs.assign(outs.begin(), outs.end());
    d.launch(kernel, b, shape, largs, nullptr);
  });
  const Timing reused = time_calls([&] {
    thread_local DeviceBindings b;  // the C ABI's launch_bindings
    b.inputs.assign(ins.begin(), ins.end());
    b.outputs.assign(outs.begin(), outs.end());
    d.launch(kernel, b, shape, largs, nullptr);
  });

  std::printf("host share of a launch without the driver, %s %lldx%lldx%lld, kernel %s (%zu parameter bytes)\n",
              spec.name.c_str(), static_cast<long long>(shape.m), static_cast<long long>(shape.n),
              static_cast<long long>(shape.k), kernel.src.name.c_str(), kernel.src.params_size);
  std::printf("  %-52s %8s %8s %12s\n", "", "median", "lowest", "allocations");
  const auto row = [](const char* what, const Timing& t) {
    std::printf("  %-52s %6.1f ns %6.1f ns %12.2f\n", what, t.median_ns, t.lowest_ns, t.allocations);
  };
  row("Jit launch (bench's host launch, less the driver)", alone);
  row("with a new DeviceBindings per call", copied);
  row("with the C ABI's reused bindings (ef_launch_record)", reused);
  if (check) {
    const long expected = 3L * (1000 + 21 * 20000);
    if (alone.allocations != 0 || reused.allocations != 0 || runtime.launches != expected) {
      std::fprintf(stderr, "launch_dry --check: %.2f and %.2f allocations per launch (0 expected), %ld launches "
                   "seen of %ld\n", alone.allocations, reused.allocations, runtime.launches, expected);
      return 1;
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "launch_dry: %s\n", e.what());
  return 2;
}
