#pragma once
/// The HIP runtime, loaded with dlopen from libamdhip64.so (Note [Backends are
/// dlopened] in dynlib.hpp): what launches epifuse's kernels on an AMD GPU. No
/// HIP header is included; the few types, enums and struct offsets used are
/// declared in hip_runtime.cpp, each checked against the installed ROCm 5.2.3
/// headers (/usr/include/hip) and ROCm 6.0's.
///
///   HipRuntime& hip = hip_runtime();   // RuntimeError if no library or no AMD GPU
///   DeviceModule mod(hip, code_object);
///   hip.launch(mod.function("k"), {blocks}, {256}, args, 0, nullptr);
///
/// It implements the device seam (Note [One device seam], device_runtime.hpp)
/// directly: every HIP handle is a pointer (hipDeviceptr_t is void*), so the
/// seam's opaque handles are HIP's own. Every failing call throws RuntimeError
/// naming the call and the result: "hipMalloc failed: hipErrorOutOfMemory (out of memory)".
#include <memory>
#include <string>
#include <vector>

#include "backend/device_runtime.hpp"
#include "backend/dynlib.hpp"
#include "backend/hiprtc.hpp"

namespace epifuse::backend {

/// An AMD device: what every device has, and what only AMD's say.
struct AmdDeviceInfo {
  DeviceInfo common;      ///< max_shared_per_block_optin is max_shared_per_block: AMD has no opt-in
  std::string arch_name;  ///< hipDeviceProp_t::gcnArchName: "gfx90a:sramecc+:xnack-"
  int warp_size = 0;      ///< 64 on CDNA, 32 on RDNA
};

class HipRuntime final : public DeviceRuntime {
 public:
  /// Loads libamdhip64.so (then .so.6, .so.5), runs hipInit and enumerates
  /// devices. RuntimeError saying what is missing: the library, a working
  /// hipInit, or a device. Prefer hip_runtime().
  static std::unique_ptr<HipRuntime> load();

  /// hipRuntimeGetVersion: 50221153 for ROCm 5.2.21153 (it answers without a GPU).
  int version() const { return version_; }
  /// hipDriverGetVersion
  int driver_version() const { return driver_version_; }
  /// "HIP runtime 5.2.21153"
  std::string version_string() const override;
  const std::string& library_path() const { return lib_.path(); }
  int device_count() const { return static_cast<int>(devices_.size()); }
  /// UserError for an ordinal out of range.
  const AmdDeviceInfo& amd_device(int ordinal) const;
  const DeviceInfo& device(int ordinal) const override { return amd_device(ordinal).common; }
  /// hipSetDevice
  void use_device(int ordinal) override;
  /// hipGetDevice, then hipSetDevice when it differs.
  bool enter_device(int ordinal, void** previous) override;
  void leave_device(void* previous) noexcept override;
  /// hipDeviceSynchronize
  void synchronize() override;

  // ---- modules and launches
  ModuleHandle load_module(const void* image) override;
  void unload_module(ModuleHandle module) noexcept override;
  FunctionHandle get_function(ModuleHandle module, const std::string& name) override;
  FunctionInfo function_info(FunctionHandle f) override;
  /// hipFuncSetAttribute(hipFuncAttributeMaxDynamicSharedMemorySize). AMD needs
  /// no opt-in (a block may use all of max_shared_per_block); the Jit calls it
  /// as on CUDA. Older HIP runtimes return success without looking; clr's
  /// current one takes a module's function and checks the size.
  void set_max_dynamic_shared(FunctionHandle f, int bytes) override;
  /// hipModuleOccupancyMaxActiveBlocksPerMultiprocessor
  int max_active_blocks_per_sm(FunctionHandle f, int block_size, std::size_t dynamic_shared_bytes) override;
  /// hipModuleLaunchKernel; `args` holds one pointer per kernel parameter, as on CUDA.
  void launch(FunctionHandle f, Dim3 grid, Dim3 block, void** args, unsigned shared_bytes,
              StreamHandle stream) override;

  // ---- memory (synchronous copies on the null stream)
  DevicePtr alloc(std::size_t bytes) override;
  void free(DevicePtr p) noexcept override;
  void copy_to_device(DevicePtr dst, const void* src, std::size_t bytes) override;
  void copy_to_host(void* dst, DevicePtr src, std::size_t bytes) override;
  void copy_device(DevicePtr dst, DevicePtr src, std::size_t bytes);
  void memset8(DevicePtr dst, unsigned char value, std::size_t bytes) override;

  // ---- streams and events
  StreamHandle create_stream();
  void destroy_stream(StreamHandle s) noexcept;
  void synchronize(StreamHandle s);
  EventHandle create_event() override;
  void destroy_event(EventHandle e) noexcept override;
  void record(EventHandle e, StreamHandle s) override;
  void synchronize_event(EventHandle e) override;
  float elapsed_ms(EventHandle start, EventHandle end) override;

  /// "hipErrorOutOfMemory (out of memory)"
  std::string error_string(int result) const;
  /// RuntimeError("<call> failed: <error_string>") unless result is hipSuccess.
  void check(int result, const char* call) const;

  struct Api;  // the runtime's entry points (hip_runtime.cpp)
  ~HipRuntime() override;

 private:
  explicit HipRuntime(DynLib lib);
  AmdDeviceInfo read_device(int ordinal) const;
  DynLib lib_;
  std::unique_ptr<Api> api_;
  int version_ = 0, driver_version_ = 0;
  std::vector<AmdDeviceInfo> devices_;
};

/// The process-wide HIP runtime, loaded on first use; nullptr when there is no
/// library or no AMD GPU (hip_runtime_unavailable_reason() says which).
HipRuntime* hip_runtime_or_null();
/// The process-wide HIP runtime; RuntimeError with the reason when absent.
HipRuntime& hip_runtime();
/// Why hip_runtime_or_null() is null; empty when it loaded.
const std::string& hip_runtime_unavailable_reason();

/// The target to compile for on AMD device `ordinal`: its gcnArchName,
/// features included ("gfx90a:sramecc+:xnack-"). UserError when epifuse does
/// not generate code for that architecture.
AmdTarget detect_amd_target(int ordinal = 0);

/// Whether code compiled for `code` loads on a device of target `device`: the
/// same architecture, and every feature the code was built with ("xnack-")
/// set the same way on the device. Code built without a feature runs either way.
bool runs_on(const AmdTarget& code, const AmdTarget& device);

}  // namespace epifuse::backend
