#pragma once
/// The CUDA driver API, loaded with dlopen from libcuda.so.1 (Note [Backends are
/// dlopened] in dynlib.hpp). No CUDA header is included: the few types used are
/// declared below, with the same struct tags as cuda.h so that a caller that does
/// include cuda.h (PyTorch interop) gets identical handle types.
///
///   CudaDriver& cu = cuda();              // throws RuntimeError if no driver/device
///   Module mod(bin.cubin);                // binds device 0's primary context if none is current
///   CUfunction f = mod.function("scale2");
///   DeviceBuffer a(n * 4), out(n * 4);
///   a.upload(host.data(), n * 4);
///   void* args[] = {&out.ptr(), &a.ptr(), &n};
///   cu.launch(f, {blocks}, {256}, args);
///   out.download(result.data(), n * 4);
///
/// Every failing call throws RuntimeError naming the call and the result:
/// "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/device_runtime.hpp"
#include "backend/dynlib.hpp"
#include "backend/target.hpp"

// Opaque driver handles: the tags cuda.h uses.
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;

namespace epifuse::backend {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = ::CUctx_st*;
using CUmodule = ::CUmod_st*;
using CUfunction = ::CUfunc_st*;
using CUstream = ::CUstream_st*;
using CUevent = ::CUevent_st*;

class CudaDriver {
 public:
  /// Loads libcuda.so.1, runs cuInit and enumerates devices. Throws RuntimeError
  /// saying what is missing (no driver, cuInit failed, no device). Prefer cuda().
  static std::unique_ptr<CudaDriver> load();

  /// cuDriverGetVersion: 13000 for CUDA 13.0.
  int version() const { return version_; }
  /// "CUDA driver 13.0"
  std::string version_string() const;
  const std::string& library_path() const { return lib_.path(); }
  int device_count() const { return static_cast<int>(devices_.size()); }
  /// Throws UserError for an ordinal out of range.
  const DeviceInfo& device(int ordinal) const;
  /// cuDeviceGetAttribute(attribute, ordinal): any CU_DEVICE_ATTRIBUTE_* by number.
  int device_attribute(int attribute, int ordinal) const;

  // ---- contexts. epifuse uses each device's primary context, the one the CUDA
  // runtime (and so PyTorch) uses, so pointers and streams pass between them.
  /// Retains `ordinal`'s primary context (once per process) and makes it current on
  /// the calling thread.
  void use_device(int ordinal);
  /// Makes `ordinal`'s primary context current unless it is; true, with the
  /// context that was current (perhaps none) in *previous, when it was not.
  bool enter_device(int ordinal, CUcontext* previous);
  /// cuCtxSetCurrent(previous); errors are ignored (a destructor's call).
  void leave_device(CUcontext previous) noexcept;
  /// Makes device 0's primary context current unless a context already is (one the
  /// caller chose is respected). Every call below that needs a context does this
  /// (one cuCtxGetCurrent, a thread-local read in the driver), so any thread may call.
  void ensure_context();
  /// cuCtxSynchronize
  void synchronize();

  // ---- modules and launches
  CUmodule load_module(const void* image);
  void unload_module(CUmodule module) noexcept;
  /// Throws RuntimeError naming the kernel when the module lacks it.
  CUfunction get_function(CUmodule module, const std::string& name);
  FunctionInfo function_info(CUfunction f);
  /// cuFuncGetAttribute(attribute, f): any CU_FUNC_ATTRIBUTE_* by number.
  int function_attribute(int attribute, CUfunction f);
  /// Opts `f` in to `bytes` of dynamic shared memory (needed above 48 KiB).
  void set_max_dynamic_shared(CUfunction f, int bytes);
  /// Lets `f` run in clusters of more than 8 blocks (16 on an H100).
  void allow_non_portable_cluster(CUfunction f);
  /// cuOccupancyMaxActiveBlocksPerMultiprocessor: for persistent grids.
  /// Clusters of `cluster` blocks (the kernel's __cluster_dims__) the whole GPU
  /// holds at once; 0 when the driver cannot say (before CUDA 11.8).
  int max_active_clusters(CUfunction f, int cluster, int block_size, size_t dynamic_shared_bytes);
  int max_active_blocks_per_sm(CUfunction f, int block_size, size_t dynamic_shared_bytes = 0);
  /// Whether `stream` is being captured into a CUDA graph (false on drivers
  /// without cuStreamIsCapturing).
  bool capturing(CUstream stream);
  /// cuLaunchKernel; `args` holds one pointer per kernel parameter.
  void launch(CUfunction f, Dim3 grid, Dim3 block, void** args, unsigned shared_bytes = 0,
              CUstream stream = nullptr);

