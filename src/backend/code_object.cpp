#include "backend/code_object.hpp"

#include <cstdint>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace epifuse::backend {

namespace {

constexpr std::uint16_t k_em_cuda = 190, k_em_amdgpu = 224;
constexpr std::size_t k_elf64_header = 64;
constexpr std::uint32_t k_ef_amdgpu_mach = 0x0ff;

// EF_AMDGPU_MACH_AMDGCN_* (LLVM's AMDGPUUsage, "AMDGPU ELF Header") for the
// architectures epifuse accepts (amd_archs()).
constexpr std::pair<std::string_view, std::uint32_t> k_amd_machs[] = {
    {"gfx90a", 0x03f}, {"gfx942", 0x04c}, {"gfx1030", 0x036}, {"gfx1100", 0x041}, {"gfx1201", 0x04e}};

template <class T>
T at(std::string_view bytes, std::size_t offset) {  // little-endian hosts only, like the GPUs' ELF
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof v);
  return v;
}

// The first bytes, printable, for a message about what came instead.
std::string preview(std::string_view bytes) {
  std::string out;
  for (const char c : bytes.substr(0, 24)) {
    const auto u = static_cast<unsigned char>(c);
    out += u >= 0x20 && u < 0x7f && c != '"' && c != '\\' ? std::string(1, c) : fmt::format("\\x{:02x}", u);
  }
  return bytes.size() > 24 ? out + "..." : out;
}

}  // namespace

std::string code_object_problem(std::string_view bytes, std::string_view target) {
  if (bytes.size() < k_elf64_header || bytes.substr(0, 4) != "\x7f" "ELF")
    return fmt::format("{} bytes that are not an ELF file (\"{}\")", bytes.size(), preview(bytes));
  if (bytes[4] != 2 || bytes[5] != 1) return "an ELF file that is not 64-bit little-endian";
  const bool amd = target.starts_with("gfx");
  const auto machine = at<std::uint16_t>(bytes, 18);
  const std::uint16_t want = amd ? k_em_amdgpu : k_em_cuda;
  if (machine != want)
    return fmt::format("an ELF file for machine {}, not {} ({})", machine, want, amd ? "EM_AMDGPU" : "EM_CUDA");
  if (!amd) return "";
  const std::string_view arch = target.substr(0, target.find(':'));
  const std::uint32_t mach = at<std::uint32_t>(bytes, 48) & k_ef_amdgpu_mach;
  for (const auto& [name, value] : k_amd_machs)
    if (name == arch && value != mach)
      return fmt::format("an AMDGPU code object for EF_AMDGPU_MACH 0x{:03x}, not {} (0x{:03x})", mach, arch, value);
  return "";
}

}  // namespace epifuse::backend
