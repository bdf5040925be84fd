#include "backend/nvrtc.hpp"

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "epifuse/errors.hpp"

namespace epifuse::backend {

namespace {

// The NVRTC ABI we use, declared here so that no NVRTC header is needed to build.
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;
constexpr nvrtcResult NVRTC_SUCCESS = 0;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

const std::vector<std::string>& nvrtc_sonames() {
  static const std::vector<std::string> names = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  return names;
}


// Bare sonames first (LD_LIBRARY_PATH, the ld.so cache, RUNPATH), then by full path.
std::vector<std::string> nvrtc_candidates() {
  std::vector<std::string> out = nvrtc_sonames();
  for (const auto& d : cuda_toolkit_lib_dirs())
    for (const auto& n : nvrtc_sonames()) out.push_back(d + "/" + n);
  return out;
}

bool has_fp16_header(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(dir / "cuda_fp16.h", ec);
}

std::optional<std::string> find_cuda_include_dir(const std::string& nvrtc_path) {
  namespace fs = std::filesystem;
  std::vector<fs::path> dirs;
  if (auto home = env("CUDA_HOME"); !home.empty()) dirs.emplace_back(fs::path(home) / "include");
  dirs.emplace_back("/usr/local/cuda/include");
  if (!nvrtc_path.empty()) {
    fs::path libdir = fs::path(nvrtc_path).parent_path();
    dirs.push_back(libdir / ".." / "include");  // <toolkit>/lib64 -> <toolkit>/include
    // pip wheels: nvidia/cuda_nvrtc/lib/libnvrtc.so.N, headers in nvidia/cuda_runtime/include
    dirs.push_back(libdir / ".." / ".." / "cuda_runtime" / "include");
  }
  dirs.emplace_back("/usr/local/cuda/targets/x86_64-linux/include");
  for (const auto& d : dirs) {
    if (!has_fp16_header(d)) continue;
    std::error_code ec;
    fs::path canon = fs::canonical(d, ec);
    return (ec ? d.lexically_normal() : canon).string();
  }
  return std::nullopt;
}

}  // namespace

struct Nvrtc::Api {
  const char* (*GetErrorString)(nvrtcResult);
  nvrtcResult (*Version)(int*, int*);
  nvrtcResult (*GetNumSupportedArchs)(int*);
  nvrtcResult (*GetSupportedArchs)(int*);
  nvrtcResult (*CreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                               const char* const*);
  nvrtcResult (*DestroyProgram)(nvrtcProgram*);
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char*);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char*);

  explicit Api(const DynLib& lib)
      : GetErrorString(lib.get<decltype(GetErrorString)>("nvrtcGetErrorString")),
        Version(lib.get<decltype(Version)>("nvrtcVersion")),
        GetNumSupportedArchs(lib.get<decltype(GetNumSupportedArchs)>("nvrtcGetNumSupportedArchs")),
        GetSupportedArchs(lib.get<decltype(GetSupportedArchs)>("nvrtcGetSupportedArchs")),
        CreateProgram(lib.get<decltype(CreateProgram)>("nvrtcCreateProgram")),
        DestroyProgram(lib.get<decltype(DestroyProgram)>("nvrtcDestroyProgram")),
        CompileProgram(lib.get<decltype(CompileProgram)>("nvrtcCompileProgram")),
        GetProgramLogSize(lib.get<decltype(GetProgramLogSize)>("nvrtcGetProgramLogSize")),
        GetProgramLog(lib.get<decltype(GetProgramLog)>("nvrtcGetProgramLog")),
        GetCUBINSize(lib.get<decltype(GetCUBINSize)>("nvrtcGetCUBINSize")),
        GetCUBIN(lib.get<decltype(GetCUBIN)>("nvrtcGetCUBIN")) {}

  // Throws RuntimeError("nvrtcX failed: NVRTC_ERROR_Y") for a failing call.
  void check(nvrtcResult r, const char* call) const {
    if (r != NVRTC_SUCCESS)
      throw RuntimeError(fmt::format("{} failed: {} ({})", call, GetErrorString(r), r));
  }
};

Nvrtc::Nvrtc(DynLib lib) : lib_(std::move(lib)), api_(std::make_unique<Api>(lib_)) {
  api_->check(api_->Version(&major_, &minor_), "nvrtcVersion");
  int n = 0;
  api_->check(api_->GetNumSupportedArchs(&n), "nvrtcGetNumSupportedArchs");
  archs_.resize(static_cast<size_t>(n));
  if (n > 0) api_->check(api_->GetSupportedArchs(archs_.data()), "nvrtcGetSupportedArchs");
  include_dir_ = find_cuda_include_dir(lib_.path());
}

Nvrtc::~Nvrtc() = default;

std::unique_ptr<Nvrtc> Nvrtc::load() {
  std::vector<std::string> tried;
  std::optional<DynLib> lib = DynLib::open_first(nvrtc_candidates(), &tried);
  if (!lib)
    throw RuntimeError(fmt::format(
        "libnvrtc.so.13/.12 not found (searched {} on the loader path and in {}): emit still "
        "works; compile/run need the CUDA toolkit's NVRTC (install it, or set CUDA_HOME or "
        "LD_LIBRARY_PATH)",
        join(nvrtc_sonames()), join(cuda_toolkit_lib_dirs())));
  return std::unique_ptr<Nvrtc>(new Nvrtc(std::move(*lib)));
}

