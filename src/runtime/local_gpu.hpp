#pragma once
/// This machine's GPU as the Jit sees it, without a compiler: its target and the
/// properties that steer the untuned tile (DeviceInfo). The Jit builds its view
/// from device_view; `epifuse emit`, which needs neither NVRTC nor a GPU, asks
/// local_gpu so that on a machine with a GPU it prints the kernel the Jit would
/// build there.
///
///   if (auto gpu = local_gpu()) emit_kernel(spec, shape, tile, path, gpu->target, gpu->device);
#include <optional>
#include <string>

#include "backend/device_runtime.hpp"
#include "epifuse/device_info.hpp"

namespace epifuse {

/// The heuristics' view of a GPU of `target`: assumed_device(target) with what
/// the runtime reports of it (multiprocessors, shared memory with opt-in, L2,
/// DRAM bandwidth, clock) in place of the assumptions.
DeviceInfo device_view(const std::string& target, const backend::DeviceInfo& gpu);

struct LocalGpu {
  std::string target;  ///< as the Jit spells it: "sm_90a", "gfx90a:xnack-"
  std::string name;    ///< "NVIDIA H200"
  DeviceInfo device;   ///< device_view of it
};

/// GPU `ordinal` of this machine, a CUDA GPU's if there is one, else an AMD
/// GPU's (as `Jit` without a target picks); nullopt without either runtime or
/// without that device. Loads the GPU runtime (not NVRTC or hipRTC).
std::optional<LocalGpu> local_gpu(int ordinal = 0);

}  // namespace epifuse
