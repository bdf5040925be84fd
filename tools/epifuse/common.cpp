#include "common.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <set>
#include <vector>

#include <sys/stat.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
// Inlined so that the CLI needs no libxxhash at link or run time.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "epifuse/errors.hpp"
#include "epifuse/npy.hpp"
#include "io/atomic_file.hpp"
#include "ir/names.hpp"

namespace epifuse::cli {

Session& session() {
  static Session s;
  return s;
}

void add_json_flag(CLI::App& sub) {
  sub.add_flag("--json", session().json,
               "print one machine-readable JSON document on stdout (errors too: "
               "{\"error\": {\"kind\", \"message\"}}); progress still goes to stderr");
}

namespace {
// The errno of the first failed write to stdout, kept because errno itself
// is long overwritten by the time stdout_failure() is asked.
int first_stdout_errno = 0;
}  // namespace

void print_text(std::string_view text) {
  std::cout.flush();  // keeps the order with anything written through std::cout
  errno = 0;
  const bool ok = std::fwrite(text.data(), 1, text.size(), stdout) == text.size() && std::fflush(stdout) == 0;
  if (!ok && first_stdout_errno == 0) first_stdout_errno = errno ? errno : EIO;
}

void print_json(const nlohmann::ordered_json& doc) {
  // Invalid UTF-8 in messages (a file name, say) must not turn into an exception here.
  print_text(doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + '\n');
}

std::string stdout_failure() {
  // std::cout writes through to C's stdout (sync_with_stdio), whose buffer
  // fflush empties; a failure at any point leaves its error flag set.
  std::cout.flush();
  const bool stream_failed = !std::cout;
  errno = 0;
  const bool flush_failed = std::fflush(stdout) != 0;
  const int error = first_stdout_errno ? first_stdout_errno : errno;
  if (!stream_failed && !flush_failed && !std::ferror(stdout) && first_stdout_errno == 0) return {};
  return error ? std::strerror(error) : "write failed";
}

void write_output_npy(const std::filesystem::path& path, const HostTensor& t) {
  try {
    write_npy(path, t);
  } catch (const UserError& e) {  // could not open it
    throw OutputError(e.what());
  } catch (const RuntimeError& e) {  // could not write or close it
    throw OutputError(e.what());
  }
}

namespace {
std::filesystem::path resolve_output(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(io::replaced_file(path), ec);
  if (ec) p = path;
  // weakly_canonical resolves `.`, `..` and the links of the directories;
  // where it cannot (a directory that cannot be searched), the path as written
  // is compared, normalized.
  fs::path canonical = fs::weakly_canonical(p, ec);
  return ec ? p.lexically_normal() : canonical;
}
}  // namespace

void OutputFiles::add(std::string what, const std::filesystem::path& path) {
  Entry e{std::move(what), resolve_output(path)};
  struct stat st{};
  if (::stat(e.resolved.c_str(), &st) == 0) {
    e.exists = true;
    e.device = st.st_dev;
    e.inode = st.st_ino;
  }
  for (const Entry& before : entries_) {
    const bool same = before.resolved == e.resolved ||
                      (e.exists && before.exists && before.device == e.device && before.inode == e.inode);
    EPIFUSE_CHECK(!same, "{} and {} name the same file ({}): one would overwrite the other", printable(before.what),
                  printable(e.what), printable(e.resolved.string()));
  }
  entries_.push_back(std::move(e));
}

std::string printable(std::string_view s) { return names::printable(s); }

const CLI::Validator& non_empty() {
  static const CLI::Validator v(
      [](std::string& value) { return value.empty() ? std::string("must not be empty") : std::string(); },
      "NONEMPTY", "non-empty");
  return v;
}

std::string chain_label(const KernelSpec& spec, const std::string& file) {
  if (!spec.name.empty()) return printable(spec.name);
  const std::string base = std::filesystem::path(file).filename().string();
  return printable(base.empty() ? file : base);
}

namespace {

bool all_digits(std::string_view s, int base) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool dec = c >= '0' && c <= '9';
    const bool hex = (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!dec && !(base == 16 && hex)) return false;
  }
  return true;
}

}  // namespace

