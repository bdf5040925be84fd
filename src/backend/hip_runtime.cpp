// The HIP runtime through dlopen (hip_runtime.hpp, docs/amd.md "Runtime").
#include "backend/hip_runtime.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "epifuse/errors.hpp"

namespace epifuse::backend {

namespace {

// hipError_t values (hip_runtime_api.h; the same in ROCm 5.2.3 and 6.x).
constexpr int k_success = 0;
constexpr int k_error_invalid_device = 101;  // ROCm 5's hipInit without a GPU
constexpr int k_error_no_device = 100;       // hipGetDeviceCount without a GPU

// hipDeviceAttribute_t values. ROCm 5.2.3 (/usr/include/hip/hip_runtime_api.h)
// and ROCm 6.0 give these the same numbers; checked by printing both headers'
// enumerators from a small program. The clocks and bus width were printed from
// 5.2.3's only; they sit in the same block of the enum (ClockRate after
// CanUseHostPointerForRegisteredMem, MemoryBusWidth and MemoryClockRate after
// MaxPitch), and only `epifuse info` and heuristics that skip AMD read them.
enum DeviceAttribute : int {
  kClockRate = 5,
  kL2CacheSize = 19,
  kMaxThreadsPerMultiProcessor = 57,
  kMemoryBusWidth = 59,
  kMemoryClockRate = 60,
  kMultiprocessorCount = 63,
  kMaxRegistersPerBlock = 71,
  kMaxSharedMemoryPerBlock = 74,
  kWarpSize = 87,
  kMaxSharedMemoryPerMultiprocessor = 10002,  // an AMD-only attribute (hipDeviceAttributeAmdSpecificBegin + 2)
};
// hipFunction_attribute values (HIP_FUNC_ATTRIBUTE_*): CUDA's numbers, in both versions.
enum FuncAttribute : int {
  kFuncMaxThreadsPerBlock = 0,
  kFuncSharedSizeBytes = 1,
  kFuncLocalSizeBytes = 3,
  kFuncNumRegs = 4,
};
// hipFuncAttribute (the enum hipFuncSetAttribute takes): hipFuncAttributeMaxDynamicSharedMemorySize.
constexpr int k_func_attribute_max_dynamic_shared = 8;

// Note [hipDeviceProp_t across ROCm versions]
// The target is read from hipDeviceProp_t::gcnArchName, and the struct's layout
// changed in ROCm 6: hip_runtime_api.h there maps hipGetDeviceProperties to
// hipGetDevicePropertiesR0600, a new symbol filling a larger struct, while
// ROCm 5's library has only hipGetDeviceProperties with the old layout. So the
// symbol says which layout we get, the struct is filled into a buffer larger
// than either, and gcnArchName is read at that layout's offset. The offsets and
// sizes were printed with offsetof/sizeof from a program built against each
// header: ROCm 5.2.3's (Debian's libamdhip64-dev, /usr/include/hip) and ROCm
// 6.0.0's and 6.2's (ROCm/HIP tags rocm-6.0.0 and later; R0600 is frozen).
// What is read there must look like an architecture name ("gfx" and a NUL
// within 256 bytes), else the layout is not the one we think and we say so.
struct PropLayout {
  const char* symbol;
  std::size_t arch_name_offset, size;
};
constexpr PropLayout k_props_rocm6{"hipGetDevicePropertiesR0600", 1160, 1472};
constexpr PropLayout k_props_rocm5{"hipGetDeviceProperties", 396, 792};
constexpr std::size_t k_props_buffer = 4096;  // larger than both, with room for growth
constexpr std::size_t k_arch_name_bytes = 256;

const char* const k_use_cpu = "use --device cpu, or emit/compile with --target";

}  // namespace

struct HipRuntime::Api {
  using Handle = void*;
  int (*Init)(unsigned);
  int (*RuntimeGetVersion)(int*);
  int (*DriverGetVersion)(int*);
  const char* (*GetErrorName)(int);
  const char* (*GetErrorString)(int);
  int (*GetDeviceCount)(int*);
  int (*SetDevice)(int);
  int (*GetDevice)(int*);
  int (*DeviceSynchronize)();
  int (*DeviceGetName)(char*, int, int);
  int (*DeviceGetAttribute)(int*, int, int);
  int (*GetDeviceProperties)(void*, int);  // the layout of `props` (Note [hipDeviceProp_t across ROCm versions])
  PropLayout props{};
  int (*ModuleLoadData)(Handle*, const void*);
  int (*ModuleUnload)(Handle);
  int (*ModuleGetFunction)(Handle*, Handle, const char*);
  int (*FuncGetAttribute)(int*, int, Handle);
  int (*FuncSetAttribute)(const void*, int, int);
  int (*ModuleOccupancyMaxActiveBlocksPerMultiprocessor)(int*, Handle, int, std::size_t);
  int (*ModuleLaunchKernel)(Handle, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, Handle,
                            void**, void**);
  int (*Malloc)(void**, std::size_t);
  int (*Free)(void*);
  int (*MemcpyHtoD)(void*, void*, std::size_t);  // hipMemcpyHtoD's source is not const in ROCm 5
  int (*MemcpyDtoH)(void*, void*, std::size_t);
  int (*MemcpyDtoD)(void*, void*, std::size_t);
  int (*MemsetD8)(void*, unsigned char, std::size_t);
  int (*StreamCreate)(Handle*);
  int (*StreamDestroy)(Handle);
  int (*StreamSynchronize)(Handle);
  int (*EventCreate)(Handle*);
  int (*EventRecord)(Handle, Handle);
  int (*EventSynchronize)(Handle);
  int (*EventElapsedTime)(float*, Handle, Handle);
  int (*EventDestroy)(Handle);

