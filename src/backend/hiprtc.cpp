// hipRTC through dlopen, and AMD targets (hiprtc.hpp, docs/amd.md).
#include "backend/hiprtc.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

namespace epifuse::backend {

// ---- targets

const std::vector<std::string>& amd_archs() {
  static const std::vector<std::string> archs = {"gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1201"};
  return archs;
}

std::string AmdTarget::str() const {
  std::string s = arch;
  for (const std::string& f : features) s += ":" + f;
  return s;
}

int AmdTarget::wave_size() const { return arch.starts_with("gfx9") ? 64 : 32; }

AmdTarget parse_amd_target(const std::string& text) {
  const std::string accepted = fmt::format(
      "an AMD target is one of {} with optional features :xnack+, :xnack-, :sramecc+, :sramecc- (e.g. gfx90a:xnack-)",
      join(amd_archs()));
  AmdTarget t;
  std::size_t colon = text.find(':');
  t.arch = text.substr(0, colon);
  if (std::find(amd_archs().begin(), amd_archs().end(), t.arch) == amd_archs().end())
    throw UserError(fmt::format("target '{}': {}", text, accepted));
  while (colon != std::string::npos) {
    const std::size_t next = text.find(':', colon + 1);
    const std::string f = text.substr(colon + 1, next == std::string::npos ? std::string::npos : next - colon - 1);
    const bool known = f == "xnack+" || f == "xnack-" || f == "sramecc+" || f == "sramecc-";
    const bool repeated = std::any_of(t.features.begin(), t.features.end(),
                                      [&](const std::string& g) { return g.substr(0, g.size() - 1) == f.substr(0, f.size() - 1); });
    if (!known || repeated)
      throw UserError(fmt::format("target '{}': feature '{}' {}; {}", text, f,
                                  known ? "is given twice" : "is not one epifuse knows", accepted));
    if (!t.arch.starts_with("gfx9"))  // xnack and sramecc are CDNA features (gfx90a, gfx942)
      throw UserError(fmt::format("target '{}': {} has no '{}' feature (only gfx90a and gfx942 do)", text, t.arch, f));
    t.features.push_back(f);
    colon = next;
  }
  return t;
}

// ---- the library

namespace {
using hiprtcProgram = void*;
using hiprtcResult = int;  // HIPRTC_SUCCESS = 0, HIPRTC_ERROR_COMPILATION = 6
constexpr hiprtcResult k_success = 0, k_error_compilation = 6;
}  // namespace

struct Hiprtc::Api {
  hiprtcResult (*Version)(int*, int*);
  hiprtcResult (*CreateProgram)(hiprtcProgram*, const char*, const char*, int, const char**, const char**);
  hiprtcResult (*CompileProgram)(hiprtcProgram, int, const char**);
  hiprtcResult (*GetProgramLogSize)(hiprtcProgram, size_t*);
  hiprtcResult (*GetProgramLog)(hiprtcProgram, char*);
  hiprtcResult (*GetCodeSize)(hiprtcProgram, size_t*);
  hiprtcResult (*GetCode)(hiprtcProgram, char*);
  hiprtcResult (*DestroyProgram)(hiprtcProgram*);
  const char* (*GetErrorString)(hiprtcResult);
  int (*RuntimeGetVersion)(int*);  // hipRuntimeGetVersion: in libamdhip64 only

