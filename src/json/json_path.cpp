#include "json/json_path.hpp"

#include "ir/names.hpp"

namespace epifuse {

JsonError::JsonError(std::string path, std::string message)
    : UserError(fmt::format("{}: {}", path, message)),
      path_(std::move(path)),
      message_(std::move(message)) {}

namespace schema {

namespace {
// Quotes a key for a message; control characters are escaped so that a path
// always stays on one line, and a long key is cut (names::excerpt).
std::string quoted(std::string_view key) {
  const std::string s = names::excerpt(key);
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}
}  // namespace

JsonPath JsonPath::key(std::string_view k) const {
  if (names::is_identifier(k, names::k_excerpt_length))
    return JsonPath(text_.empty() ? std::string(k) : fmt::format("{}.{}", text_, k));
  return JsonPath(fmt::format("{}[{}]", text_, quoted(k)));
}

JsonPath JsonPath::index(std::size_t i) const { return JsonPath(fmt::format("{}[{}]", text_, i)); }

void fail(const JsonPath& at, std::string message) { throw JsonError(at.str(), std::move(message)); }

}  // namespace schema
}  // namespace epifuse
