#include "device.hpp"

#include <iostream>
#include <optional>

#include <fmt/format.h>

#include "epifuse/errors.hpp"
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
// Note [CLI GPU path]: the backends (src/backend) are loaded with dlopen; until the
// CLI launches kernels through them, every run without --device goes to the CPU
// reference. Detection belongs here, dispatch in run_on_device below.
std::optional<Device> detect_gpu(std::string& reason) {
  reason = "this build of the CLI has no GPU launch path yet";
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
                        const TensorMap& inputs, const LaunchArgs& args) {
  switch (device) {
    case Device::cpu: return evaluate(spec, shape, inputs, args);
    case Device::cuda:
    case Device::hip: break;
  }
  throw UserError(fmt::format("device '{}' is not available in this build yet; use --device cpu",
                              to_string(device)));
}

}  // namespace epifuse::cli
