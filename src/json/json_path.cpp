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
// always stays on one line, and a long key is cut as names::excerpt cuts it.
// The escapes are JSON's (\u0000), as the key is written in the document;
// excerpt's own (\x00) would come out doubled here (\\x00).
std::string quoted(std::string_view key) {
  const bool cut = key.size() > names::k_excerpt_length;
  const std::string s = std::string(key.substr(0, names::k_excerpt_length)) + (cut ? "..." : "");
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    const auto next = i + 1 < s.size() ? static_cast<unsigned char>(s[i + 1]) : 0;
    if (c == '"' || c == '\\') {
      out += '\\';
      out += s[i];
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\u{:04x}", c);
    } else if (c == 0xc2 && next >= 0x80 && next <= 0x9f) {  // C1, U+0080..U+009F in UTF-8
      out += fmt::format("\\u{:04x}", next);
      ++i;
    } else {
      out += s[i];
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
