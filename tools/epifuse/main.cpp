// The `epifuse` command line (docs/design.md §7). Subcommands register themselves
// (commands.hpp); this file maps every failure to an exit code (docs/design.md §6) so
// that no exception escapes and nothing aborts.
#include <algorithm>
#include <csignal>
#include <cstring>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "backend/hiprtc.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/json.hpp"
#include "info.hpp"
#include "io/atomic_file.hpp"

namespace {

using namespace epifuse::cli;

// `--json` belongs to the subcommands, but a parse error can come before CLI11 has
// stored it; so for error reports the raw argument list decides.
bool json_requested(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--json") == 0) return true;
  return false;
}

struct Failure {
  int exit_code;
  const char* kind;
  std::string message;
  nlohmann::ordered_json details = nlohmann::ordered_json::object();
};

// A message quotes what the user gave (a file name, an option's value), so
// its control characters are escaped before it reaches the terminal; its own
// line breaks and tabs (a compile log, numbered source) are kept.
std::string terminal_text(std::string_view message) {
  std::string out;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = message.find_first_of("\n\t", start);
    out += printable(message.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return out;
    out += message[end];
    start = end + 1;
  }
}

int report(const Failure& f, bool json) {
  std::cerr << "epifuse: " << (std::strcmp(f.kind, "user") == 0 ? "error" : fmt::format("{} error", f.kind))
            << ": " << terminal_text(f.message) << '\n';
  if (json) {
    nlohmann::ordered_json err = {{"kind", f.kind}, {"message", f.message}};
    err.update(f.details);
    print_json({{"error", err}});
  }
  return f.exit_code;
}

int run_cli(int argc, char** argv) {
  CLI::App app{"epifuse: JIT-compiled fused GPU epilogues (GEMM + bias/activation/dropout/...)", "epifuse"};
  // The version, then the toolkits this process finds (what `epifuse info` shows).
  app.set_version_flag("--version", [] {
    std::string text = backend_text(backend_reports());
    if (!text.empty() && text.back() == '\n') text.pop_back();  // CLI11 ends the message itself
    return fmt::format("epifuse {} (JSON schema version {})\n{}", EPIFUSE_VERSION, epifuse::k_schema_version, text);
  });
  app.require_subcommand(1);
  app.fallthrough(false);
  app.footer(
      "Exit codes: 0 ok, 1 verification or benchmark target failed, 2 user error (bad chain,\n"
      "shape, option or file), 3 compile error, 4 runtime or device error, 5 an output\n"
      "(standard output, --output, --output-dir, --cubin) could not be written.\n"
      "Run 'epifuse SUBCOMMAND --help' for a subcommand's options; docs/cli.md has the full guide.");
  for (AddCommand add : k_commands) add(app);

  const bool json = json_requested(argc, argv);
  if (argc == 1) {
    std::cerr << app.help();
    return k_exit_user;
  }
  if (argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), argv[1]) == names.end())
      return report({k_exit_user, "user",
                     fmt::format("unknown subcommand '{}' (subcommands: {}; see --help)", argv[1],
                                 fmt::join(names, ", "))},
                    json);
  }
  try {
    app.parse(argc, argv);
    return session().exit_code;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    return report({k_exit_user, "user", fmt::format("{} (see --help)", e.what())}, json);
  } catch (const OutputError& e) {
    return report({k_exit_io, "io", e.what()}, json);
  } catch (const epifuse::UserError& e) {
    return report({k_exit_user, "user", e.what()}, json);
  } catch (const epifuse::CompileError& e) {
    return report({k_exit_compile, "compile", e.what(),
                   {{"target", e.target()}, {"options", e.options()}, {"log", e.log()}}},
                  json);
  } catch (const epifuse::RuntimeError& e) {
    return report({k_exit_runtime, "runtime", e.what()}, json);
  } catch (const epifuse::InternalError& e) {
    return report({k_exit_runtime, "internal", fmt::format("{} (a bug in epifuse; please report it)", e.what())},
                  json);
  } catch (const std::bad_alloc&) {
    return report({k_exit_runtime, "runtime", "out of host memory"}, json);
  } catch (const std::exception& e) {
    return report({k_exit_runtime, "internal", fmt::format("{} (a bug in epifuse; please report it)", e.what())},
                  json);
  }
}

// Every subcommand's standard output is checked here, last: output that
// never arrived (`> /dev/full`, a full disk) must not end in exit code 0. A
// failure reported already keeps its own exit code; the lost output is told too.
int check_stdout(int exit_code) {
  const std::string failure = stdout_failure();
  if (failure.empty()) return exit_code;
  std::cerr << fmt::format("epifuse: io error: standard output: write failed: {}\n", failure);
  return exit_code == k_exit_ok ? k_exit_io : exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  // The hipRTC child process (Note [hipRTC in a child process], backend/hiprtc.hpp):
  // started by epifuse itself, never listed; a request on stdin, the code object on stdout.
  if (argc == 2 && std::strcmp(argv[1], "__hiprtc-compile") == 0)
    return epifuse::backend::hiprtc_worker_main(stdin, stdout, stderr);
  // A file-size limit (ulimit -f) would otherwise kill the process with
  // SIGXFSZ mid-write; ignored, it is an EFBIG write error, which the output
  // writers report (exit code 5) after removing their temporary file.
  std::signal(SIGXFSZ, SIG_IGN);
  // Ctrl-C during a write removes the temporary file, and the destination
  // keeps its previous content (Note [Atomic output files]).
  epifuse::io::remove_temp_files_on_signal();
  int exit_code = k_exit_runtime;
  try {
    exit_code = run_cli(argc, argv);
  } catch (...) {
    // Reached only if reporting itself failed.
  }
  return check_stdout(exit_code);
}
