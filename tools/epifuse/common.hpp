#pragma once
/// What every subcommand shares: exit codes, the --json switch, argument parsers
/// that are stricter than CLI11's (shapes, uint64 seeds, NAME=FILE bindings).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "epifuse/spec.hpp"

namespace epifuse::cli {

/// Exit codes (DESIGN §6).
inline constexpr int k_exit_ok = 0;
inline constexpr int k_exit_target_failed = 1;  ///< verification or a benchmark target failed
inline constexpr int k_exit_user = 2;           ///< UserError or a command-line parse error
inline constexpr int k_exit_compile = 3;        ///< CompileError
inline constexpr int k_exit_runtime = 4;        ///< RuntimeError, device error, internal error

/// State of one invocation, set by the running subcommand.
struct Session {
  bool json = false;             ///< --json: stdout carries one JSON document only
  int exit_code = k_exit_ok;     ///< set to k_exit_target_failed by a failed check
};
Session& session();

/// Adds `--json` (bound to session().json) to a subcommand.
void add_json_flag(CLI::App& sub);

/// Prints a JSON document on stdout (indent 2, one trailing newline).
void print_json(const nlohmann::ordered_json& doc);

/// "M,N" or "M,N,K": plain decimal digits separated by commas, nothing else.
/// Checks the count against the mainloop (M,N for elementwise, M,N,K for GEMM
/// kinds) and then verify_shape. UserError naming --shape otherwise.
Shape parse_shape(std::string_view text, const KernelSpec& spec);

/// The shape of a run: --shape when given (text non-empty), else the chain's
/// "shape", else a UserError saying how to give one.
Shape resolve_shape(const std::string& text, const KernelSpec& spec);

/// An unsigned 64-bit integer in decimal or 0x hex; `option` names it in errors.
std::uint64_t parse_u64(std::string_view text, std::string_view option);

/// Splits "NAME=FILE" at the first '='; both parts must be non-empty.
std::pair<std::string, std::string> parse_binding(std::string_view text, std::string_view option);

/// The canonical signature's XXH3-64 as 16 hex digits (display and --json only;
/// cache keys compare the whole signature).
std::string signature_hash(const KernelSpec& spec);

/// "[2, 3]"
std::string shape_string(const std::vector<std::int64_t>& shape);

}  // namespace epifuse::cli