std::string Nvrtc::version_string() const { return fmt::format("NVRTC {}.{}", major_, minor_); }

void Nvrtc::add_header(std::string include_name, std::string text) {
  std::lock_guard lock(headers_mutex_);
  headers_[std::move(include_name)] = std::move(text);
}

std::vector<std::string> Nvrtc::default_options(const Target& target) const {
  std::vector<std::string> opts = {"-std=c++17", nvrtc_arch_option(target), "-default-device"};
  // --minimal (NVRTC 12.4+) leaves texture, surface and device-runtime
  // declarations out of NVRTC's built-in header: a few ms per compile, and
  // kernels use none of them.
  if (major_ > 12 || (major_ == 12 && minor_ >= 4)) opts.push_back("--minimal");
  if (include_dir_) opts.push_back("-I" + *include_dir_);
  return opts;
}

std::vector<std::string> Nvrtc::options(const Target& target, const std::vector<std::string>& extra) const {
  std::vector<std::string> all = default_options(target);
  all.insert(all.end(), extra.begin(), extra.end());
  return all;
}

CompiledBinary Nvrtc::compile(const std::string& source, const std::string& name,
                              const Target& target, std::vector<std::string> extra_options,
                              const std::vector<Header>& headers) const {
  bool supported = false;
  for (int a : archs_) supported = supported || a == target.sm();
  if (!supported) {
    std::vector<std::string> names;
    for (int a : archs_) names.push_back(fmt::format("sm_{}", a));
    throw UserError(fmt::format("target {} is not supported by {} (it compiles for {})",
                                target.str(), version_string(), join(names)));
  }

  CompiledBinary out;
  out.target = target;
  out.compiler = version_string();
  out.options = options(target, extra_options);

  // Snapshot the headers so that the lock is not held while NVRTC runs.
  std::map<std::string, std::string> all_headers;
  {
    std::lock_guard lock(headers_mutex_);
    all_headers = headers_;
  }
  for (const auto& h : headers) all_headers[h.name] = h.text;
  std::vector<const char*> header_texts, header_names, option_ptrs;
  for (const auto& [n, text] : all_headers) {
    header_names.push_back(n.c_str());
    header_texts.push_back(text.c_str());
  }
  for (const auto& o : out.options) option_ptrs.push_back(o.c_str());

  const auto t0 = std::chrono::steady_clock::now();
  nvrtcProgram prog = nullptr;
  api_->check(api_->CreateProgram(&prog, source.c_str(), name.c_str(),
                                  static_cast<int>(header_texts.size()), header_texts.data(),
                                  header_names.data()),
              "nvrtcCreateProgram");
  // Destroys the program on every path out of here.
  struct Destroy {
    const Api* api;
    nvrtcProgram* p;
    ~Destroy() { api->DestroyProgram(p); }
  } destroy{api_.get(), &prog};

  const nvrtcResult status =
      api_->CompileProgram(prog, static_cast<int>(option_ptrs.size()), option_ptrs.data());
  size_t log_size = 0;
  api_->check(api_->GetProgramLogSize(prog, &log_size), "nvrtcGetProgramLogSize");
  if (log_size > 1) {
    out.log.resize(log_size);
    api_->check(api_->GetProgramLog(prog, out.log.data()), "nvrtcGetProgramLog");
    while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n'))
      out.log.pop_back();
  }
  if (status != NVRTC_SUCCESS) {
    std::string log = out.log.empty()
                          ? fmt::format("nvrtcCompileProgram: {}", api_->GetErrorString(status))
                          : fmt::format("{}\n(nvrtcCompileProgram: {})", out.log,
                                        api_->GetErrorString(status));
    throw CompileError(source, std::move(log), out.options, target.str(), out.compiler);
  }

  size_t cubin_size = 0;
  api_->check(api_->GetCUBINSize(prog, &cubin_size), "nvrtcGetCUBINSize");
  if (cubin_size == 0)
    throw RuntimeError(fmt::format("{} produced no cubin for {}", out.compiler, target.str()));
  out.cubin.resize(cubin_size);
  api_->check(api_->GetCUBIN(prog, out.cubin.data()), "nvrtcGetCUBIN");
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

Nvrtc* nvrtc_or_null() { return load_once<Nvrtc>().backend; }

Nvrtc& nvrtc() {
  const auto& s = load_once<Nvrtc>();
  if (!s.backend) throw RuntimeError(s.reason);
  return *s.backend;
}

const std::string& nvrtc_unavailable_reason() { return load_once<Nvrtc>().reason; }

std::optional<std::string> cuda_include_dir() {
  if (const Nvrtc* n = nvrtc_or_null()) return n->include_dir();
  return find_cuda_include_dir("");
}

}  // namespace epifuse::backend
