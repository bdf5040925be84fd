#pragma once
/// The calls the Jit and run_on_device make on a GPU, whichever vendor's: the
/// CUDA driver (cuda_driver.hpp) or the HIP runtime (hip_runtime.hpp).
///
///   DeviceRuntime& gpu = device_runtime(vendor_of(jit.target()));
///   DeviceMemory out(gpu, bytes);
///   gpu.launch(f, {blocks}, {256}, args);
///   gpu.copy_to_host(host.data(), out.ptr(), bytes);
///
/// Note [One device seam]
/// The Jit loads, launches and times kernels the same way on NVIDIA and AMD
/// GPUs, so it talks to an abstract DeviceRuntime with opaque handles (a module,
/// a function, a stream and an event are each a void*, device memory a 64-bit
/// address) instead of branching on the vendor at every call. HipRuntime is
/// written against it. CudaDriver keeps its typed API, which bench, the
/// cuBLASLt baselines, the tests and the TMA code use; a thin adapter
/// (cuda_device.cpp) forwards each call of the seam to it one for one. What only
/// NVIDIA has (tensor maps, clusters, cuOccupancyMaxActiveClusters) stays on
/// CudaDriver: no AMD kernel asks for it (docs/amd.md, "Runtime").
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace epifuse::backend {

/// What a kernel's launch shape is chosen from (cached when the runtime loads).
struct DeviceInfo {
  int ordinal = 0;
  std::string name;                   ///< "NVIDIA H100 80GB HBM3"
  int cc_major = 0, cc_minor = 0;     ///< compute capability
  int multiprocessors = 0;
  int max_threads_per_sm = 0;
  int l2_bytes = 0;
  int max_shared_per_block = 0;        ///< without opt-in (48 KiB)
  int max_shared_per_block_optin = 0;  ///< with cuFuncSetAttribute opt-in
  int max_shared_per_sm = 0;
  int max_registers_per_block = 0;
  int clock_khz = 0;         ///< the multiprocessors' peak clock
  int memory_clock_khz = 0;  ///< DRAM's peak clock
  int memory_bus_bits = 0;   ///< DRAM's bus width
};

/// DRAM's peak bandwidth in bytes a second (double data rate: two transfers
/// of the bus a memory clock); 0 where the runtime reports no memory clock.
std::uint64_t dram_bytes_per_second(const DeviceInfo& d);

/// A loaded kernel's resource usage (cuFuncGetAttribute).
struct FunctionInfo {
  int registers = 0;  ///< per thread
  int max_threads_per_block = 0;
  int static_shared_bytes = 0;
  int local_bytes = 0;  ///< per thread; non-zero means spills or stack
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

/// The vendor a target belongs to: "gfx..." is AMD, anything else NVIDIA.
enum class Vendor { nvidia, amd };
Vendor vendor_of(const std::string& target);
/// "CUDA" or "HIP", as --device spells the runtime.
const char* runtime_name(Vendor v);

/// One vendor's GPU runtime (Note [One device seam]). Every failing call throws
/// RuntimeError naming the call and the result, as the runtime's own API does.
class DeviceRuntime {
 public:
  using ModuleHandle = void*;
  using FunctionHandle = void*;
  using StreamHandle = void*;  ///< nullptr: the default stream
  using EventHandle = void*;
  using DevicePtr = std::uint64_t;

  virtual ~DeviceRuntime() = default;
  /// "CUDA driver 13.0", "HIP runtime 5.2.21153"
  virtual std::string version_string() const = 0;
  /// UserError for an ordinal out of range.
  virtual const DeviceInfo& device(int ordinal) const = 0;
  /// Makes `ordinal` the calling thread's device.
  virtual void use_device(int ordinal) = 0;
  /// Makes `ordinal` the calling thread's device for a while (DeviceScope):
  /// true, with the device that was current in *previous, when that was
  /// another one; false when `ordinal` already was.
  virtual bool enter_device(int ordinal, void** previous) = 0;
  /// Makes `previous` (from enter_device) current again.
  virtual void leave_device(void* previous) noexcept = 0;
  /// Waits for all work on the current device.
  virtual void synchronize() = 0;

  // ---- modules and launches
  virtual ModuleHandle load_module(const void* image) = 0;
  virtual void unload_module(ModuleHandle module) noexcept = 0;
  /// RuntimeError naming the kernel when the module lacks it.
  virtual FunctionHandle get_function(ModuleHandle module, const std::string& name) = 0;
  virtual FunctionInfo function_info(FunctionHandle f) = 0;
  /// Lets `f` use `bytes` of dynamic shared memory (CUDA: the opt-in above 48 KiB).
  virtual void set_max_dynamic_shared(FunctionHandle f, int bytes) = 0;
  virtual int max_active_blocks_per_sm(FunctionHandle f, int block_size, std::size_t dynamic_shared_bytes) = 0;
  /// Whether `stream` is being captured into a graph, when the runtime can say.
  virtual bool capturing(StreamHandle) { return false; }
  /// `args` holds one pointer per kernel parameter.
  virtual void launch(FunctionHandle f, Dim3 grid, Dim3 block, void** args, unsigned shared_bytes,
                      StreamHandle stream) = 0;

  // ---- memory (synchronous copies)
  virtual DevicePtr alloc(std::size_t bytes) = 0;
  virtual void free(DevicePtr p) noexcept = 0;
  virtual void copy_to_device(DevicePtr dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_to_host(void* dst, DevicePtr src, std::size_t bytes) = 0;
  virtual void memset8(DevicePtr dst, unsigned char value, std::size_t bytes) = 0;

  // ---- events, for timing
  virtual EventHandle create_event() = 0;
  virtual void destroy_event(EventHandle e) noexcept = 0;
  virtual void record(EventHandle e, StreamHandle s) = 0;
  virtual void synchronize_event(EventHandle e) = 0;
  virtual float elapsed_ms(EventHandle start, EventHandle end) = 0;
};

/// The process-wide runtime of `vendor`'s GPUs, loaded on first use: the CUDA
/// driver or the HIP runtime with at least one device; nullptr otherwise.
DeviceRuntime* device_runtime_or_null(Vendor vendor);
/// As above; RuntimeError with device_unavailable_reason(vendor) when null.
DeviceRuntime& device_runtime(Vendor vendor);
/// Why device_runtime_or_null(vendor) is null ("no CUDA driver (libcuda.so.1
/// not found): ..."); empty when it is not.
std::string device_unavailable_reason(Vendor vendor);

// Note [Device scopes]
// A Jit loads and launches on one device (its ordinal). The calling thread's
// current device belongs to the caller (PyTorch's torch.cuda.current_device(),
// say), so a Jit never changes it for good: each of its calls that touches
// the device makes the Jit's device current for the call's duration and then
// gives the caller's back. On CUDA that is a context switch (a thread-local
// read, and two writes only when the devices differ).
class DeviceScope {
 public:
  /// `runtime` null: nothing to do (a Jit that only compiles).
  DeviceScope(DeviceRuntime* runtime, int ordinal)
      : runtime_(runtime), changed_(runtime && runtime->enter_device(ordinal, &previous_)) {}
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() {
    if (changed_) runtime_->leave_device(previous_);
  }

 private:
  DeviceRuntime* runtime_;
  void* previous_ = nullptr;
  bool changed_;
};

/// A loaded code object (cubin or AMD ELF); unloaded when it dies, on the
/// device it was loaded on when that is given (a kernel may outlive the calls
/// of its Jit, Note [Device scopes]).
class DeviceModule {
 public:
  DeviceModule(DeviceRuntime& runtime, const std::vector<char>& image, int ordinal = -1);
  DeviceModule(const DeviceModule&) = delete;
  DeviceModule& operator=(const DeviceModule&) = delete;
  ~DeviceModule();
  DeviceRuntime::FunctionHandle function(const std::string& name) const;

 private:
  DeviceRuntime* runtime_;
  DeviceRuntime::ModuleHandle module_;
  int ordinal_;
};

/// Device memory; freed when it dies. Move-only.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(DeviceRuntime& runtime, std::size_t bytes);
  DeviceMemory(DeviceMemory&& o) noexcept;
  DeviceMemory& operator=(DeviceMemory&& o) noexcept;
  ~DeviceMemory();
  DeviceRuntime::DevicePtr ptr() const { return ptr_; }
  std::size_t size() const { return size_; }
  void fill_bytes(unsigned char value);

 private:
  DeviceRuntime* runtime_ = nullptr;
  DeviceRuntime::DevicePtr ptr_ = 0;
  std::size_t size_ = 0;
};

/// Median over `repeats` event-timed batches of `batch` calls of `fn` (after
/// three warm-up calls), in ms per call.
double median_ms(DeviceRuntime& runtime, const std::function<void()>& fn, int repeats, int batch = 1);
/// Several functions timed in turns (cuda_driver.hpp says why).
std::vector<double> median_ms_interleaved(DeviceRuntime& runtime, const std::vector<std::function<void()>>& fns,
                                          int repeats, int batch = 1);

}  // namespace epifuse::backend
