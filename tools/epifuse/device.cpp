#include "device.hpp"

#include <iostream>
#include <optional>

#include <fmt/format.h>

#include "backend/device_runtime.hpp"
#include "backend/hip_runtime.hpp"
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

using backend::Vendor;

// The GPU to use when --device is not given: a CUDA GPU if there is one, else
// an AMD GPU, else nullopt with the reason there is neither. The backends
// (src/backend) are loaded with dlopen, so this asks at run time.
std::optional<Device> detect_gpu(std::string& reason) {
  if (backend::device_runtime_or_null(Vendor::nvidia)) return Device::cuda;
  if (backend::device_runtime_or_null(Vendor::amd)) return Device::hip;
  reason = gpu_unavailable_reason();
  return std::nullopt;
}

// Runs on `vendor`'s GPU 0, with the target read from it; RuntimeError naming
// what is missing when there is none ("--device hip: no AMD GPU present (...)").
TensorMap run_on_gpu(Vendor vendor, const KernelSpec& spec, const Shape& shape, const TensorMap& inputs,
                     const LaunchArgs& args, const std::optional<TileConfig>& tile) {
  const std::string reason = backend::device_unavailable_reason(vendor);
  if (!reason.empty())
    throw RuntimeError(fmt::format("--device {}: {}", vendor == Vendor::amd ? "hip" : "cuda", reason));
  Jit jit(vendor == Vendor::amd ? backend::detect_amd_target(0).str() : "");
  return epifuse::run_on_device(jit, spec, shape, inputs, args, tile);
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
    case Device::cuda: return run_on_gpu(Vendor::nvidia, spec, shape, inputs, args, tile);
    case Device::hip: return run_on_gpu(Vendor::amd, spec, shape, inputs, args, tile);
  }
  throw InternalError(fmt::format("device {} has no runner", static_cast<int>(device)));
}

}  // namespace epifuse::cli
