// CudaDriver through the device seam: one line a call (cuda_device.hpp).
#include "backend/cuda_device.hpp"

#include "backend/cuda_driver.hpp"

namespace epifuse::backend {

namespace {

class CudaDevice final : public DeviceRuntime {
 public:
  explicit CudaDevice(CudaDriver& cu) : cu_(cu) {}

  std::string version_string() const override { return cu_.version_string(); }
  const DeviceInfo& device(int ordinal) const override { return cu_.device(ordinal); }
  void use_device(int ordinal) override { cu_.use_device(ordinal); }
  bool enter_device(int ordinal, void** previous) override {
    CUcontext p = nullptr;
    const bool changed = cu_.enter_device(ordinal, &p);
    *previous = p;
    return changed;
  }
  void leave_device(void* previous) noexcept override { cu_.leave_device(static_cast<CUcontext>(previous)); }
  void synchronize() override { cu_.synchronize(); }

  ModuleHandle load_module(const void* image) override { return cu_.load_module(image); }
  void unload_module(ModuleHandle m) noexcept override { cu_.unload_module(static_cast<CUmodule>(m)); }
  FunctionHandle get_function(ModuleHandle m, const std::string& name) override {
    return cu_.get_function(static_cast<CUmodule>(m), name);
  }
  FunctionInfo function_info(FunctionHandle f) override { return cu_.function_info(fn(f)); }
  void set_max_dynamic_shared(FunctionHandle f, int bytes) override { cu_.set_max_dynamic_shared(fn(f), bytes); }
  int max_active_blocks_per_sm(FunctionHandle f, int block_size, std::size_t dynamic_shared_bytes) override {
    return cu_.max_active_blocks_per_sm(fn(f), block_size, dynamic_shared_bytes);
  }
  bool capturing(StreamHandle stream) override { return cu_.capturing(static_cast<CUstream>(stream)); }
  void launch(FunctionHandle f, Dim3 grid, Dim3 block, void** args, unsigned shared_bytes,
              StreamHandle stream) override {
    cu_.launch(fn(f), grid, block, args, shared_bytes, static_cast<CUstream>(stream));
  }

  DevicePtr alloc(std::size_t bytes) override { return cu_.alloc(bytes); }
  void free(DevicePtr p) noexcept override { cu_.free(p); }
  void copy_to_device(DevicePtr dst, const void* src, std::size_t bytes) override {
    cu_.copy_to_device(dst, src, bytes);
  }
  void copy_to_host(void* dst, DevicePtr src, std::size_t bytes) override { cu_.copy_to_host(dst, src, bytes); }
  void memset8(DevicePtr dst, unsigned char value, std::size_t bytes) override { cu_.memset8(dst, value, bytes); }

  EventHandle create_event() override { return cu_.create_event(); }
  void destroy_event(EventHandle e) noexcept override { cu_.destroy_event(ev(e)); }
  void record(EventHandle e, StreamHandle s) override { cu_.record(ev(e), static_cast<CUstream>(s)); }
  void synchronize_event(EventHandle e) override { cu_.synchronize(ev(e)); }
  float elapsed_ms(EventHandle start, EventHandle end) override { return cu_.elapsed_ms(ev(start), ev(end)); }

 private:
  static CUfunction fn(FunctionHandle f) { return static_cast<CUfunction>(f); }
  static CUevent ev(EventHandle e) { return static_cast<CUevent>(e); }
  CudaDriver& cu_;
};

}  // namespace

DeviceRuntime* cuda_device_or_null() {
  // Never destroyed, like the driver it wraps (LoadedOnce in dynlib.hpp).
  static CudaDevice* device = cuda_or_null() ? new CudaDevice(*cuda_or_null()) : nullptr;
  return device;
}

}  // namespace epifuse::backend
