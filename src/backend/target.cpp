#include "backend/target.hpp"

#include <cctype>

#include "epifuse/errors.hpp"

namespace epifuse::backend {

std::string Target::str() const {
  return fmt::format("sm_{}{}{}", major, minor, arch_specific ? "a" : "");
}

Target parse_target(const std::string& text) {
  const std::string form =
      "sm_<major><minor>[a], a real NVIDIA architecture such as sm_80, sm_86, sm_89, sm_90a, "
      "sm_100a";
  auto starts = [&](const char* p) { return text.rfind(p, 0) == 0; };
  if (starts("gfx"))
    throw UserError(fmt::format("target '{}' is an AMD GPU: AMD targets need the HIP backend "
                                "(--device hip / hipRTC); NVIDIA targets are {}",
                                text, form));
  if (starts("compute_"))
    throw UserError(fmt::format("target '{}' is a virtual (PTX) architecture; epifuse compiles "
                                "to a cubin for a real one: use 'sm_{}'",
                                text, text.substr(8)));
  if (!starts("sm_"))
    throw UserError(fmt::format("invalid target '{}': expected {}", text, form));

  std::string rest = text.substr(3);
  Target t;
  if (!rest.empty() && rest.back() == 'a') {
    t.arch_specific = true;
    rest.pop_back();
  }
  bool digits = rest.size() >= 2 && rest.size() <= 3;
  for (char c : rest) digits = digits && std::isdigit(static_cast<unsigned char>(c));
  if (!digits || rest[0] == '0')
    throw UserError(fmt::format("invalid target '{}': expected {}", text, form));
  t.major = std::stoi(rest.substr(0, rest.size() - 1));
  t.minor = rest.back() - '0';
  if (t.major < 3)
    throw UserError(fmt::format("invalid target '{}': no NVIDIA architecture {}.{} exists; expected {}",
                                text, t.major, t.minor, form));
  // Generated kernels convert f16 and bf16 with sm_80 instructions
  // (common/numeric.cuh), and the GEMM families need cp.async and bf16 mma.
  if (t.sm() < k_min_sm)
    throw UserError(fmt::format("target '{}' is not supported: epifuse generates code for sm_80 and newer "
                                "(Ampere, Ada, Hopper, Blackwell), e.g. sm_80, sm_86, sm_89, sm_90a, sm_100a, sm_120",
                                text));
  if (t.arch_specific && t.major < 9)
    throw UserError(fmt::format(
        "invalid target '{}': architecture-specific 'a' targets exist from sm_90a on; use "
        "'sm_{}{}'",
        text, t.major, t.minor));
  return t;
}

std::string nvrtc_arch_option(const Target& t) { return "--gpu-architecture=" + t.str(); }

}  // namespace epifuse::backend
