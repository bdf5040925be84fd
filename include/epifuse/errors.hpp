#pragma once
/// Error channels (docs/design.md §6).
///
/// - UserError:    bad graph, JSON, shape, dtype, option or target. The message
///                 names where (a JSON path or a node).
/// - CompileError: the backend rejected generated source; carries the full log,
///                 options, target and source. A bug in epifuse.
/// - RuntimeError: a driver, launch or I/O failure with the call's name.
/// - InternalError: a broken invariant inside epifuse (EPIFUSE_ASSERT).
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace epifuse {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class UserError : public Error {
 public:
  using Error::Error;
};

class CompileError : public Error {
 public:
  CompileError(std::string source, std::string log, std::vector<std::string> options,
               std::string target, std::string compiler);
  const std::string& source() const { return source_; }
  const std::string& log() const { return log_; }
  const std::vector<std::string>& options() const { return options_; }
  const std::string& target() const { return target_; }

 private:
  std::string source_, log_, target_;
  std::vector<std::string> options_;
};

class RuntimeError : public Error {
 public:
  using Error::Error;
};

class InternalError : public Error {
 public:
  using Error::Error;
};

/// Numbers every line of `source` ("  12 | text"), as compile errors show it.
std::string number_lines(const std::string& source);

}  // namespace epifuse

/// User-input check: throws UserError with a formatted message.
#define EPIFUSE_CHECK(cond, ...)                                  \
  do {                                                            \
    if (!(cond)) throw ::epifuse::UserError(fmt::format(__VA_ARGS__)); \
  } while (0)

/// Internal invariant: throws InternalError naming the file and line.
#define EPIFUSE_ASSERT(cond, ...)                                               \
  do {                                                                          \
    if (!(cond))                                                                \
      throw ::epifuse::InternalError(fmt::format("internal error at {}:{}: {}", \
                                                 __FILE__, __LINE__,            \
                                                 fmt::format(__VA_ARGS__)));    \
  } while (0)
