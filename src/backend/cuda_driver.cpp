#include "backend/cuda_driver.hpp"

#include <algorithm>

#include <utility>

#include "epifuse/errors.hpp"

namespace epifuse::backend {

namespace {

constexpr CUresult CUDA_SUCCESS = 0;

// CU_DEVICE_ATTRIBUTE_* and CU_FUNC_ATTRIBUTE_* values from cuda.h (stable ABI).
enum DeviceAttribute : int {
  kMaxSharedPerBlock = 8,
  kMaxRegistersPerBlock = 12,
  kClockRate = 13,
  kMultiprocessorCount = 16,
  kMemoryClockRate = 36,
  kGlobalMemoryBusWidth = 37,
  kL2CacheSize = 38,
  kMaxThreadsPerSm = 39,
  kComputeCapabilityMajor = 75,
  kComputeCapabilityMinor = 76,
  kMaxSharedPerSm = 81,
  kMaxSharedPerBlockOptin = 97,
};
enum FuncAttribute : int {
  kFuncMaxThreadsPerBlock = 0,
  kFuncSharedSizeBytes = 1,
  kFuncLocalSizeBytes = 3,
  kFuncNumRegs = 4,
  kFuncMaxDynamicSharedSizeBytes = 8,
  kFuncNonPortableClusterSizeAllowed = 14,
};

const char* const kUseCpu = "use --device cpu, or emit/compile with --target";

}  // namespace

// Symbol names: where cuda.h #defines an entry point to a versioned one
// (cuMemAlloc -> cuMemAlloc_v2, cuEventElapsedTime -> cuEventElapsedTime_v2 in 12.8+),
// the versioned name is looked up, as a program compiled against cuda.h would.
struct CudaDriver::Api {
  CUresult (*Init)(unsigned);
  CUresult (*DriverGetVersion)(int*);
  CUresult (*GetErrorName)(CUresult, const char**);
  CUresult (*GetErrorString)(CUresult, const char**);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGetName)(char*, int, CUdevice);
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxGetCurrent)(CUcontext*);
  CUresult (*CtxSynchronize)();
  CUresult (*ModuleLoadData)(CUmodule*, const void*);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*FuncGetAttribute)(int*, int, CUfunction);
  CUresult (*FuncSetAttribute)(CUfunction, int, int);
  CUresult (*OccupancyMaxActiveBlocksPerMultiprocessor)(int*, CUfunction, int, size_t);
  // cuOccupancyMaxActiveClusters (CUDA 11.8+; null on older drivers); its config as LaunchConfig.
  CUresult (*OccupancyMaxActiveClusters)(int*, CUfunction, const void*) = nullptr;
  // cuStreamIsCapturing (CUDA 10+); its status: 0 none, 1 active, 2 invalidated.
  CUresult (*StreamIsCapturing)(CUstream, int*) = nullptr;
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, CUstream, void**, void**);
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*StreamCreate)(CUstream*, unsigned);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*EventCreate)(CUevent*, unsigned);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*EventDestroy)(CUevent);
  // cuTensorMapEncodeTiled (CUDA 12+; null on older drivers): the enums as ints.
  CUresult (*TensorMapEncodeTiled)(void*, int, unsigned, void*, const unsigned long long*, const unsigned long long*,
                                   const unsigned*, const unsigned*, int, int, int, int) = nullptr;

  explicit Api(const DynLib& l) {
#define EPIFUSE_CU_SYM(field, name) field = l.get<decltype(field)>(name)
    EPIFUSE_CU_SYM(Init, "cuInit");
    EPIFUSE_CU_SYM(DriverGetVersion, "cuDriverGetVersion");
    EPIFUSE_CU_SYM(GetErrorName, "cuGetErrorName");
    EPIFUSE_CU_SYM(GetErrorString, "cuGetErrorString");
    EPIFUSE_CU_SYM(DeviceGet, "cuDeviceGet");
    EPIFUSE_CU_SYM(DeviceGetCount, "cuDeviceGetCount");
    EPIFUSE_CU_SYM(DeviceGetName, "cuDeviceGetName");
    EPIFUSE_CU_SYM(DeviceGetAttribute, "cuDeviceGetAttribute");
    EPIFUSE_CU_SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    EPIFUSE_CU_SYM(CtxSetCurrent, "cuCtxSetCurrent");
    EPIFUSE_CU_SYM(CtxGetCurrent, "cuCtxGetCurrent");
    EPIFUSE_CU_SYM(CtxSynchronize, "cuCtxSynchronize");
    EPIFUSE_CU_SYM(ModuleLoadData, "cuModuleLoadData");
    EPIFUSE_CU_SYM(ModuleUnload, "cuModuleUnload");
    EPIFUSE_CU_SYM(ModuleGetFunction, "cuModuleGetFunction");
    EPIFUSE_CU_SYM(FuncGetAttribute, "cuFuncGetAttribute");
    EPIFUSE_CU_SYM(FuncSetAttribute, "cuFuncSetAttribute");
    EPIFUSE_CU_SYM(OccupancyMaxActiveBlocksPerMultiprocessor,
                   "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    EPIFUSE_CU_SYM(LaunchKernel, "cuLaunchKernel");
    EPIFUSE_CU_SYM(MemAlloc, "cuMemAlloc_v2");
    EPIFUSE_CU_SYM(MemFree, "cuMemFree_v2");
    EPIFUSE_CU_SYM(MemcpyHtoD, "cuMemcpyHtoD_v2");
    EPIFUSE_CU_SYM(MemcpyDtoH, "cuMemcpyDtoH_v2");
    EPIFUSE_CU_SYM(MemcpyDtoD, "cuMemcpyDtoD_v2");
    EPIFUSE_CU_SYM(MemsetD8, "cuMemsetD8_v2");
    OccupancyMaxActiveClusters = l.get_or_null<decltype(OccupancyMaxActiveClusters)>("cuOccupancyMaxActiveClusters");
    StreamIsCapturing = l.get_or_null<decltype(StreamIsCapturing)>("cuStreamIsCapturing");
    TensorMapEncodeTiled = l.get_or_null<decltype(TensorMapEncodeTiled)>("cuTensorMapEncodeTiled");
    EPIFUSE_CU_SYM(StreamCreate, "cuStreamCreate");
    EPIFUSE_CU_SYM(StreamDestroy, "cuStreamDestroy_v2");
    EPIFUSE_CU_SYM(StreamSynchronize, "cuStreamSynchronize");
    EPIFUSE_CU_SYM(EventCreate, "cuEventCreate");
    EPIFUSE_CU_SYM(EventRecord, "cuEventRecord");
    EPIFUSE_CU_SYM(EventSynchronize, "cuEventSynchronize");
    EPIFUSE_CU_SYM(EventDestroy, "cuEventDestroy_v2");
#undef EPIFUSE_CU_SYM
    // _v2 appeared in 12.8; drivers before it only have the original.
    EventElapsedTime = l.get_or_null<decltype(EventElapsedTime)>("cuEventElapsedTime_v2");
    if (!EventElapsedTime)
      EventElapsedTime = l.get<decltype(EventElapsedTime)>("cuEventElapsedTime");
  }
};

