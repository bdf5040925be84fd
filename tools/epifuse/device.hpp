#pragma once
/// Where `epifuse run` executes a spec: the one place that knows the devices.
#include <string>
#include <string_view>

#include "epifuse/jit.hpp"
#include "epifuse/reference.hpp"
#include "epifuse/spec.hpp"

namespace epifuse::cli {

enum class Device { cpu, cuda, hip };
std::string_view to_string(Device);

/// The device named by --device ("cuda", "hip", "cpu"), or when `requested` is
/// empty the GPU that is present (a CUDA GPU first, then an AMD one), else the
/// CPU reference; in that last case it says why on stderr ("no GPU found
/// (reason); running on the CPU reference").
Device choose_device(const std::string& requested);

/// Runs the spec on `device` and returns its outputs by name. The CPU device is
/// the reference evaluator itself. RuntimeError naming what is missing when the
/// GPU is not there (no library, no device).
/// `tile` applies to GPU devices (default: the JIT's default tile).
TensorMap run_on_device(Device device, const KernelSpec& spec, const Shape& shape,
                        const TensorMap& inputs, const LaunchArgs& args,
                        const std::optional<TileConfig>& tile = std::nullopt);

}  // namespace epifuse::cli
