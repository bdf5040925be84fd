#pragma once
/// hipRTC, loaded with dlopen (Note [Backends are dlopened]), and AMD targets
/// (docs/amd.md).
///
///   const AmdTarget t = parse_amd_target("gfx90a:xnack-");
///   HiprtcBinary bin = compile_hip_isolated(source, "k.hip", t);  // in a child process
///
/// Note [hipRTC in a child process]
/// Debian's ROCm 5.2.3 hipRTC aborts the whole process inside
/// hiprtcCompileProgram for some targets (gfx1100, gfx942: "munmap_chunk():
/// invalid pointer", SIGABRT). A compile therefore never runs in the caller:
/// compile_hip_isolated starts the CLI's hidden `epifuse __hiprtc-compile` with
/// posix_spawn (the tuner compiles from several threads, where fork is unsafe),
/// sends it the request on stdin and reads the code object from stdout. A child
/// that dies by a signal is a CompileError naming the signal and the hipRTC
/// version; a known-bad (version, target) pair is refused before any child runs
/// (UserError). A child still running after hiprtc_timeout_s() is killed
/// (SIGKILL), reaped, and a CompileError saying so. A child that exits 0 must
/// have written an AMDGPU code object for the target (code_object.hpp) and
/// nothing else; anything else is a CompileError, so the Jit never loads or
/// stores it. Only the child calls Hiprtc::compile_in_process.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/dynlib.hpp"
#include "backend/header.hpp"

namespace epifuse::backend {

/// An AMD GPU architecture with its feature suffixes: "gfx90a", "gfx90a:xnack-",
/// "gfx942:sramecc+:xnack-". The whole string is part of a cache key: a code
/// object built for xnack- does not load on an xnack+ device.
struct AmdTarget {
  std::string arch;                   ///< "gfx90a"
  std::vector<std::string> features;  ///< "xnack-", "sramecc+", in the order given
  std::string str() const;            ///< "gfx90a:xnack-"
  /// 64 on gfx9 (CDNA: gfx90a, gfx942), 32 on gfx10, gfx11, gfx12 (RDNA).
  int wave_size() const;
  friend bool operator==(const AmdTarget&, const AmdTarget&) = default;
};

/// The architectures epifuse accepts (docs/amd.md).
const std::vector<std::string>& amd_archs();

/// Parses "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1201"; the CDNA two
/// optionally with ":xnack+", ":xnack-", ":sramecc+", ":sramecc-" (each feature
/// at most once; RDNA parts have neither).
/// UserError naming the accepted forms otherwise.
AmdTarget parse_amd_target(const std::string& text);

/// What one hipRTC compilation produced.
struct HiprtcBinary {
  std::vector<char> code;            ///< the code object (ELF)
  std::string log;                   ///< hipRTC's log, possibly empty
  std::vector<std::string> options;  ///< every option passed, in order
  std::string compiler;              ///< "hipRTC 9.0 (ROCm 5.2.21153)"
  double compile_ms = 0;             ///< wall time, the child's start included
};

class Hiprtc {
 public:
  /// Loads hipRTC: libhiprtc.so (ROCm 6 and later) or, where hipRTC lives inside
  /// the runtime, libamdhip64.so (ROCm 5). RuntimeError naming what was tried.
  static std::unique_ptr<Hiprtc> load();

  /// "hipRTC 9.0 (ROCm 5.2.21153)": hiprtcVersion, and the HIP runtime's version
  /// where the library has hipRuntimeGetVersion (it answers without a GPU).
  std::string version_string() const;
  /// ROCm's major version (5 for 5.2.21153), 0 when unknown.
  int rocm_major() const { return rocm_version_ / 10000000; }
  const std::string& library_path() const { return lib_.path(); }
  /// "libamdhip64.so.5 (hipRTC inside the HIP runtime, ROCm 5)" or "libhiprtc.so.6".
  std::string layout() const;

  /// The options compile_in_process passes: -O3, --offload-arch=<target>, then `extra`.
  std::vector<std::string> options(const AmdTarget& target, const std::vector<std::string>& extra) const;

  /// Compiles in this process. Only the `__hiprtc-compile` child calls it (Note
  /// [hipRTC in a child process]). CompileError with the log when the source
  /// does not compile.
  HiprtcBinary compile_in_process(const std::string& source, const std::string& name, const AmdTarget& target,
                                  const std::vector<std::string>& extra_options = {}) const;

  struct Api;  // the hipRTC entry points (hiprtc.cpp)
  ~Hiprtc();

 private:
  Hiprtc(DynLib lib, std::unique_ptr<Api> api);
  DynLib lib_;
  std::unique_ptr<Api> api_;
  int major_ = 0, minor_ = 0;
  int rocm_version_ = 0;  ///< hipRuntimeGetVersion: 50221153 for 5.2.21153
};

/// The process-wide hipRTC, loaded on first use; throws RuntimeError if absent.
const Hiprtc& hiprtc();
/// nullptr when hipRTC cannot be loaded; hiprtc_unavailable_reason() says why.
const Hiprtc* hiprtc_or_null();
std::string hiprtc_unavailable_reason();

/// Why this hipRTC must not be asked to compile for `target` (the installed
/// version is known to abort the process there), or "" when it may.
std::string hiprtc_refusal(const Hiprtc& rtc, const AmdTarget& target);

/// `source` with each `#include "NAME"` of a header in `headers` replaced by
/// its text, recursively, each header once (they all say #pragma once): the
/// child gets one self-contained source.
std::string inline_headers(const std::string& source, const std::vector<Header>& headers);

/// Compiles `source` for `target` in a child process (Note [hipRTC in a child
/// process]). UserError for a refused (version, target) pair or a bad
/// EPIFUSE_HIPRTC_TIMEOUT_S; CompileError for a source that does not compile, a
/// child that dies, runs past the timeout, or writes something that is not a
/// code object for `target`; RuntimeError when no worker can be started. The
/// worker is EPIFUSE_HIPRTC_WORKER if set, else find_hiprtc_worker for the
/// shared library holding this code (libepifuse_c.so under Python), then for
/// this process's executable.
HiprtcBinary compile_hip_isolated(const std::string& source, const std::string& name, const AmdTarget& target,
                                  const std::vector<std::string>& extra_options = {});

/// How long a hipRTC child may take, in seconds: EPIFUSE_HIPRTC_TIMEOUT_S (a
/// positive number; UserError otherwise) or k_hiprtc_timeout_s. A GEMM compiles
/// in seconds; the default only ends a child that hangs.
inline constexpr double k_hiprtc_timeout_s = 120;
double hiprtc_timeout_s();

/// The worker for a process whose executable is `self` (EPIFUSE_HIPRTC_WORKER
/// unset): the first that exists of `self` when it is the CLI (named `epifuse`),
/// `epifuse` beside `self`, `epifuse` in `self`'s ../bin (a program installed
/// under the CLI's prefix, e.g. in libexec/), and `install_bindir`/epifuse (the
/// installed CLI; the library passes CMAKE_INSTALL_FULL_BINDIR as configured,
/// since a static library cannot find itself). RuntimeError naming every path
/// tried and EPIFUSE_HIPRTC_WORKER when none exists.
std::filesystem::path find_hiprtc_worker(const std::filesystem::path& self, const std::filesystem::path& install_bindir);

/// The child's side: reads a request from `in`, compiles, writes the code object
/// to `out` and the log to `log`. Returns the process exit code: 0 compiled,
/// 3 the source did not compile, 2 a bad request or target, 4 hipRTC missing.
int hiprtc_worker_main(std::FILE* in, std::FILE* out, std::FILE* log);

}  // namespace epifuse::backend
