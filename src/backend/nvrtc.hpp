#pragma once
/// NVRTC, loaded with dlopen (Note [Backends are dlopened] in dynlib.hpp).
///
///   Nvrtc& rtc = nvrtc();                      // throws RuntimeError if absent
///   CompiledBinary bin = rtc.compile(src, "bias_gelu.cu", parse_target("sm_90a"));
///   // bin.cubin -> CudaDriver::load_module
///
/// compile() is safe to call from several threads at once: each call owns its NVRTC
/// program, and the registered headers are read under a lock.
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/dynlib.hpp"
#include "backend/header.hpp"
#include "backend/target.hpp"

namespace epifuse::backend {

/// What one NVRTC compilation produced.
struct CompiledBinary {
  std::vector<char> cubin;           ///< ELF bytes, loadable with cuModuleLoadData
  std::string log;                   ///< NVRTC's log (warnings), possibly empty
  std::vector<std::string> options;  ///< every option passed, in order
  Target target;
  std::string compiler;              ///< "NVRTC 13.0"
  double compile_ms = 0;             ///< wall time of create + compile + get cubin
};

class Nvrtc {
 public:
  /// Loads NVRTC; throws RuntimeError naming what was searched when it is absent.
  /// Prefer the process-wide nvrtc() / nvrtc_or_null().
  static std::unique_ptr<Nvrtc> load();

  int major() const { return major_; }
  int minor() const { return minor_; }
  /// "NVRTC 13.0": the compiler string for CompileError and cache keys.
  std::string version_string() const;
  /// The libnvrtc file in use, symlinks resolved.
  const std::string& library_path() const { return lib_.path(); }
  /// The CUDA include directory passed as -I (the first with cuda_fp16.h), if any.
  const std::optional<std::string>& include_dir() const { return include_dir_; }
  /// Real architectures this NVRTC compiles for, as major*10+minor (75, 80, ..., 120).
  const std::vector<int>& supported_archs() const { return archs_; }

  /// Registers `text` under `include_name` for every later compile (process-wide).
  /// Registering a name again replaces its text.
  void add_header(std::string include_name, std::string text);

  /// The options compile() passes for `target`, before `extra` is appended:
  /// -std=c++17, --gpu-architecture=sm_XX, -default-device, -I<cuda include dir>.
  /// Fast math is not on by default (docs/design.md §3 precision policy).
  std::vector<std::string> default_options(const Target& target) const;

  /// Every option compile() passes for `target` with `extra`: default_options, then
  /// `extra`. The one place the list is put together (cache keys use it too).
  std::vector<std::string> options(const Target& target, const std::vector<std::string>& extra) const;

  /// Compiles `source` (shown as `name` in diagnostics) to a cubin for `target`.
  /// `headers` are added to the registered ones (and win on a name clash).
  /// Throws UserError when this NVRTC does not support `target`, CompileError (log,
  /// options, numbered source) when the source does not compile, RuntimeError when
  /// NVRTC itself fails.
  CompiledBinary compile(const std::string& source, const std::string& name, const Target& target,
                         std::vector<std::string> extra_options = {},
                         const std::vector<Header>& headers = {}) const;

  struct Api;  // the NVRTC entry points (nvrtc.cpp)
  ~Nvrtc();

 private:
  Nvrtc(DynLib lib);
  DynLib lib_;
  std::unique_ptr<Api> api_;
  int major_ = 0, minor_ = 0;
  std::vector<int> archs_;
  std::optional<std::string> include_dir_;
  mutable std::mutex headers_mutex_;
  std::map<std::string, std::string> headers_;
};

/// The process-wide NVRTC, loaded on first use; nullptr when it cannot be loaded.
Nvrtc* nvrtc_or_null();
/// The process-wide NVRTC; throws RuntimeError saying what is missing:
/// "libnvrtc.so.13/.12 not found (searched ...): emit still works; compile/run need
/// the CUDA toolkit's NVRTC".
Nvrtc& nvrtc();
/// Why nvrtc_or_null() is null; empty when NVRTC loaded.
const std::string& nvrtc_unavailable_reason();

/// The CUDA include directory (the first holding cuda_fp16.h) among $CUDA_HOME/include,
/// /usr/local/cuda/include, ../include next to the loaded libnvrtc,
/// /usr/local/cuda/targets/x86_64-linux/include. nullopt if none has it.
std::optional<std::string> cuda_include_dir();

}  // namespace epifuse::backend