CudaDriver::CudaDriver(DynLib lib) : lib_(std::move(lib)), api_(std::make_unique<Api>(lib_)) {}
CudaDriver::~CudaDriver() = default;

std::unique_ptr<CudaDriver> CudaDriver::load() {
  std::vector<std::string> tried;
  std::optional<DynLib> lib = DynLib::open_first({"libcuda.so.1", "libcuda.so"}, &tried);
  if (!lib)
    throw RuntimeError(fmt::format("no CUDA driver (libcuda.so.1 not found): {}", kUseCpu));
  std::unique_ptr<CudaDriver> d(new CudaDriver(std::move(*lib)));
  Api& a = *d->api_;
  constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
  if (CUresult r = a.Init(0); r == CUDA_ERROR_NO_DEVICE)
    throw RuntimeError(fmt::format("no CUDA device present (driver {}; cuInit: {}): {}",
                                   d->library_path(), d->error_string(r), kUseCpu));
  else if (r != CUDA_SUCCESS)
    throw RuntimeError(fmt::format("CUDA driver {} loaded but cuInit failed: {}: {}",
                                   d->library_path(), d->error_string(r), kUseCpu));
  d->check(a.DriverGetVersion(&d->version_), "cuDriverGetVersion");
  int count = 0;
  d->check(a.DeviceGetCount(&count), "cuDeviceGetCount");
  if (count == 0)
    throw RuntimeError(
        fmt::format("no CUDA device present ({}): {}", d->version_string(), kUseCpu));
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    d->check(a.DeviceGet(&dev, i), "cuDeviceGet");
    DeviceInfo info;
    info.ordinal = i;
    char name[256] = {};
    d->check(a.DeviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName");
    info.name = name;
    auto attr = [&](int attribute) {
      int v = 0;
      d->check(a.DeviceGetAttribute(&v, attribute, dev), "cuDeviceGetAttribute");
      return v;
    };
    // Properties only heuristics read: 0 (unknown) where a driver no longer reports them.
    auto optional_attr = [&](int attribute) {
      int v = 0;
      return a.DeviceGetAttribute(&v, attribute, dev) == CUDA_SUCCESS ? v : 0;
    };
    info.cc_major = attr(kComputeCapabilityMajor);
    info.cc_minor = attr(kComputeCapabilityMinor);
    info.multiprocessors = attr(kMultiprocessorCount);
    info.max_threads_per_sm = attr(kMaxThreadsPerSm);
    info.l2_bytes = attr(kL2CacheSize);
    info.max_shared_per_block = attr(kMaxSharedPerBlock);
    info.max_shared_per_block_optin = attr(kMaxSharedPerBlockOptin);
    info.clock_khz = optional_attr(kClockRate);
    info.memory_clock_khz = optional_attr(kMemoryClockRate);
    info.memory_bus_bits = optional_attr(kGlobalMemoryBusWidth);
    info.max_shared_per_sm = attr(kMaxSharedPerSm);
    info.max_registers_per_block = attr(kMaxRegistersPerBlock);
    d->devices_.push_back(std::move(info));
  }
  d->primary_contexts_.assign(static_cast<size_t>(count), nullptr);
  return d;
}

