// The device seam (device_runtime.hpp): picking a vendor's runtime, and what is
// written once against it (module and memory ownership, event timing).
#include "backend/device_runtime.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "backend/cuda_device.hpp"
#include "backend/cuda_driver.hpp"
#include "backend/hip_runtime.hpp"
#include "epifuse/errors.hpp"

namespace epifuse::backend {

std::uint64_t dram_bytes_per_second(const DeviceInfo& d) {
  if (d.memory_clock_khz <= 0 || d.memory_bus_bits <= 0) return 0;
  return 2ull * 1000ull * static_cast<std::uint64_t>(d.memory_clock_khz) * static_cast<std::uint64_t>(d.memory_bus_bits) /
         8ull;
}

Vendor vendor_of(const std::string& target) { return target.starts_with("gfx") ? Vendor::amd : Vendor::nvidia; }

const char* runtime_name(Vendor v) { return v == Vendor::amd ? "HIP" : "CUDA"; }

DeviceRuntime* device_runtime_or_null(Vendor vendor) {
  return vendor == Vendor::amd ? static_cast<DeviceRuntime*>(hip_runtime_or_null()) : cuda_device_or_null();
}

DeviceRuntime& device_runtime(Vendor vendor) {
  if (DeviceRuntime* r = device_runtime_or_null(vendor)) return *r;
  throw RuntimeError(device_unavailable_reason(vendor));
}

std::string device_unavailable_reason(Vendor vendor) {
  if (vendor == Vendor::amd) return hip_runtime_unavailable_reason();
  if (!cuda_or_null()) return cuda_unavailable_reason();
  if (cuda().device_count() == 0) return "the CUDA driver reports no device";
  return {};
}

// ---- ownership

DeviceModule::DeviceModule(DeviceRuntime& runtime, const std::vector<char>& image, int ordinal)
    : runtime_(&runtime), module_(runtime.load_module(image.data())), ordinal_(ordinal) {}
DeviceModule::~DeviceModule() {
  try {
    const DeviceScope scope(ordinal_ >= 0 ? runtime_ : nullptr, ordinal_);
    runtime_->unload_module(module_);
  } catch (...) {  // entering the device failed (a driver torn down at exit): unload as before
    runtime_->unload_module(module_);
  }
}
DeviceRuntime::FunctionHandle DeviceModule::function(const std::string& name) const {
  return runtime_->get_function(module_, name);
}

DeviceMemory::DeviceMemory(DeviceRuntime& runtime, std::size_t bytes)
    : runtime_(&runtime), ptr_(runtime.alloc(bytes)), size_(bytes) {}
DeviceMemory::DeviceMemory(DeviceMemory&& o) noexcept
    : runtime_(o.runtime_), ptr_(std::exchange(o.ptr_, 0)), size_(std::exchange(o.size_, 0)) {}
DeviceMemory& DeviceMemory::operator=(DeviceMemory&& o) noexcept {
  if (this != &o) {
    if (ptr_) runtime_->free(ptr_);
    runtime_ = o.runtime_;
    ptr_ = std::exchange(o.ptr_, 0);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}
DeviceMemory::~DeviceMemory() {
  if (ptr_) runtime_->free(ptr_);
}
void DeviceMemory::fill_bytes(unsigned char value) { runtime_->memset8(ptr_, value, size_); }

// ---- timing

namespace {

// A pair of events on the default stream around one batch of calls.
class BatchTimer {
 public:
  explicit BatchTimer(DeviceRuntime& rt) : rt_(rt), begin_(rt.create_event()) {
    try {
      end_ = rt.create_event();
    } catch (...) {
      rt.destroy_event(begin_);
      throw;
    }
  }
  BatchTimer(const BatchTimer&) = delete;
  BatchTimer& operator=(const BatchTimer&) = delete;
  ~BatchTimer() {
    rt_.destroy_event(begin_);
    rt_.destroy_event(end_);
  }
  // ms per call of `batch` calls of `fn`.
  double time(const std::function<void()>& fn, int batch) {
    rt_.record(begin_, nullptr);
    for (int b = 0; b < batch; ++b) fn();
    rt_.record(end_, nullptr);
    rt_.synchronize_event(end_);
    return rt_.elapsed_ms(begin_, end_) / batch;
  }

 private:
  DeviceRuntime& rt_;
  DeviceRuntime::EventHandle begin_, end_ = nullptr;
};

double median(std::vector<double>& ms) {
  if (ms.empty()) return 0.0;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

double median_ms(DeviceRuntime& runtime, const std::function<void()>& fn, int repeats, int batch) {
  for (int i = 0; i < 3; ++i) fn();  // warm-up: module load, clocks, caches
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) ms.push_back(BatchTimer(runtime).time(fn, batch));
  return median(ms);
}

std::vector<double> median_ms_interleaved(DeviceRuntime& runtime, const std::vector<std::function<void()>>& fns,
                                          int repeats, int batch) {
  for (const auto& fn : fns)
    for (int i = 0; i < 3; ++i) fn();
  std::vector<std::vector<double>> ms(fns.size());
  for (int r = 0; r < repeats; ++r)
    for (std::size_t f = 0; f < fns.size(); ++f) ms[f].push_back(BatchTimer(runtime).time(fns[f], batch));
  std::vector<double> out;
  for (auto& m : ms) out.push_back(median(m));
  return out;
}

}  // namespace epifuse::backend
