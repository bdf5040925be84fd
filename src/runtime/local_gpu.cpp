#include "runtime/local_gpu.hpp"

#include "backend/cuda_driver.hpp"
#include "backend/hip_runtime.hpp"
#include "epifuse/errors.hpp"

namespace epifuse {

DeviceInfo device_view(const std::string& target, const backend::DeviceInfo& gpu) {
  DeviceInfo d = assumed_device(target);
  if (gpu.multiprocessors > 0) d.multiprocessors = gpu.multiprocessors;
  if (gpu.max_shared_per_block_optin > 0) d.shared_per_block = static_cast<std::uint32_t>(gpu.max_shared_per_block_optin);
  if (gpu.l2_bytes > 0) d.l2_bytes = static_cast<std::uint64_t>(gpu.l2_bytes);
  if (const std::uint64_t bw = backend::dram_bytes_per_second(gpu)) d.dram_bytes_per_second = bw;
  if (gpu.clock_khz > 0) d.clock_khz = gpu.clock_khz;
  return d;
}

std::optional<LocalGpu> local_gpu(int ordinal) {
  using backend::Vendor;
  try {
    for (const Vendor v : {Vendor::nvidia, Vendor::amd}) {
      backend::DeviceRuntime* rt = backend::device_runtime_or_null(v);
      if (!rt) continue;
      const backend::DeviceInfo& gpu = rt->device(ordinal);  // UserError past the last device
      const std::string target =
          v == Vendor::nvidia ? backend::detect_target(ordinal).str() : backend::detect_amd_target(ordinal).str();
      return LocalGpu{target, gpu.name, device_view(target, gpu)};
    }
  } catch (const Error&) {  // no such device, or one the runtime cannot describe: none to show
  }
  return std::nullopt;
}

}  // namespace epifuse