std::string CudaDriver::version_string() const {
  return fmt::format("CUDA driver {}.{}", version_ / 1000, (version_ % 1000) / 10);
}

const DeviceInfo& CudaDriver::device(int ordinal) const {
  if (ordinal < 0 || ordinal >= device_count())
    throw UserError(fmt::format("CUDA device {} does not exist ({} device{} present)", ordinal,
                                device_count(), device_count() == 1 ? "" : "s"));
  return devices_[static_cast<size_t>(ordinal)];
}

int CudaDriver::device_attribute(int attribute, int ordinal) const {
  CUdevice dev = 0;
  check(api_->DeviceGet(&dev, device(ordinal).ordinal), "cuDeviceGet");
  int v = 0;
  check(api_->DeviceGetAttribute(&v, attribute, dev), "cuDeviceGetAttribute");
  return v;
}

std::string CudaDriver::error_string(CUresult r) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api_->GetErrorName(r, &name) != CUDA_SUCCESS || !name) name = nullptr;
  if (api_->GetErrorString(r, &text) != CUDA_SUCCESS || !text) text = nullptr;
  if (!name) return fmt::format("unknown CUresult {}", r);
  return text ? fmt::format("{} ({})", name, text) : std::string(name);
}

void CudaDriver::check(CUresult r, const char* call) const {
  if (r != CUDA_SUCCESS) throw RuntimeError(fmt::format("{} failed: {}", call, error_string(r)));
}

// ---- contexts

CUcontext CudaDriver::primary_context(int ordinal) {
  device(ordinal);  // range check
  std::lock_guard lock(contexts_mutex_);
  auto& slot = primary_contexts_[static_cast<size_t>(ordinal)];
  if (!slot) {
    CUdevice dev = 0;
    check(api_->DeviceGet(&dev, ordinal), "cuDeviceGet");
    check(api_->DevicePrimaryCtxRetain(&slot, dev), "cuDevicePrimaryCtxRetain");
  }
  return slot;
}

