#pragma once
/// The properties of a GPU that tile heuristics and tile checks read. They are
/// passed as a value (from the device the Jit runs on, or assumed_device()
/// when there is none), never read from a global or hard-coded.
#include <cstdint>
#include <string_view>

namespace epifuse {

struct DeviceInfo {
  int multiprocessors = 0;           ///< SMs (NVIDIA) or compute units (AMD)
  std::uint32_t shared_per_block = 0;  ///< dynamic shared memory (LDS) one block may have, with opt-in
  std::uint64_t l2_bytes = 0;          ///< L2 cache
  friend bool operator==(const DeviceInfo&, const DeviceInfo&) = default;
};

/// What codegen assumes when no device is known (`epifuse emit`, compiling
/// for a --target without a GPU): the GPU today's heuristics were tuned on, so
/// emission reproduces their choices (Note [Assumed device], docs/gemm-mainloops.md).
/// NVIDIA targets and no target: an H100 SXM (132 SMs, 227 KiB, 50 MiB L2).
/// AMD ("gfx...") targets: a large CDNA GPU (100 CUs, 64 KiB LDS, 8 MiB L2).
DeviceInfo assumed_device(std::string_view target);

}  // namespace epifuse
