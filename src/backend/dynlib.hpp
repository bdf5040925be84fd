#pragma once
/// A shared library opened with dlopen, closed when the handle dies.

// Note [Backends are dlopened]
// The GPU toolkits (NVRTC, the CUDA driver, hipRTC, the HIP runtime) are only ever
// reached through DynLib: the library and the CLI never link them and no header of
// ours includes theirs, so one binary builds without a toolkit and runs on a machine
// with neither, either or both, saying clearly which is missing (docs/design.md §1 Backends).
// Each backend declares the few types and entry points it uses itself, loads them
// once into a table of function pointers, and turns every failing call into an
// error value naming the call.
#include <optional>
#include <string>
#include <vector>

#include "epifuse/errors.hpp"

namespace epifuse::backend {

/// CUDA toolkit library folders to try by full path after the loader's own
/// search ($CUDA_HOME/lib64, $CUDA_PATH/lib64, /usr/local/cuda/...): a toolkit
/// under /usr/local/cuda is often not on the loader's path.
std::vector<std::string> cuda_toolkit_lib_dirs();

class DynLib {
 public:
  /// Opens the first of `candidates` that loads (each a bare soname, searched the
  /// dynamic loader's way, or a full path). Returns nullopt if none loads; `tried`
  /// then receives one line per candidate with dlerror()'s reason.
  static std::optional<DynLib> open_first(const std::vector<std::string>& candidates,
                                          std::vector<std::string>* tried = nullptr);

  DynLib(DynLib&& other) noexcept;
  DynLib& operator=(DynLib&& other) noexcept;
  DynLib(const DynLib&) = delete;
  DynLib& operator=(const DynLib&) = delete;
  ~DynLib();

  /// The address of `name`, or nullptr when the library lacks it.
  void* symbol_or_null(const char* name) const;
  /// The address of `name`; throws RuntimeError naming the symbol and the library.
  void* symbol(const char* name) const;

  /// Typed lookups: `auto f = lib.get<int (*)(int*)>("nvrtcVersion");`
  template <class Fn>
  Fn get(const char* name) const { return reinterpret_cast<Fn>(symbol(name)); }
  template <class Fn>
  Fn get_or_null(const char* name) const { return reinterpret_cast<Fn>(symbol_or_null(name)); }

  /// The name it was opened with ("libnvrtc.so.13").
  const std::string& name() const { return name_; }
  /// The resolved file the loader picked, symlinks followed
  /// ("/usr/local/cuda-13.0/targets/x86_64-linux/lib/libnvrtc.so.13.0.48").
  const std::string& path() const { return path_; }

 private:
  DynLib(void* handle, std::string name, std::string path)
      : handle_(handle), name_(std::move(name)), path_(std::move(path)) {}
  void* handle_ = nullptr;
  std::string name_, path_;
};

/// A backend (Nvrtc, CudaDriver) loaded on first use, once per process, or the
/// reason it could not be: `T::load()` returns a std::unique_ptr<T> or throws an
/// Error. Deliberately never destroyed, so that no static destructor can run
/// after the library has been closed.
template <class T>
struct LoadedOnce {
  T* backend = nullptr;
  std::string reason;  ///< why `backend` is null
};

template <class T>
const LoadedOnce<T>& load_once() {
  static const LoadedOnce<T>* s = [] {
    auto* s = new LoadedOnce<T>;
    try {
      s->backend = T::load().release();
    } catch (const Error& e) {
      s->reason = e.what();
    }
    return s;
  }();
  return *s;
}

/// "a, b, c": joins `items` for messages.
std::string join(const std::vector<std::string>& items, const std::string& sep = ", ");

}  // namespace epifuse::backend