void CudaDriver::use_device(int ordinal) { check(api_->CtxSetCurrent(primary_context(ordinal)), "cuCtxSetCurrent"); }

bool CudaDriver::enter_device(int ordinal, CUcontext* previous) {
  const CUcontext want = primary_context(ordinal);
  CUcontext current = nullptr;
  check(api_->CtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current == want) return false;
  check(api_->CtxSetCurrent(want), "cuCtxSetCurrent");
  *previous = current;
  return true;
}

void CudaDriver::leave_device(CUcontext previous) noexcept { api_->CtxSetCurrent(previous); }

void CudaDriver::ensure_context() {
  CUcontext current = nullptr;
  check(api_->CtxGetCurrent(&current), "cuCtxGetCurrent");
  if (!current) use_device(0);
}

void CudaDriver::synchronize() {
  ensure_context();
  check(api_->CtxSynchronize(), "cuCtxSynchronize");
}

// ---- modules and launches

CUmodule CudaDriver::load_module(const void* image) {
  ensure_context();
  CUmodule m = nullptr;
  check(api_->ModuleLoadData(&m, image), "cuModuleLoadData");
  return m;
}

void CudaDriver::unload_module(CUmodule module) noexcept {
  if (module) api_->ModuleUnload(module);
}

CUfunction CudaDriver::get_function(CUmodule module, const std::string& name) {
  CUfunction f = nullptr;
  CUresult r = api_->ModuleGetFunction(&f, module, name.c_str());
  if (r != CUDA_SUCCESS)
    throw RuntimeError(fmt::format("cuModuleGetFunction(\"{}\") failed: {} (is the kernel "
                                   "extern \"C\" __global__?)",
                                   name, error_string(r)));
  return f;
}

int CudaDriver::function_attribute(int attribute, CUfunction f) {
  int v = 0;
  check(api_->FuncGetAttribute(&v, attribute, f), "cuFuncGetAttribute");
  return v;
}

FunctionInfo CudaDriver::function_info(CUfunction f) {
  FunctionInfo info;
  info.registers = function_attribute(kFuncNumRegs, f);
  info.max_threads_per_block = function_attribute(kFuncMaxThreadsPerBlock, f);
  info.static_shared_bytes = function_attribute(kFuncSharedSizeBytes, f);
  info.local_bytes = function_attribute(kFuncLocalSizeBytes, f);
  return info;
}

void CudaDriver::set_max_dynamic_shared(CUfunction f, int bytes) {
  check(api_->FuncSetAttribute(f, kFuncMaxDynamicSharedSizeBytes, bytes), "cuFuncSetAttribute");
}

void CudaDriver::allow_non_portable_cluster(CUfunction f) {
  check(api_->FuncSetAttribute(f, kFuncNonPortableClusterSizeAllowed, 1), "cuFuncSetAttribute");
}

bool CudaDriver::capturing(CUstream stream) {
  if (!api_->StreamIsCapturing) return false;
  int status = 0;
  check(api_->StreamIsCapturing(stream, &status), "cuStreamIsCapturing");
  return status != 0;
}

int CudaDriver::max_active_clusters(CUfunction f, int cluster, int block_size, size_t dynamic_shared_bytes) {
  if (!api_->OccupancyMaxActiveClusters) return 0;
  // CUlaunchConfig's layout (cuda.h, stable since 11.8); the cluster size is the kernel's own (__cluster_dims__).
  struct LaunchConfig {
    unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
    CUstream stream;
    void* attrs;
    unsigned num_attrs;
  } config{static_cast<unsigned>(cluster), 1, 1, static_cast<unsigned>(block_size), 1, 1,
           static_cast<unsigned>(dynamic_shared_bytes), nullptr, nullptr, 0};
  int clusters = 0;
  check(api_->OccupancyMaxActiveClusters(&clusters, f, &config), "cuOccupancyMaxActiveClusters");
  return clusters;
}

int CudaDriver::max_active_blocks_per_sm(CUfunction f, int block_size,
                                         size_t dynamic_shared_bytes) {
  int blocks = 0;
  check(api_->OccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, block_size,
                                                        dynamic_shared_bytes),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  return blocks;
}