  // ---- memory (synchronous copies on the legacy default stream)
  CUdeviceptr alloc(size_t bytes);
  void free(CUdeviceptr p) noexcept;
  void copy_to_device(CUdeviceptr dst, const void* src, size_t bytes);
  void copy_to_host(void* dst, CUdeviceptr src, size_t bytes);
  void copy_device(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
  void memset8(CUdeviceptr dst, unsigned char value, size_t bytes);
  /// A 2-D TMA descriptor (a 128-byte CUtensorMap written to `map`, 64-byte
  /// aligned) for a row-major matrix of `outer` rows of `inner` elements,
  /// rows `row_bytes` apart, copied in boxes of box_inner x box_outer with the
  /// 128-byte swizzle and zero fill past the edges; with `tf32`, f32
  /// elements the copy engine rounds to tf32. Host only, no GPU work.
  /// `batches` > 1: a 3-D map of that many matrices `batch_bytes` apart (the outermost coordinate).
  void encode_tensor_map_2d(void* map, int element_bytes, CUdeviceptr base, std::uint64_t inner, std::uint64_t outer,
                            std::uint64_t row_bytes, unsigned box_inner, unsigned box_outer, bool tf32 = false,
                            std::uint64_t batches = 1, std::uint64_t batch_bytes = 0) const;

  // ---- streams and events
  CUstream create_stream();
  void destroy_stream(CUstream s) noexcept;
  void synchronize(CUstream s);
  CUevent create_event();
  void destroy_event(CUevent e) noexcept;
  void record(CUevent e, CUstream s = nullptr);
  void synchronize(CUevent e);
  float elapsed_ms(CUevent start, CUevent end);

  /// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)"
  std::string error_string(CUresult r) const;
  /// Throws RuntimeError("<call> failed: <error_string>") unless r is CUDA_SUCCESS.
  void check(CUresult r, const char* call) const;

  struct Api;  // the driver entry points (cuda_driver.cpp)
  ~CudaDriver();

 private:
  /// `ordinal`'s primary context, retained once per process.
  CUcontext primary_context(int ordinal);
  explicit CudaDriver(DynLib lib);
  DynLib lib_;
  std::unique_ptr<Api> api_;
  int version_ = 0;
  std::vector<DeviceInfo> devices_;
  std::mutex contexts_mutex_;
  std::vector<CUcontext> primary_contexts_;  // retained lazily, never released
};

/// The process-wide driver, loaded on first use; nullptr when there is no driver or
/// no device.
CudaDriver* cuda_or_null();
/// The process-wide driver; throws RuntimeError saying what is missing, e.g.
/// "no CUDA driver (libcuda.so.1 not found): use --device cpu, or emit/compile with --target".
CudaDriver& cuda();
/// Why cuda_or_null() is null; empty when the driver loaded.
const std::string& cuda_unavailable_reason();

/// The target to compile for on `ordinal`: sm_90a on compute capability 9.0 (Hopper's
/// architecture-specific features), sm_XY otherwise.
Target detect_target(int ordinal = 0);

// ---- RAII helpers over cuda(). Move-only; destructors never throw.

/// Device memory.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  ~DeviceBuffer();
  /// A reference, so that `&buf.ptr()` can go straight into a kernel's argument array.
  CUdeviceptr& ptr() { return ptr_; }
  CUdeviceptr ptr() const { return ptr_; }
  size_t size() const { return size_; }
  void upload(const void* host, size_t bytes, size_t offset = 0);
  void download(void* host, size_t bytes, size_t offset = 0) const;
  void fill_bytes(unsigned char value);

 private:
  CUdeviceptr ptr_ = 0;
  size_t size_ = 0;
};

class Stream {
 public:
  Stream();
  Stream(Stream&& o) noexcept;
  Stream& operator=(Stream&& o) noexcept;
  ~Stream();
  CUstream get() const { return stream_; }
  void synchronize();

 private:
  CUstream stream_ = nullptr;
};

class Event {
 public:
  Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  ~Event();
  CUevent get() const { return event_; }
  void record(CUstream s = nullptr);
  void synchronize();

 private:
  CUevent event_ = nullptr;
};

/// Times work on one stream: start(); ...launches...; stop(); elapsed_ms() waits for it.
class EventTimer {
 public:
  explicit EventTimer(CUstream s = nullptr) : stream_(s) {}
  void start() { begin_.record(stream_); }
  void stop() { end_.record(stream_); }
  float elapsed_ms();

 private:
  CUstream stream_;
  Event begin_, end_;
};

/// Median over `repeats` event-timed batches of `batch` calls of `fn` (after
/// three warm-up calls), in ms per call: what bench and the tuner time with.
double median_ms(const std::function<void()>& fn, int repeats, int batch = 1);
/// Several functions timed in turns: each round times one batch of each, and
/// each gets the median of its rounds. Functions compared this way see the
/// same clocks: an H100 at its power limit runs a long loop of one kernel
/// 10-20% slower than a short one (docs/perf/README.md, "How the figures are taken"), so timing one
/// baseline after another favoured whichever ran cooler.
std::vector<double> median_ms_interleaved(const std::vector<std::function<void()>>& fns, int repeats, int batch = 1);

/// A loaded cubin.
class Module {
 public:
  explicit Module(const void* image);
  explicit Module(const std::vector<char>& cubin) : Module(static_cast<const void*>(cubin.data())) {}
  Module(Module&& o) noexcept;
  Module& operator=(Module&& o) noexcept;
  ~Module();
  CUmodule get() const { return module_; }
  CUfunction function(const std::string& name) const;

 private:
  CUmodule module_ = nullptr;
};

}  // namespace epifuse::backend
