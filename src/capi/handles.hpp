#pragma once
// What both halves of the C ABI share (c_api.cpp: specs, JSON and the CPU
// reference; c_api_jit.cpp: compiling and launching): the opaque handles'
// definitions, `guarded`, which turns the C++ API's exceptions into status
// codes, the checks of a C argument, and a spec's snapshot.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "epifuse/c_api.h"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/spec.hpp"

// A spec shared by whoever holds its handle: builder calls lock it
// exclusively, readers shared (Note [One spec, many threads] in c_api.cpp).
struct ef_spec {
  epifuse::KernelSpec spec;
  mutable std::shared_mutex mutex;
};
struct ef_jit {
  std::unique_ptr<epifuse::Jit> jit;
  std::string target;
};
struct ef_kernel {
  std::shared_ptr<const epifuse::CompiledKernel> kernel;
  std::size_t operands = 0;  // its GEMM operands, the first bindings: where a launch's ld record turns to the chain's
};

namespace epifuse::capi {

using Json = nlohmann::ordered_json;

// The message of this thread's last failed call, for ef_last_error().
inline thread_local std::string last_error;

// Runs `fn`, mapping the C++ API's exceptions to the CLI's exit codes
// (docs/design.md §6) and keeping the message for ef_last_error().
template <class Fn>
int guarded(Fn&& fn) noexcept {
  try {
    fn();
    last_error.clear();
    return EF_OK;
  } catch (const UserError& e) {
    last_error = e.what();
    return EF_USER_ERROR;
  } catch (const CompileError& e) {
    last_error = e.what();
    return EF_COMPILE_ERROR;
  } catch (const RuntimeError& e) {
    last_error = e.what();
    return EF_RUNTIME_ERROR;
  } catch (const InternalError& e) {
    last_error = fmt::format("internal error (a bug in epifuse): {}", e.what());
    return EF_RUNTIME_ERROR;
  } catch (const std::bad_alloc&) {
    last_error = "out of host memory";
    return EF_RUNTIME_ERROR;
  } catch (const std::exception& e) {
    last_error = fmt::format("unexpected error (a bug in epifuse): {}", e.what());
    return EF_RUNTIME_ERROR;
  } catch (...) {
    last_error = "unexpected error (a bug in epifuse)";
    return EF_RUNTIME_ERROR;
  }
}

// A heap copy the caller frees with ef_string_free.
inline char* c_string(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (!out) throw std::bad_alloc();
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

inline void require(const void* p, const char* what) {
  if (!p) throw UserError(fmt::format("{} is NULL", what));
}

// An array the caller passes with its length: NULL is fine only when empty.
inline void require_array(const void* p, std::size_t count, const char* what) {
  if (!p && count > 0) throw UserError(fmt::format("{} is NULL but its count is {}", what, count));
}

// The spec as it is now, for work done without the lock (Note [One spec, many threads]).
inline KernelSpec snapshot(const ef_spec* s) {
  std::shared_lock lock(s->mutex);
  return s->spec;
}

inline Shape make_shape(const KernelSpec& spec, std::int64_t m, std::int64_t n, std::int64_t k) {
  const Shape shape{m, n, spec.mainloop.kind == MainloopKind::elementwise ? 0 : k};
  verify_shape(spec, shape);
  return shape;
}

}  // namespace epifuse::capi
