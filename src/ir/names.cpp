#include "ir/names.hpp"

#include <optional>

namespace epifuse::names {

namespace {
constexpr bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
constexpr bool is_digit(char c) { return c >= '0' && c <= '9'; }
}  // namespace

bool is_identifier(std::string_view s, std::size_t max_length) {
  if (s.empty() || s.size() > max_length || !is_alpha(s[0])) return false;
  for (char c : s)
    if (!is_alpha(c) && !is_digit(c)) return false;
  return true;
}

namespace {
// The length of the control character starting at s[i] (1, or 2 for a C1
// character in UTF-8), or 0 when there is none.
std::size_t control_at(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x20 || c == 0x7f) return 1;
  if (c == 0xc2 && i + 1 < s.size()) {
    const auto next = static_cast<unsigned char>(s[i + 1]);
    if (next >= 0x80 && next <= 0x9f) return 2;
  }
  return 0;
}
}  // namespace

namespace {
// Whether `s` is well-formed UTF-8: no stray continuation byte, no overlong
// form, no surrogate, nothing past U+10FFFF (what a JSON writer accepts).
bool is_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    if (n >= 3) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90))
        return false;
    }
    i += n;
  }
  return true;
}
}  // namespace

std::optional<std::string> chain_name_problem(std::string_view s) {
  if (!is_utf8(s)) return "the chain name is not valid UTF-8";  // not echoed: a message is UTF-8 too
  if (has_control(s))
    return "the chain name must not contain control characters, got \"" + excerpt(s) + "\"";
  return std::nullopt;
}

bool has_control(std::string_view s) {
  for (std::size_t i = 0; i < s.size(); ++i)
    if (control_at(s, i)) return true;
  return false;
}

std::string printable(std::string_view s) {
  static constexpr char k_hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = control_at(s, i);
    if (n == 0) {
      out += s[i++];
      continue;
    }
    for (std::size_t k = 0; k < n; ++k, ++i) {
      const auto c = static_cast<unsigned char>(s[i]);
      out += {'\\', 'x', k_hex[c >> 4], k_hex[c & 0xf]};
    }
  }
  return out;
}

std::string excerpt(std::string_view s) {
  if (s.size() <= k_excerpt_length) return printable(s);
  return printable(s.substr(0, k_excerpt_length)) + "...";
}

static_assert(is_accumulator_name("acc1") && !is_accumulator_name("acc2"));
static_assert(is_gemm_operand_name("b0") && !is_gemm_operand_name("c"));

}  // namespace epifuse::names