Shape parse_shape(std::string_view text, const KernelSpec& spec) {
  const bool gemm = spec.mainloop.kind != MainloopKind::elementwise;
  const char* form = gemm ? "M,N,K" : "M,N";
  std::vector<std::int64_t> dims;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string_view part =
        text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    EPIFUSE_CHECK(all_digits(part, 10),
                  "--shape '{}': expected {} with non-negative decimal integers, got '{}'", text, form, part);
    std::int64_t d = 0;
    auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), d);
    EPIFUSE_CHECK(ec == std::errc{} && ptr == part.data() + part.size(),
                  "--shape '{}': dimension '{}' is too large", text, part);
    dims.push_back(d);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  EPIFUSE_CHECK(dims.size() == (gemm ? 3u : 2u), "--shape '{}': {} {} kernel takes {} ({} numbers), got {}",
                text, gemm ? "a" : "an", to_string(spec.mainloop.kind), form, gemm ? 3 : 2, dims.size());
  Shape s{dims[0], dims[1], gemm ? dims[2] : 0};
  verify_shape(spec, s);
  return s;
}

void require_nonempty(const Shape& s, std::string_view what) {
  EPIFUSE_CHECK(s.m > 0 && s.n > 0, "{}: M={} N={} is an empty problem: there is nothing to time", what, s.m, s.n);
}

Shape resolve_shape(const std::string& text, const KernelSpec& spec) {
  if (!text.empty()) return parse_shape(text, spec);
  const bool gemm = spec.mainloop.kind != MainloopKind::elementwise;
  EPIFUSE_CHECK(spec.default_shape.has_value(),
                "no shape: give --shape {} or add \"shape\": [{}] to the chain", gemm ? "M,N,K" : "M,N",
                gemm ? "M, N, K" : "M, N");
  Shape s = *spec.default_shape;
  if (!gemm) s.k = 0;
  verify_shape(spec, s);
  return s;
}

void apply_lds(const std::vector<std::string>& lds, const KernelSpec& spec, Shape& shape) {
  const MainloopKind kind = spec.mainloop.kind;
  const Graph& g = spec.graph;
  const bool dual = kind == MainloopKind::dual_gemm;
  std::set<std::string> seen;
  for (const std::string& text : lds) {
    const std::size_t eq = text.find('=');
    EPIFUSE_CHECK(eq != std::string::npos,
                  "--ld '{}': expected NAME=LD (a, b; a dual GEMM's a, b0, b1; or a full [M,N] input or output)", text);
    const std::string name = text.substr(0, eq);
    const std::string_view digits = std::string_view(text).substr(eq + 1);
    std::int64_t ld = 0;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ld);
    EPIFUSE_CHECK(all_digits(digits, 10) && ec == std::errc{} && ptr == digits.data() + digits.size(),
                  "--ld '{}': the leading dimension must be a non-negative decimal integer", text);
    EPIFUSE_CHECK(seen.insert(name).second, "--ld: '{}' given twice", name);
    const bool gemm = kind != MainloopKind::elementwise;  // an elementwise chain's `a` is an input's name
    if (gemm && name == "a") {
      shape.lda = ld;
      continue;
    }
    if (gemm && name == (dual ? "b0" : "b")) {
      shape.ldb = ld;
      continue;
    }
    if (dual && name == "b1") {
      shape.ldb1 = ld;
      continue;
    }
    // Note [Strided epilogue tensors]: a chain input or output, by its name
    // (verify_shape then refuses one that is not full [M,N]).
    const auto input = std::find_if(g.inputs().begin(), g.inputs().end(), [&](Value v) { return g.node(v).name == name; });
    const auto output =
        std::find_if(g.outputs().begin(), g.outputs().end(), [&](const Output& o) { return o.name == name; });
    EPIFUSE_CHECK(input == g.inputs().end() || output == g.outputs().end(),
                  "--ld '{}': '{}' names both an input and an output of this chain", text, name);
    const auto put = [&](std::vector<std::int64_t>& out, std::size_t index, std::size_t count) {
      out.resize(count, 0);
      out[index] = ld;
    };
    if (input != g.inputs().end())
      put(shape.ld_inputs, static_cast<std::size_t>(input - g.inputs().begin()), g.inputs().size());
    else if (output != g.outputs().end())
      put(shape.ld_outputs, static_cast<std::size_t>(output - g.outputs().begin()), g.outputs().size());
    else
      throw UserError(gemm ? fmt::format("--ld '{}': '{}' is neither an operand nor an input or output of this {}: give "
                                         "{} or a full [M,N] input or output",
                                         text, name, to_string(kind), dual ? "a, b0, b1" : "a, b")
                           : fmt::format("--ld '{}': '{}' is neither an input nor an output of this elementwise "
                                         "chain: give a full [M,N] input or output",
                                         text, name));
  }
  verify_shape(spec, shape);
}

