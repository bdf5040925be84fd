#pragma once
// One Jit for the GPU tier (compiling is the slow part), shared by every test
// file of the binary: null without a GPU, with a MESSAGE saying why; and the
// bit-for-bit comparison the tier's repeat and tile checks use.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/tensor.hpp"

namespace epifuse::testing {

// Two results with the same dtype and the same bytes.
inline bool same_bits(const HostTensor& a, const HostTensor& b) { return a.dtype == b.dtype && a.bytes == b.bytes; }

inline Jit* gpu_jit() {
  static std::unique_ptr<Jit> jit;
  static std::string reason;
  static bool tried = false;
  if (!tried) {
    tried = true;
    reason = gpu_unavailable_reason();
    if (reason.empty()) {
      try {
        jit = std::make_unique<Jit>();
      } catch (const Error& e) {
        reason = e.what();
      }
    }
  }
  if (!jit) MESSAGE("GPU suite skipped: " << reason);
  return jit.get();
}

// The same Jit where the GPU is an sm_90a one (wgmma), else null.
inline Jit* hopper_jit() {
  Jit* jit = gpu_jit();
  if (jit && jit->target() == "sm_90a") return jit;
  if (jit) MESSAGE("Hopper GEMM tests skipped: the GPU is " << jit->target() << ", not sm_90a");
  return nullptr;
}

}  // namespace epifuse::testing
