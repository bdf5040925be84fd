#include "device.hpp"

#include <iostream>
#include <optional>

#include <fmt/format.h>

#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "common.hpp"

namespace epifuse::cli {

std::string_view to_string(Device d) {
  switch (d) {
    case Device::cpu: return "cpu";
    case Device::cuda: return "cuda";
    case Device::hip: return "hip";
  }
  return "?";
}

namespace {

// The GPU to use when --device is not given, or nullopt with the reason there is none.
// The backends (src/backend) are loaded with dlopen, so this asks at run time.
std::optional<Device> detect_gpu(std::string& reason) {
  reason = gpu_unavailable_reason();
  if (reason.empty()) return Device::cuda;
  return std::nullopt;
}

}  // namespace

Device choose_device(const std::string& requested) {
  if (requested == "cpu") return Device::cpu;
  if (requested == "cuda") return Device::cuda;
  if (requested == "hip") return Device::hip;
  EPIFUSE_CHECK(requested.empty(), "--device '{}': expected cuda, hip or cpu", requested);
  std::string reason;
  if (std::optional<Device> gpu = detect_gpu(reason)) return *gpu;
  std::cerr << fmt::format("epifuse: no GPU found ({}); running on the CPU reference\n", reason);
  return Device::cpu;
}

TensorMap run_on_device(Device device, const KernelSpec& spec, const Shape& shape,
                        const TensorMap& inputs, const LaunchArgs& args,
                        const std::optional<TileConfig>& tile) {
  switch (device) {
    case Device::cpu: return evaluate(spec, shape, inputs, args);
    case Device::cuda: {
      const std::string reason = gpu_unavailable_reason();
      if (!reason.empty()) throw RuntimeError(fmt::format("--device cuda: {}", reason));
      Jit jit;
      return epifuse::run_on_device(jit, spec, shape, inputs, args, tile);
    }
    case Device::hip: break;
  }
  throw UserError(fmt::format("device '{}' is not available in this build yet; use --device cpu",
                              to_string(device)));
}

}  // namespace epifuse::cli
