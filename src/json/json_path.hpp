#pragma once
// JSON paths for error messages (`ops[2].p`, `inputs.bias.broadcast`, `(root)`),
// and the one way the JSON layer fails: a JsonError located at a path.
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "epifuse/errors.hpp"
#include "epifuse/json.hpp"

namespace epifuse::schema {

/// The location of a value in a JSON document, rendered as it is written in messages.
class JsonPath {
 public:
  JsonPath() = default;  ///< the document itself
  /// `.k`, or `["k k"]` when k is no identifier; a key longer than
  /// names::k_excerpt_length is quoted and cut (`["kkkk..."]`).
  JsonPath key(std::string_view k) const;
  JsonPath index(std::size_t i) const;      ///< `[i]`
  /// `(root)` for the document itself.
  std::string str() const { return text_.empty() ? "(root)" : text_; }

 private:
  explicit JsonPath(std::string text) : text_(std::move(text)) {}
  std::string text_;
};

/// Throws JsonError at `at`.
[[noreturn]] void fail(const JsonPath& at, std::string message);

template <class... Args>
[[noreturn]] void fail(const JsonPath& at, fmt::format_string<Args...> f, Args&&... args) {
  fail(at, fmt::format(f, std::forward<Args>(args)...));
}

/// Runs `fn` (typically a Graph builder call, which validates its operands);
/// a UserError it throws is re-thrown as a JsonError at `at`. A JsonError
/// already carries its path and passes through unchanged.
template <class Fn>
decltype(auto) at_path(const JsonPath& at, Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const JsonError&) {
    throw;
  } catch (const UserError& e) {
    fail(at, std::string(e.what()));
  }
}

}  // namespace epifuse::schema
