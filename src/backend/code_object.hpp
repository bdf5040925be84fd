#pragma once
// What a compiler's output must be before epifuse loads it or keeps it on disk:
// an ELF code object for the target's machine. A hipRTC child that wrote
// anything else on its stdout, or a disk record that holds something else,
// fails this check with a reason instead of reaching the driver or the disk
// cache (docs/disk-cache.md).
#include <string>
#include <string_view>

namespace epifuse::backend {

/// Why `bytes` is not a code object for `target` ("sm_90a", "gfx90a:xnack-"),
/// or "" when it is one: a 64-bit little-endian ELF whose e_machine is EM_CUDA
/// (190) for an NVIDIA target, or EM_AMDGPU (224) for a gfx target with the
/// target's architecture in e_flags (EF_AMDGPU_MACH).
std::string code_object_problem(std::string_view bytes, std::string_view target);

}  // namespace epifuse::backend