  void check(hiprtcResult r, const char* call) const {
    if (r != k_success) throw RuntimeError(fmt::format("{} failed: {} ({})", call, GetErrorString(r), r));
  }
};

Hiprtc::Hiprtc(DynLib lib, std::unique_ptr<Api> api) : lib_(std::move(lib)), api_(std::move(api)) {
  api_->check(api_->Version(&major_, &minor_), "hiprtcVersion");
  if (api_->RuntimeGetVersion && api_->RuntimeGetVersion(&rocm_version_) != 0) rocm_version_ = 0;
}

Hiprtc::~Hiprtc() = default;

std::unique_ptr<Hiprtc> Hiprtc::load() {
  std::vector<std::string> tried;
  // ROCm 6 and later ship hipRTC as its own library; ROCm 5 keeps it inside
  // the HIP runtime (Debian's libamdhip64-5 exports the hiprtc* symbols).
  std::optional<DynLib> lib = DynLib::open_first(
      {"libhiprtc.so.6", "libhiprtc.so", "/opt/rocm/lib/libhiprtc.so", "libamdhip64.so.6", "libamdhip64.so.5",
       "libamdhip64.so", "/opt/rocm/lib/libamdhip64.so"},
      &tried);
  if (!lib)
    throw RuntimeError(fmt::format("hipRTC not found (install libamdhip64-dev and libhiprtc-builtins5, or ROCm 6): {}",
                                   join(tried, "; ")));
  if (!lib->symbol_or_null("hiprtcCompileProgram"))
    throw RuntimeError(fmt::format("{} has no hiprtcCompileProgram", lib->path()));
  auto api = std::make_unique<Api>();
  api->Version = lib->get<decltype(api->Version)>("hiprtcVersion");
  api->CreateProgram = lib->get<decltype(api->CreateProgram)>("hiprtcCreateProgram");
  api->CompileProgram = lib->get<decltype(api->CompileProgram)>("hiprtcCompileProgram");
  api->GetProgramLogSize = lib->get<decltype(api->GetProgramLogSize)>("hiprtcGetProgramLogSize");
  api->GetProgramLog = lib->get<decltype(api->GetProgramLog)>("hiprtcGetProgramLog");
  api->GetCodeSize = lib->get<decltype(api->GetCodeSize)>("hiprtcGetCodeSize");
  api->GetCode = lib->get<decltype(api->GetCode)>("hiprtcGetCode");
  api->DestroyProgram = lib->get<decltype(api->DestroyProgram)>("hiprtcDestroyProgram");
  api->GetErrorString = lib->get<decltype(api->GetErrorString)>("hiprtcGetErrorString");
  api->RuntimeGetVersion = lib->get_or_null<decltype(api->RuntimeGetVersion)>("hipRuntimeGetVersion");
  return std::unique_ptr<Hiprtc>(new Hiprtc(std::move(*lib), std::move(api)));
}

std::string Hiprtc::version_string() const {
  if (rocm_version_ <= 0) return fmt::format("hipRTC {}.{}", major_, minor_);
  return fmt::format("hipRTC {}.{} (ROCm {}.{}.{})", major_, minor_, rocm_version_ / 10000000,
                     rocm_version_ / 100000 % 100, rocm_version_ % 100000);
}

std::string Hiprtc::layout() const {
  return lib_.name().find("amdhip64") != std::string::npos
             ? fmt::format("{} (hipRTC inside the HIP runtime, ROCm {})", lib_.name(), rocm_major())
             : lib_.name();
}

std::vector<std::string> Hiprtc::options(const AmdTarget& target, const std::vector<std::string>& extra) const {
  std::vector<std::string> o = {"-O3", "--offload-arch=" + target.str()};
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

HiprtcBinary Hiprtc::compile_in_process(const std::string& source, const std::string& name, const AmdTarget& target,
                                        const std::vector<std::string>& extra_options) const {
  const auto start = std::chrono::steady_clock::now();
  HiprtcBinary bin;
  bin.options = options(target, extra_options);
  bin.compiler = version_string();
  hiprtcProgram prog = nullptr;
  api_->check(api_->CreateProgram(&prog, source.c_str(), name.c_str(), 0, nullptr, nullptr), "hiprtcCreateProgram");
  struct Destroy {
    const Api& api;
    hiprtcProgram& p;
    ~Destroy() { api.DestroyProgram(&p); }
  } destroy{*api_, prog};
  std::vector<const char*> argv;
  for (const std::string& o : bin.options) argv.push_back(o.c_str());
  const hiprtcResult r = api_->CompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  std::size_t log_size = 0;
  if (api_->GetProgramLogSize(prog, &log_size) == k_success && log_size > 1) {
    bin.log.resize(log_size);
    if (api_->GetProgramLog(prog, bin.log.data()) != k_success) bin.log.clear();
    while (!bin.log.empty() && bin.log.back() == '\0') bin.log.pop_back();
  }
  if (r == k_error_compilation) throw CompileError(source, bin.log, bin.options, target.str(), bin.compiler);
  api_->check(r, "hiprtcCompileProgram");
  std::size_t size = 0;
  api_->check(api_->GetCodeSize(prog, &size), "hiprtcGetCodeSize");
  bin.code.resize(size);
  api_->check(api_->GetCode(prog, bin.code.data()), "hiprtcGetCode");
  bin.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return bin;
}

const Hiprtc* hiprtc_or_null() { return load_once<Hiprtc>().backend; }

std::string hiprtc_unavailable_reason() { return load_once<Hiprtc>().reason; }

const Hiprtc& hiprtc() {
  if (const Hiprtc* h = hiprtc_or_null()) return *h;
  throw RuntimeError(hiprtc_unavailable_reason());
}

std::string hiprtc_refusal(const Hiprtc& rtc, const AmdTarget& target) {
  // Seen on Debian 12's ROCm 5.2.3 (docs/amd.md): the process dies of SIGABRT
  // inside hiprtcCompileProgram for gfx1100; gfx942 and gfx12 are newer still
  // than that release's compiler knows.
  const bool too_new = target.arch.starts_with("gfx11") || target.arch.starts_with("gfx12") ||
                       target.arch.starts_with("gfx94");
  if (rtc.rocm_major() > 0 && rtc.rocm_major() < 6 && too_new)
    return fmt::format(
        "{} ({}) cannot compile for {}: ROCm 5's hipRTC aborts the process there (docs/amd.md). Install ROCm 6 or "
        "later; epifuse's compile tier checks {} code with clang-19 instead",
        rtc.version_string(), rtc.library_path(), target.str(), target.arch);
  return "";
}

}  // namespace epifuse::backend
