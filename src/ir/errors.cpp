#include "epifuse/errors.hpp"

#include <sstream>

namespace epifuse {

std::string number_lines(const std::string& source) {
  std::istringstream in(source);
  std::string line, out;
  for (int n = 1; std::getline(in, line); ++n) out += fmt::format("{:5} | {}\n", n, line);
  return out;
}

static std::string compile_message(const std::string& source, const std::string& log,
                                   const std::vector<std::string>& options,
                                   const std::string& target, const std::string& compiler) {
  std::string opts;
  for (const auto& o : options) opts += (opts.empty() ? "" : " ") + o;
  return fmt::format(
      "{} failed to compile generated kernel for target {}\n"
      "options: {}\n---- log ----\n{}\n---- source ----\n{}"
      "(this is a bug in epifuse; please report it with the source above)",
      compiler, target, opts, log, number_lines(source));
}

CompileError::CompileError(std::string source, std::string log, std::vector<std::string> options,
                           std::string target, std::string compiler)
    : Error(compile_message(source, log, options, target, compiler)),
      source_(std::move(source)),
      log_(std::move(log)),
      target_(std::move(target)),
      options_(std::move(options)) {}

}  // namespace epifuse
