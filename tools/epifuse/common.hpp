#pragma once
/// What every subcommand shares: exit codes, the --json switch, argument parsers
/// that are stricter than CLI11's (shapes, uint64 seeds, NAME=FILE bindings),
/// and checked output (stdout, .npy files).
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "epifuse/errors.hpp"
#include "epifuse/spec.hpp"
#include "epifuse/tensor.hpp"

namespace epifuse::cli {

/// Exit codes (docs/design.md §6).
inline constexpr int k_exit_ok = 0;
inline constexpr int k_exit_target_failed = 1;  ///< verification or a benchmark target failed
inline constexpr int k_exit_user = 2;           ///< UserError or a command-line parse error
inline constexpr int k_exit_compile = 3;        ///< CompileError
inline constexpr int k_exit_runtime = 4;        ///< RuntimeError, device error, internal error
inline constexpr int k_exit_io = 5;             ///< an output could not be written (OutputError, stdout)

/// A result that could not be written where the user asked: standard output,
/// --output, --output-dir or --cubin (a full disk, /dev/full, a closed pipe).
/// main maps it to k_exit_io and the --json error kind "io".
class OutputError : public Error {
 public:
  using Error::Error;
};

/// State of one invocation, set by the running subcommand.
struct Session {
  bool json = false;             ///< --json: stdout carries one JSON document only
  int exit_code = k_exit_ok;     ///< set to k_exit_target_failed by a failed check
};
Session& session();

/// Adds `--json` (bound to session().json) to a subcommand.
void add_json_flag(CLI::App& sub);

/// Prints text on stdout and flushes it, remembering why the first failed
/// write failed; every subcommand's output goes through here or print_json.
void print_text(std::string_view text);
/// Prints a JSON document on stdout (indent 2, one trailing newline).
void print_json(const nlohmann::ordered_json& doc);

/// Flushes standard output and says why a write to it failed since the start
/// ("No space left on device"), or returns an empty string when none did.
/// main calls it last, so every subcommand's output is checked.
std::string stdout_failure();

/// write_npy for an output the user asked for: any failure to open, write or
/// close the file is an OutputError naming it.
void write_output_npy(const std::filesystem::path& path, const HostTensor& t);

/// The files one command will write, gathered before any work so that two of
/// them that are one file are refused (UserError) instead of one silently
/// overwriting the other: the same path twice, `./F` and `F`, `D/../D/F`,
/// a symbolic link and the file it names, two hard links of one file.
class OutputFiles {
 public:
  /// Adds `path`, written for `what` (how the user asked for it, e.g.
  /// "--output y=out.npy"). UserError naming both when it is the same file
  /// as one added before.
  void add(std::string what, const std::filesystem::path& path);

 private:
  struct Entry {
    std::string what;
    std::filesystem::path resolved;  // absolute, links followed, normalized
    bool exists = false;
    std::uint64_t device = 0, inode = 0;  // when it exists
  };
  std::vector<Entry> entries_;
};

/// A user's string (a file name, a chain name) as human-readable output shows
/// it: control characters escaped (names::printable), so that a name cannot
/// drive the terminal. JSON output needs none of this: its writer escapes them.
std::string printable(std::string_view s);

/// A validator for options whose empty value would otherwise mean "not given"
/// (`--shape ""` silently taking the chain's shape is a mistake hidden).
const CLI::Validator& non_empty();

/// How a chain is named in messages: its "name", else its file name
/// ("chain.json"), so that an unnamed chain never prints as ''; printable().
std::string chain_label(const KernelSpec& spec, const std::string& file);

/// "M,N" or "M,N,K": plain decimal digits separated by commas, nothing else.
/// Checks the count against the mainloop (M,N for elementwise, M,N,K for GEMM
/// kinds) and then verify_shape. UserError naming --shape otherwise.
Shape parse_shape(std::string_view text, const KernelSpec& spec);

/// UserError for an empty problem (M or N of 0) where there is nothing to time or tune.
void require_nonempty(const Shape& s, std::string_view what);

/// The shape of a run: --shape when given (text non-empty), else the chain's
/// "shape", else a UserError saying how to give one.
Shape resolve_shape(const std::string& text, const KernelSpec& spec);

/// `--ld NAME=LD` (repeatable): a GEMM operand's leading dimension into `shape`
/// (a, b, or a dual GEMM's a, b0, b1; Note [Strided operands]) or any chain's
/// full [M,N] input's or output's, by name (Note [Strided epilogue tensors],
/// Note [Strided rows]),
/// then verify_shape. UserError naming --ld for another name, a repeated one or
/// a bad number.
void apply_lds(const std::vector<std::string>& lds, const KernelSpec& spec, Shape& shape);

/// `--batch B` and `--batch-stride NAME=S` (repeatable): a batched GEMM's problem
/// count and an operand's batch stride (elements; 0 shares it) into `shape`
/// (Note [Batched GEMM]), then verify_shape. UserError naming the option for
/// an unknown name, a repeated one or a bad number.
void apply_batch(std::int64_t batch, const std::vector<std::string>& strides, const KernelSpec& spec, Shape& shape);
/// The --batch and --batch-stride options of run, bench and emit.
void add_batch_options(CLI::App& sub, std::int64_t& batch, std::vector<std::string>& strides);

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
