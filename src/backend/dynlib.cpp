#include "backend/dynlib.hpp"

#include <dlfcn.h>
#include <link.h>

#include <climits>
#include <cstdlib>
#include <utility>

#include "epifuse/errors.hpp"

namespace epifuse::backend {

std::vector<std::string> cuda_toolkit_lib_dirs() {
  std::vector<std::string> dirs;
  auto add = [&](std::string d) {
    for (const auto& x : dirs)
      if (x == d) return;
    dirs.push_back(std::move(d));
  };
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(var); v && *v) add(std::string(v) + "/lib64");
  add("/usr/local/cuda/lib64");
  add("/usr/local/cuda/targets/x86_64-linux/lib");
  return dirs;
}

namespace {

// The file the loader actually mapped for `handle`, with symlinks resolved; falls
// back to the name it was opened with.
std::string resolved_path(void* handle, const std::string& fallback) {
  struct link_map* map = nullptr;
  std::string path = fallback;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name)
    path = map->l_name;
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf)) path = buf;
  return path;
}

}  // namespace

std::optional<DynLib> DynLib::open_first(const std::vector<std::string>& candidates,
                                         std::vector<std::string>* tried) {
  for (const auto& name : candidates) {
    dlerror();  // clear
    // RTLD_LOCAL: keep the toolkit's symbols out of the global namespace so that a
    // process which also links its own CUDA (PyTorch) sees no clash.
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) return DynLib(h, name, resolved_path(h, name));
    if (tried) {
      const char* err = dlerror();
      tried->push_back(err ? std::string(err) : name + ": not loadable");
    }
  }
  return std::nullopt;
}

DynLib::DynLib(DynLib&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)),
      name_(std::move(other.name_)),
      path_(std::move(other.path_)) {}

DynLib& DynLib::operator=(DynLib&& other) noexcept {
  if (this != &other) {
    if (handle_) dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    name_ = std::move(other.name_);
    path_ = std::move(other.path_);
  }
  return *this;
}

DynLib::~DynLib() {
  if (handle_) dlclose(handle_);
}

void* DynLib::symbol_or_null(const char* name) const {
  return handle_ ? dlsym(handle_, name) : nullptr;
}

void* DynLib::symbol(const char* name) const {
  void* p = symbol_or_null(name);
  if (!p)
    throw RuntimeError(fmt::format("symbol {} not found in {} ({}): the library is too old or "
                                   "not the one expected",
                                   name, name_, path_));
  return p;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace epifuse::backend