void apply_batch(std::int64_t batch, const std::vector<std::string>& strides, const KernelSpec& spec, Shape& shape) {
  const MainloopKind kind = spec.mainloop.kind;
  EPIFUSE_CHECK(strides.empty() || batch > 1, "--batch-stride: give --batch B above 1 too");
  shape.batch = batch;
  std::set<std::string> seen;
  for (const std::string& text : strides) {
    const std::size_t eq = text.find('=');
    EPIFUSE_CHECK(eq != std::string::npos, "--batch-stride '{}': expected NAME=STRIDE (a, b; a dual GEMM's a, b0, b1)",
                  text);
    const std::string name = text.substr(0, eq);
    const std::string_view digits = std::string_view(text).substr(eq + 1);
    std::int64_t stride = 0;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), stride);
    EPIFUSE_CHECK(all_digits(digits, 10) && ec == std::errc{} && ptr == digits.data() + digits.size(),
                  "--batch-stride '{}': the stride must be a non-negative decimal integer (0: one operand for every "
                  "batch)",
                  text);
    EPIFUSE_CHECK(seen.insert(name).second, "--batch-stride: '{}' given twice", name);
    const bool dual = kind == MainloopKind::dual_gemm;
    if (kind != MainloopKind::elementwise && name == "a")
      shape.batch_stride_a = stride;
    else if (kind != MainloopKind::elementwise && name == (dual ? "b0" : "b"))
      shape.batch_stride_b = stride;
    else if (dual && name == "b1")
      shape.batch_stride_b1 = stride;
    else
      throw UserError(fmt::format("--batch-stride '{}': '{}' is not an operand of this {}: give {}", text, name,
                                  to_string(kind), dual ? "a, b0 or b1" : "a or b"));
  }
  verify_shape(spec, shape);
}

void add_batch_options(CLI::App& sub, std::int64_t& batch, std::vector<std::string>& strides) {
  sub.add_option("--batch", batch,
                 "B: a GEMM chain's batch, B problems of the shape in one launch (docs/strided-batched.md): "
                 "operands and [M,N] tensors [B,...], row and column inputs shared")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{65535}));
  sub.add_option("--batch-stride", strides,
                 "NAME=S: elements between batches of GEMM operand NAME (a, b; dual: a, b0, b1; repeatable); "
                 "0 shares one matrix across batches; default the operand's size")
      ->allow_extra_args(false);
}

std::uint64_t parse_u64(std::string_view text, std::string_view option) {
  std::string_view digits = text;
  int base = 10;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    digits.remove_prefix(2);
    base = 16;
  }
  std::uint64_t v = 0;
  bool ok = all_digits(digits, base);
  if (ok) {
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
    ok = ec == std::errc{} && ptr == digits.data() + digits.size();
  }
  EPIFUSE_CHECK(ok, "{} '{}': expected an unsigned 64-bit integer (decimal, or hex with 0x)", option, text);
  return v;
}

std::pair<std::string, std::string> parse_binding(std::string_view text, std::string_view option) {
  const std::size_t eq = text.find('=');
  EPIFUSE_CHECK(eq != std::string_view::npos && eq > 0 && eq + 1 < text.size(),
                "{} '{}': expected NAME=FILE.npy", option, text);
  return {std::string(text.substr(0, eq)), std::string(text.substr(eq + 1))};
}

std::string signature_hash(const KernelSpec& spec) {
  const std::string sig = signature(spec);
  return fmt::format("{:016x}", XXH3_64bits(sig.data(), sig.size()));
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace epifuse::cli
