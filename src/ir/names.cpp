#include "ir/names.hpp"

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

std::string excerpt(std::string_view s) {
  if (s.size() <= k_excerpt_length) return std::string(s);
  return std::string(s.substr(0, k_excerpt_length)) + "...";
}

static_assert(is_accumulator_name("acc1") && !is_accumulator_name("acc2"));
static_assert(is_gemm_operand_name("b0") && !is_gemm_operand_name("c"));

}  // namespace epifuse::names