void CudaDriver::launch(CUfunction f, Dim3 grid, Dim3 block, void** args, unsigned shared_bytes,
                        CUstream stream) {
  ensure_context();
  CUresult r = api_->LaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                  shared_bytes, stream, args, nullptr);
  if (r != CUDA_SUCCESS)
    throw RuntimeError(fmt::format("cuLaunchKernel failed: {} (grid {}x{}x{}, block {}x{}x{}, "
                                   "{} B dynamic shared)",
                                   error_string(r), grid.x, grid.y, grid.z, block.x, block.y,
                                   block.z, shared_bytes));
}

// ---- memory

CUdeviceptr CudaDriver::alloc(size_t bytes) {
  ensure_context();
  CUdeviceptr p = 0;
  CUresult r = api_->MemAlloc(&p, bytes);
  if (r != CUDA_SUCCESS)
    throw RuntimeError(fmt::format("cuMemAlloc failed: {} ({} bytes)", error_string(r), bytes));
  return p;
}

void CudaDriver::free(CUdeviceptr p) noexcept {
  if (p) api_->MemFree(p);
}

void CudaDriver::copy_to_device(CUdeviceptr dst, const void* src, size_t bytes) {
  ensure_context();
  check(api_->MemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
}

void CudaDriver::copy_to_host(void* dst, CUdeviceptr src, size_t bytes) {
  ensure_context();
  check(api_->MemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
}

void CudaDriver::copy_device(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  ensure_context();
  check(api_->MemcpyDtoD(dst, src, bytes), "cuMemcpyDtoD");
}

void CudaDriver::memset8(CUdeviceptr dst, unsigned char value, size_t bytes) {
  ensure_context();
  check(api_->MemsetD8(dst, value, bytes), "cuMemsetD8");
}

void CudaDriver::encode_tensor_map_2d(void* map, int element_bytes, CUdeviceptr base, std::uint64_t inner,
                                      std::uint64_t outer, std::uint64_t row_bytes, unsigned box_inner,
                                      unsigned box_outer, bool tf32, std::uint64_t batches,
                                      std::uint64_t batch_bytes) const {
  EPIFUSE_CHECK(api_->TensorMapEncodeTiled, "this CUDA driver has no cuTensorMapEncodeTiled (TMA needs CUDA 12 or later)");
  // CU_TENSOR_MAP_DATA_TYPE_UINT8/16/32 (the copy engine moves bits), or
  // TFLOAT32 (11: f32 rounded to tf32 on the way, docs/hopper.md); no
  // interleave, 128-byte swizzle, L2 promotion of 256 bytes, zero fill.
  EPIFUSE_ASSERT(!tf32 || element_bytes == 4, "tf32 tensor maps hold 4-byte elements, not {}", element_bytes);
  const int type = tf32 ? 11 : element_bytes == 1 ? 0 : element_bytes == 2 ? 1 : 2;
  // A batched GEMM's map is 3-D, the batch outermost and a box one plane deep.
  const unsigned rank = batches > 1 ? 3 : 2;
  const unsigned long long dims[3] = {inner, outer, batches}, strides[2] = {row_bytes, batch_bytes};
  const unsigned box[3] = {box_inner, box_outer, 1}, element_strides[3] = {1, 1, 1};
  check(api_->TensorMapEncodeTiled(map, type, rank, reinterpret_cast<void*>(base), dims, strides, box, element_strides, 0,
                                   3, 3, 0),
        "cuTensorMapEncodeTiled");
}

// ---- streams and events

CUstream CudaDriver::create_stream() {
  ensure_context();
  CUstream s = nullptr;
  check(api_->StreamCreate(&s, 0), "cuStreamCreate");
  return s;
}

void CudaDriver::destroy_stream(CUstream s) noexcept {
  if (s) api_->StreamDestroy(s);
}

void CudaDriver::synchronize(CUstream s) {
  ensure_context();
  check(api_->StreamSynchronize(s), "cuStreamSynchronize");
}

CUevent CudaDriver::create_event() {
  ensure_context();
  CUevent e = nullptr;
  check(api_->EventCreate(&e, 0), "cuEventCreate");
  return e;
}

void CudaDriver::destroy_event(CUevent e) noexcept {
  if (e) api_->EventDestroy(e);
}

void CudaDriver::record(CUevent e, CUstream s) {
  ensure_context();
  check(api_->EventRecord(e, s), "cuEventRecord");
}

void CudaDriver::synchronize(CUevent e) {
  ensure_context();
  check(api_->EventSynchronize(e), "cuEventSynchronize");
}

float CudaDriver::elapsed_ms(CUevent start, CUevent end) {
  float ms = 0;
  check(api_->EventElapsedTime(&ms, start, end), "cuEventElapsedTime");
  return ms;
}

// ---- process-wide driver

CudaDriver* cuda_or_null() { return load_once<CudaDriver>().backend; }

CudaDriver& cuda() {
  const auto& s = load_once<CudaDriver>();
  if (!s.backend) throw RuntimeError(s.reason);
  return *s.backend;
}

const std::string& cuda_unavailable_reason() { return load_once<CudaDriver>().reason; }

Target detect_target(int ordinal) {
  const DeviceInfo& d = cuda().device(ordinal);
  Target t{d.cc_major, d.cc_minor, false};
  t.arch_specific = d.cc_major == 9 && d.cc_minor == 0;
  return t;
}

// ---- RAII helpers

DeviceBuffer::DeviceBuffer(size_t bytes) : ptr_(cuda().alloc(bytes)), size_(bytes) {}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, 0)), size_(std::exchange(o.size_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cuda_or_null()->free(ptr_);
    ptr_ = std::exchange(o.ptr_, 0);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cuda_or_null()->free(ptr_);
}

void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  EPIFUSE_ASSERT(offset + bytes <= size_, "upload of {} bytes at {} into a {}-byte buffer", bytes,
                 offset, size_);
  cuda().copy_to_device(ptr_ + offset, host, bytes);
}

