#pragma once
/// NVIDIA compilation targets: "sm_80", "sm_90a".
///
/// A Target always names a real architecture (sm_, not compute_) so that NVRTC emits a
/// cubin that the driver loads without a PTX JIT step. The 'a' suffix selects the
/// architecture-specific feature set (wgmma, setmaxnreg on Hopper; tcgen05 on
/// Blackwell); such a cubin runs only on exactly that architecture.
#include <string>

namespace epifuse::backend {

struct Target {
  int major = 0;
  int minor = 0;
  bool arch_specific = false;  ///< the 'a' suffix

  /// "sm_90a"
  std::string str() const;
  /// major * 10 + minor: 90 for sm_90a, as nvrtcGetSupportedArchs lists them.
  int sm() const { return major * 10 + minor; }

  friend bool operator==(const Target&, const Target&) = default;
};

/// The oldest architecture epifuse generates code for (sm_80).
inline constexpr int k_min_sm = 80;

/// Parses "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120"...
/// Throws UserError with the accepted form for anything else, and for
/// architectures before sm_80; AMD targets ("gfx90a")
/// get a message pointing at the HIP backend.
Target parse_target(const std::string& text);

/// The NVRTC option selecting `t`: "--gpu-architecture=sm_90a".
std::string nvrtc_arch_option(const Target& t);

}  // namespace epifuse::backend
