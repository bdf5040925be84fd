// Note [Assumed device]
// Tile heuristics compare tile counts with the device's multiprocessors and
// check tiles against its shared memory. Without a device (emit, compile-only
// targets) they need some GPU: the one each heuristic was tuned on. For NVIDIA
// that is an H100 SXM, for every NVIDIA target (an sm_80 emission keeps the
// 227 KiB limit; a tile above an A100's 163 KiB fails at its launch, as it
// always did). For AMD, where no GPU has timed these kernels yet, "a large GPU"
// of about 100 CUs (an MI210 has 104, an MI250X die 110) and 64 KiB of LDS.
#include "epifuse/device_info.hpp"

namespace epifuse {

DeviceInfo assumed_device(std::string_view target) {
  if (target.starts_with("gfx")) return DeviceInfo{100, 64 * 1024, 8ull << 20, 1'600'000'000'000ull, 1'700'000};
  return DeviceInfo{132, 227 * 1024, 50ull << 20, 3'352'000'000'000ull, 1'980'000};
}

double dram_bytes_per_sm_clock(const DeviceInfo& d) {
  if (d.dram_bytes_per_second == 0 || d.clock_khz <= 0 || d.multiprocessors <= 0) return 0.0;
  return static_cast<double>(d.dram_bytes_per_second) / (1000.0 * d.clock_khz * d.multiprocessors);
}

}  // namespace epifuse