  explicit Api(const DynLib& l) {
#define EPIFUSE_HIP_SYM(field, name) field = l.get<decltype(field)>(name)
    EPIFUSE_HIP_SYM(Init, "hipInit");
    EPIFUSE_HIP_SYM(RuntimeGetVersion, "hipRuntimeGetVersion");
    EPIFUSE_HIP_SYM(DriverGetVersion, "hipDriverGetVersion");
    EPIFUSE_HIP_SYM(GetErrorName, "hipGetErrorName");
    EPIFUSE_HIP_SYM(GetErrorString, "hipGetErrorString");
    EPIFUSE_HIP_SYM(GetDeviceCount, "hipGetDeviceCount");
    EPIFUSE_HIP_SYM(SetDevice, "hipSetDevice");
    EPIFUSE_HIP_SYM(GetDevice, "hipGetDevice");
    EPIFUSE_HIP_SYM(DeviceSynchronize, "hipDeviceSynchronize");
    EPIFUSE_HIP_SYM(DeviceGetName, "hipDeviceGetName");
    EPIFUSE_HIP_SYM(DeviceGetAttribute, "hipDeviceGetAttribute");
    EPIFUSE_HIP_SYM(ModuleLoadData, "hipModuleLoadData");
    EPIFUSE_HIP_SYM(ModuleUnload, "hipModuleUnload");
    EPIFUSE_HIP_SYM(ModuleGetFunction, "hipModuleGetFunction");
    EPIFUSE_HIP_SYM(FuncGetAttribute, "hipFuncGetAttribute");
    EPIFUSE_HIP_SYM(FuncSetAttribute, "hipFuncSetAttribute");
    EPIFUSE_HIP_SYM(ModuleOccupancyMaxActiveBlocksPerMultiprocessor, "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor");
    EPIFUSE_HIP_SYM(ModuleLaunchKernel, "hipModuleLaunchKernel");
    EPIFUSE_HIP_SYM(Malloc, "hipMalloc");
    EPIFUSE_HIP_SYM(Free, "hipFree");
    EPIFUSE_HIP_SYM(MemcpyHtoD, "hipMemcpyHtoD");
    EPIFUSE_HIP_SYM(MemcpyDtoH, "hipMemcpyDtoH");
    EPIFUSE_HIP_SYM(MemcpyDtoD, "hipMemcpyDtoD");
    EPIFUSE_HIP_SYM(MemsetD8, "hipMemsetD8");
    EPIFUSE_HIP_SYM(StreamCreate, "hipStreamCreate");
    EPIFUSE_HIP_SYM(StreamDestroy, "hipStreamDestroy");
    EPIFUSE_HIP_SYM(StreamSynchronize, "hipStreamSynchronize");
    EPIFUSE_HIP_SYM(EventCreate, "hipEventCreate");
    EPIFUSE_HIP_SYM(EventRecord, "hipEventRecord");
    EPIFUSE_HIP_SYM(EventSynchronize, "hipEventSynchronize");
    EPIFUSE_HIP_SYM(EventElapsedTime, "hipEventElapsedTime");
    EPIFUSE_HIP_SYM(EventDestroy, "hipEventDestroy");
#undef EPIFUSE_HIP_SYM
    props = l.symbol_or_null(k_props_rocm6.symbol) ? k_props_rocm6 : k_props_rocm5;
    GetDeviceProperties = l.get<decltype(GetDeviceProperties)>(props.symbol);
  }
};

HipRuntime::HipRuntime(DynLib lib) : lib_(std::move(lib)), api_(std::make_unique<Api>(lib_)) {}
HipRuntime::~HipRuntime() = default;

std::unique_ptr<HipRuntime> HipRuntime::load() {
  std::vector<std::string> tried;
  std::optional<DynLib> lib = DynLib::open_first(
      {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5", "/opt/rocm/lib/libamdhip64.so"}, &tried);
  if (!lib)
    throw RuntimeError(fmt::format("no HIP runtime (libamdhip64.so not found: {}): {}", join(tried, "; "), k_use_cpu));
  std::unique_ptr<HipRuntime> h(new HipRuntime(std::move(*lib)));
  Api& a = *h->api_;
  // The versions answer without a device; say them in every message below.
  if (a.RuntimeGetVersion(&h->version_) != k_success) h->version_ = 0;
  if (a.DriverGetVersion(&h->driver_version_) != k_success) h->driver_version_ = 0;
  const std::string where = fmt::format("{} {}", h->version_string(), h->library_path());
  // Without a GPU, ROCm 5's hipInit answers hipErrorInvalidDevice and
  // hipGetDeviceCount hipErrorNoDevice (seen on Debian 12's 5.2.3): both mean "no device".
  const int init = a.Init(0);
  int count = 0;
  const int counted = a.GetDeviceCount(&count);
  if (counted == k_error_no_device || (counted == k_success && count == 0) ||
      (init == k_error_invalid_device && counted != k_success))
    throw RuntimeError(fmt::format("no AMD GPU present ({}; hipInit: {}; hipGetDeviceCount: {}): {}", where,
                                   h->error_string(init), h->error_string(counted), k_use_cpu));
  if (init != k_success)
    throw RuntimeError(fmt::format("HIP runtime {} loaded but hipInit failed: {}: {}", where, h->error_string(init),
                                   k_use_cpu));
  h->check(counted, "hipGetDeviceCount");
  for (int i = 0; i < count; ++i) h->devices_.push_back(h->read_device(i));
  return h;
}

AmdDeviceInfo HipRuntime::read_device(int ordinal) const {
  AmdDeviceInfo d;
  DeviceInfo& info = d.common;
  info.ordinal = ordinal;
  char name[256] = {};
  check(api_->DeviceGetName(name, sizeof name - 1, ordinal), "hipDeviceGetName");
  info.name = name;
  auto attr = [&](int attribute) {
    int v = 0;
    check(api_->DeviceGetAttribute(&v, attribute, ordinal), "hipDeviceGetAttribute");
    return v;
  };
  info.multiprocessors = attr(kMultiprocessorCount);
  info.max_threads_per_sm = attr(kMaxThreadsPerMultiProcessor);
  info.l2_bytes = attr(kL2CacheSize);
  info.max_shared_per_block = attr(kMaxSharedMemoryPerBlock);
  info.max_shared_per_block_optin = info.max_shared_per_block;
  info.max_shared_per_sm = attr(kMaxSharedMemoryPerMultiprocessor);
  info.max_registers_per_block = attr(kMaxRegistersPerBlock);
  // Properties only heuristics read: 0 (unknown) where the runtime does not report them.
  auto optional_attr = [&](int attribute) {
    int v = 0;
    return api_->DeviceGetAttribute(&v, attribute, ordinal) == 0 ? v : 0;
  };
  info.clock_khz = optional_attr(kClockRate);
  info.memory_clock_khz = optional_attr(kMemoryClockRate);
  info.memory_bus_bits = optional_attr(kMemoryBusWidth);
  d.warp_size = attr(kWarpSize);
  // gcnArchName (Note [hipDeviceProp_t across ROCm versions]).
  std::vector<char> props(k_props_buffer, '\0');
  check(api_->GetDeviceProperties(props.data(), ordinal), api_->props.symbol);
  const char* arch = props.data() + api_->props.arch_name_offset;
  const std::size_t length = strnlen(arch, k_arch_name_bytes);
  if (length == k_arch_name_bytes || std::strncmp(arch, "gfx", 3) != 0)
    throw RuntimeError(fmt::format("{}: no architecture name at byte {} of what {} wrote ({}): this ROCm's "
                                   "hipDeviceProp_t layout is not one epifuse knows",
                                   info.name, api_->props.arch_name_offset, api_->props.symbol, version_string()));
  d.arch_name.assign(arch, length);
  return d;
}

std::string HipRuntime::version_string() const {
  return fmt::format("HIP runtime {}.{}.{}", version_ / 10000000, version_ / 100000 % 100, version_ % 100000);
}

const AmdDeviceInfo& HipRuntime::amd_device(int ordinal) const {
  if (ordinal < 0 || ordinal >= device_count())
    throw UserError(fmt::format("AMD device {} does not exist ({} device{} present)", ordinal, device_count(),
                                device_count() == 1 ? "" : "s"));
  return devices_[static_cast<std::size_t>(ordinal)];
}

std::string HipRuntime::error_string(int result) const {
  const char* name = api_->GetErrorName(result);
  const char* text = api_->GetErrorString(result);
  if (!name) return fmt::format("unknown hipError_t {}", result);
  // ROCm 5's hipGetErrorString answers the name again: print it once.
  return text && std::strcmp(text, name) != 0 ? fmt::format("{} ({})", name, text) : std::string(name);
}

void HipRuntime::check(int result, const char* call) const {
  if (result != k_success) throw RuntimeError(fmt::format("{} failed: {}", call, error_string(result)));
}

void HipRuntime::use_device(int ordinal) {
  device(ordinal);  // range check
  check(api_->SetDevice(ordinal), "hipSetDevice");
}

bool HipRuntime::enter_device(int ordinal, void** previous) {
  device(ordinal);  // range check
  int current = 0;
  check(api_->GetDevice(&current), "hipGetDevice");
  if (current == ordinal) return false;
  check(api_->SetDevice(ordinal), "hipSetDevice");
  *previous = reinterpret_cast<void*>(static_cast<std::intptr_t>(current));
  return true;
}

void HipRuntime::leave_device(void* previous) noexcept {
  api_->SetDevice(static_cast<int>(reinterpret_cast<std::intptr_t>(previous)));
}

void HipRuntime::synchronize() { check(api_->DeviceSynchronize(), "hipDeviceSynchronize"); }

// ---- modules and launches

DeviceRuntime::ModuleHandle HipRuntime::load_module(const void* image) {
  ModuleHandle m = nullptr;
  check(api_->ModuleLoadData(&m, image), "hipModuleLoadData");
  return m;
}

void HipRuntime::unload_module(ModuleHandle module) noexcept {
  if (module) api_->ModuleUnload(module);
}

DeviceRuntime::FunctionHandle HipRuntime::get_function(ModuleHandle module, const std::string& name) {
  FunctionHandle f = nullptr;
  const int r = api_->ModuleGetFunction(&f, module, name.c_str());
  if (r != k_success)
    throw RuntimeError(fmt::format("hipModuleGetFunction(\"{}\") failed: {} (is the kernel extern \"C\" __global__?)",
                                   name, error_string(r)));
  return f;
}

FunctionInfo HipRuntime::function_info(FunctionHandle f) {
  auto attr = [&](int attribute) {
    int v = 0;
    check(api_->FuncGetAttribute(&v, attribute, f), "hipFuncGetAttribute");
    return v;
  };
  FunctionInfo info;
  info.registers = attr(kFuncNumRegs);
  info.max_threads_per_block = attr(kFuncMaxThreadsPerBlock);
  info.static_shared_bytes = attr(kFuncSharedSizeBytes);
  info.local_bytes = attr(kFuncLocalSizeBytes);
  return info;
}

void HipRuntime::set_max_dynamic_shared(FunctionHandle f, int bytes) {
  check(api_->FuncSetAttribute(f, k_func_attribute_max_dynamic_shared, bytes), "hipFuncSetAttribute");
}

int HipRuntime::max_active_blocks_per_sm(FunctionHandle f, int block_size, std::size_t dynamic_shared_bytes) {
  int blocks = 0;
  check(api_->ModuleOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, block_size, dynamic_shared_bytes),
        "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor");
  return blocks;
}

void HipRuntime::launch(FunctionHandle f, Dim3 grid, Dim3 block, void** args, unsigned shared_bytes,
                        StreamHandle stream) {
  const int r = api_->ModuleLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes, stream,
                                         args, nullptr);
  if (r != k_success)
    throw RuntimeError(fmt::format("hipModuleLaunchKernel failed: {} (grid {}x{}x{}, block {}x{}x{}, {} B dynamic "
                                   "shared)",
                                   error_string(r), grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes));
}

// ---- memory

namespace {
void* address(DeviceRuntime::DevicePtr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }
}  // namespace

DeviceRuntime::DevicePtr HipRuntime::alloc(std::size_t bytes) {
  void* p = nullptr;
  const int r = api_->Malloc(&p, bytes);
  if (r != k_success) throw RuntimeError(fmt::format("hipMalloc failed: {} ({} bytes)", error_string(r), bytes));
  return reinterpret_cast<std::uintptr_t>(p);
}

void HipRuntime::free(DevicePtr p) noexcept {
  if (p) api_->Free(address(p));
}

void HipRuntime::copy_to_device(DevicePtr dst, const void* src, std::size_t bytes) {
  check(api_->MemcpyHtoD(address(dst), const_cast<void*>(src), bytes), "hipMemcpyHtoD");
}

void HipRuntime::copy_to_host(void* dst, DevicePtr src, std::size_t bytes) {
  check(api_->MemcpyDtoH(dst, address(src), bytes), "hipMemcpyDtoH");
}

void HipRuntime::copy_device(DevicePtr dst, DevicePtr src, std::size_t bytes) {
  check(api_->MemcpyDtoD(address(dst), address(src), bytes), "hipMemcpyDtoD");
}

void HipRuntime::memset8(DevicePtr dst, unsigned char value, std::size_t bytes) {
  check(api_->MemsetD8(address(dst), value, bytes), "hipMemsetD8");
}

// ---- streams and events

DeviceRuntime::StreamHandle HipRuntime::create_stream() {
  StreamHandle s = nullptr;
  check(api_->StreamCreate(&s), "hipStreamCreate");
  return s;
}

void HipRuntime::destroy_stream(StreamHandle s) noexcept {
  if (s) api_->StreamDestroy(s);
}

void HipRuntime::synchronize(StreamHandle s) { check(api_->StreamSynchronize(s), "hipStreamSynchronize"); }

DeviceRuntime::EventHandle HipRuntime::create_event() {
  EventHandle e = nullptr;
  check(api_->EventCreate(&e), "hipEventCreate");
  return e;
}

void HipRuntime::destroy_event(EventHandle e) noexcept {
  if (e) api_->EventDestroy(e);
}

void HipRuntime::record(EventHandle e, StreamHandle s) { check(api_->EventRecord(e, s), "hipEventRecord"); }

void HipRuntime::synchronize_event(EventHandle e) { check(api_->EventSynchronize(e), "hipEventSynchronize"); }

float HipRuntime::elapsed_ms(EventHandle start, EventHandle end) {
  float ms = 0;
  check(api_->EventElapsedTime(&ms, start, end), "hipEventElapsedTime");
  return ms;
}

// ---- process-wide runtime and targets

HipRuntime* hip_runtime_or_null() { return load_once<HipRuntime>().backend; }

HipRuntime& hip_runtime() {
  const auto& s = load_once<HipRuntime>();
  if (!s.backend) throw RuntimeError(s.reason);
  return *s.backend;
}

const std::string& hip_runtime_unavailable_reason() { return load_once<HipRuntime>().reason; }

AmdTarget detect_amd_target(int ordinal) {
  const AmdDeviceInfo& d = hip_runtime().amd_device(ordinal);
  try {
    return parse_amd_target(d.arch_name);
  } catch (const UserError& e) {
    throw UserError(fmt::format("AMD device {} ({}): {}", ordinal, d.common.name, e.what()));
  }
}

bool runs_on(const AmdTarget& code, const AmdTarget& device) {
  return code.arch == device.arch && std::all_of(code.features.begin(), code.features.end(), [&](const std::string& f) {
           return std::find(device.features.begin(), device.features.end(), f) != device.features.end();
         });
}

}  // namespace epifuse::backend
