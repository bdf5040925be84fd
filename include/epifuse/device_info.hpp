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
  std::uint64_t dram_bytes_per_second = 0;  ///< peak DRAM bandwidth (memory clock x bus width x 2); 0: unknown
  int clock_khz = 0;                        ///< the multiprocessors' peak clock; 0: unknown
  friend bool operator==(const DeviceInfo&, const DeviceInfo&) = default;
};

/// DRAM bytes a multiprocessor must be fed each clock for the whole GPU to
/// reach its peak bandwidth (about 12.8 on an H100 SXM, 18.4 on an H200); 0
/// when the device does not say.
double dram_bytes_per_sm_clock(const DeviceInfo& d);

/// What codegen assumes when no device is known (`epifuse emit`, compiling
/// for a --target without a GPU): the GPU today's heuristics were tuned on, so
/// emission reproduces their choices (Note [Assumed device], docs/gemm-mainloops.md).
/// NVIDIA targets and no target: an H100 SXM (132 SMs, 227 KiB, 50 MiB L2,
/// 3.35 TB/s at 1,980 MHz).
/// AMD ("gfx...") targets: a large CDNA GPU (100 CUs, 64 KiB LDS, 8 MiB L2,
/// 1.6 TB/s at 1,700 MHz).
DeviceInfo assumed_device(std::string_view target);

}  // namespace epifuse