void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  EPIFUSE_ASSERT(offset + bytes <= size_, "download of {} bytes at {} from a {}-byte buffer",
                 bytes, offset, size_);
  cuda().copy_to_host(host, ptr_ + offset, bytes);
}

void DeviceBuffer::fill_bytes(unsigned char value) { cuda().memset8(ptr_, value, size_); }

Stream::Stream() : stream_(cuda().create_stream()) {}
Stream::Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (stream_) cuda_or_null()->destroy_stream(stream_);
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}
Stream::~Stream() {
  if (stream_) cuda_or_null()->destroy_stream(stream_);
}
void Stream::synchronize() { cuda().synchronize(stream_); }

Event::Event() : event_(cuda().create_event()) {}
Event::Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (event_) cuda_or_null()->destroy_event(event_);
    event_ = std::exchange(o.event_, nullptr);
  }
  return *this;
}
Event::~Event() {
  if (event_) cuda_or_null()->destroy_event(event_);
}
void Event::record(CUstream s) { cuda().record(event_, s); }
void Event::synchronize() { cuda().synchronize(event_); }

float EventTimer::elapsed_ms() {
  end_.synchronize();
  return cuda().elapsed_ms(begin_.get(), end_.get());
}

// Written once against the device seam (device_runtime.cpp), with the driver's events.
double median_ms(const std::function<void()>& fn, int repeats, int batch) {
  return median_ms(device_runtime(Vendor::nvidia), fn, repeats, batch);
}

std::vector<double> median_ms_interleaved(const std::vector<std::function<void()>>& fns, int repeats, int batch) {
  return median_ms_interleaved(device_runtime(Vendor::nvidia), fns, repeats, batch);
}

Module::Module(const void* image) : module_(cuda().load_module(image)) {}
Module::Module(Module&& o) noexcept : module_(std::exchange(o.module_, nullptr)) {}
Module& Module::operator=(Module&& o) noexcept {
  if (this != &o) {
    if (module_) cuda_or_null()->unload_module(module_);
    module_ = std::exchange(o.module_, nullptr);
  }
  return *this;
}
Module::~Module() {
  if (module_) cuda_or_null()->unload_module(module_);
}
CUfunction Module::function(const std::string& name) const {
  return cuda().get_function(module_, name);
}

}  // namespace epifuse::backend
