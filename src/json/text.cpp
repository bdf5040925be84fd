// JSON text and files to KernelSpec: size, NUL bytes, syntax errors, the
// structural limits and repeated keys are reported here, everything else by
// spec_from_json.
#include <algorithm>

#include "epifuse/json.hpp"
#include "io/text_file.hpp"
#include "ir/limits.hpp"
#include "json/read.hpp"
#include "json/structure_check.hpp"

namespace epifuse {

using schema::Json;
using schema::JsonPath;

namespace {

const std::string k_size_limit = fmt::format("the limit of {} bytes ({} MiB) for a chain",
                                             limits::k_max_chain_bytes, limits::k_max_chain_bytes >> 20);

// Characters of nlohmann's error detail kept in a message: the detail quotes
// the token last read, which can be a whole (unterminated) string.
constexpr std::size_t k_max_detail = 160;

// "byte 73 (line 3, column 20": `byte` counts from 1, as nlohmann's do.
std::string position(std::string_view text, std::size_t byte) {
  byte = std::min(byte, text.size() + 1);
  const auto before = text.substr(0, byte == 0 ? 0 : byte - 1);
  const auto line = 1 + std::count(before.begin(), before.end(), '\n');
  const auto line_start = before.rfind('\n');
  const auto column = before.size() - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
  return fmt::format("byte {} (line {}, column {}", byte, line, column);
}

// "[json.exception.parse_error.101] parse error at line 1, column 5: syntax
// error ..." -> "syntax error ...": the position is given our way.
std::string parse_error_detail(const std::string& what) {
  const auto column = what.find("column ");
  const auto colon = column == std::string::npos ? column : what.find(": ", column);
  std::string detail = colon == std::string::npos ? what : what.substr(colon + 2);
  if (detail.size() > k_max_detail) detail = detail.substr(0, k_max_detail) + "...";
  return detail;
}

// "[json.exception.out_of_range.406] number overflow parsing '1e999'" -> "number overflow ...".
std::string exception_detail(const std::string& what) {
  const auto bracket = what.find("] ");
  std::string detail = bracket == std::string::npos ? what : what.substr(bracket + 2);
  if (detail.size() > k_max_detail) detail = detail.substr(0, k_max_detail) + "...";
  return detail;
}

// What the parser must never see: more than k_max_chain_bytes, or a NUL byte
// (nlohmann stops at a NUL after the document and accepts it, and one inside a
// string gives a misleading message).
void check_text(std::string_view text, std::string_view source) {
  if (text.size() > limits::k_max_chain_bytes)
    throw UserError(fmt::format("{}: {} bytes, more than {}", source, text.size(), k_size_limit));
  if (const auto nul = text.find('\0'); nul != std::string_view::npos)
    throw UserError(fmt::format("{}: {}): NUL byte in the chain text (JSON text has none)", source,
                                position(text, nul + 1)));
}

}  // namespace

KernelSpec spec_from_json_text(std::string_view text, std::string_view source) {
  check_text(text, source);
  Json doc;
  schema::StructureCheck check;
  try {
    doc = Json::parse(text.begin(), text.end(),
                      [&check](int depth, Json::parse_event_t event, Json& parsed) {
                        return check(depth, event, parsed);
                      });
  } catch (const Json::parse_error& e) {
    // e.byte points at the last character read.
    const JsonPath where = check.where();
    throw UserError(fmt::format("{}: invalid JSON at {}{}): {}", source, position(text, e.byte),
                                where.str() == "(root)" ? "" : fmt::format(", in {}", where.str()),
                                parse_error_detail(e.what())));
  } catch (const Json::out_of_range& e) {
    // nlohmann rejects a number that overflows a double (1e999) instead of
    // making it inf: report it where it was written.
    schema::fail(check.where(), "{} (a number must be a finite double)", exception_detail(e.what()));
  }
  return spec_from_json(doc);
}

namespace {

// The chain's text: process substitution (`<(cat chain.json)`) works too.
std::string read_chain_text(const std::filesystem::path& path) {
  std::string text = read_text_capped(path, limits::k_max_chain_bytes, "spec");
  if (text.size() > limits::k_max_chain_bytes)
    throw UserError(fmt::format("{}: more than {} (stopped reading there)", path.string(), k_size_limit));
  return text;
}

}  // namespace

KernelSpec load_spec(const std::filesystem::path& path) {
  return spec_from_json_text(read_chain_text(path), path.string());
}

}  // namespace epifuse
