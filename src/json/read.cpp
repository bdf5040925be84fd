#include "json/read.hpp"

#include <cmath>

#include "ir/names.hpp"

namespace epifuse::schema {

std::string_view type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::object: return "object";
    case Json::value_t::array: return "array";
    case Json::value_t::string: return "string";
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::null: return "null";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return "number";
    default: return "binary";
  }
}

namespace {

// `replace`: a document built in memory may hold invalid UTF-8, and a string
// cut short may end inside a character; a message must not throw.
std::string dump(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); }

// Appends compact JSON for `v` to `out` and stops soon after `out` holds
// `budget` characters: the work is bounded by the budget, not by the value
// (a 1 MB array, or a document nested 100,000 deep that was built in memory,
// where a whole dump() would recurse that deep).
void excerpt(const Json& v, std::string& out, std::size_t budget) {
  if (out.size() > budget) return;
  const std::size_t room = budget - out.size() + 1;
  if (v.is_object() || v.is_array()) {
    out += v.is_object() ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out.size() <= budget; ++it) {
      if (!first) out += ',';
      first = false;
      if (v.is_object()) out += dump(Json(it.key().substr(0, room))) + ':';
      excerpt(it.value(), out, budget);
    }
    out += v.is_object() ? '}' : ']';
  } else if (v.is_string()) {
    out += dump(Json(v.get_ref<const std::string&>().substr(0, room)));
  } else if (v.is_number_float() && !std::isfinite(v.get<double>())) {
    out += std::isnan(v.get<double>()) ? "nan" : (v.get<double>() > 0 ? "inf" : "-inf");
  } else {
    out += dump(v);
  }
}

}  // namespace

std::string show(const Json& v) {
  constexpr std::size_t k_max = 60;
  std::string text;
  excerpt(v, text, k_max);
  if (text.size() > k_max) text = text.substr(0, k_max - 3) + "...";
  return text;
}

std::string describe(const Json& v) {
  if (v.is_null()) return "null";
  return fmt::format("{} {}", type_name(v), show(v));
}

void expect_object(const Json& v, const JsonPath& at) {
  if (!v.is_object()) fail(at, "expected an object, got {}", describe(v));
}

void expect_array(const Json& v, const JsonPath& at) {
  if (!v.is_array()) fail(at, "expected an array, got {}", describe(v));
}

void check_keys(const Json& obj, const JsonPath& at, const std::vector<std::string_view>& allowed,
                std::string_view owner) {
  for (const auto& [key, value] : obj.items()) {
    bool known = false;
    for (auto a : allowed) known = known || a == key;
    if (known) continue;
    std::string list;
    for (auto a : allowed) list += fmt::format("{}{}", list.empty() ? "" : ", ", a);
    fail(at.key(key), "unknown key '{}' in {} (allowed: {})", names::excerpt(key), owner, list);
  }
}

const Json* find(const Json& obj, std::string_view key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

const Json& require(const Json& obj, const JsonPath& at, std::string_view key) {
  const Json* v = find(obj, key);
  if (!v) fail(at, "missing required key '{}'", key);
  return *v;
}

std::string read_string(const Json& v, const JsonPath& at) {
  if (!v.is_string()) fail(at, "expected a string, got {}", describe(v));
  return v.get<std::string>();
}

double read_number(const Json& v, const JsonPath& at) {
  if (!v.is_number()) fail(at, "expected a number, got {}", describe(v));
  const double d = v.get<double>();
  // JSON has no NaN or infinity, but 1e999 parses to inf and documents built in
  // memory may hold either.
  if (!std::isfinite(d)) fail(at, "expected a finite number, got {}", show(v));
  return d;
}

DType read_dtype(const Json& v, const JsonPath& at) {
  return read_choice(v, at, "dtype", {DType::f32, DType::f16, DType::bf16});
}

Broadcast read_broadcast(const Json& v, const JsonPath& at) {
  return read_choice(v, at, "broadcast",
                     {Broadcast::full, Broadcast::row, Broadcast::col, Broadcast::scalar});
}

Layout read_layout(const Json& v, const JsonPath& at) {
  return read_choice(v, at, "layout", {Layout::row, Layout::col});
}

RngMode read_rng(const Json& v, const JsonPath& at) {
  return read_choice(v, at, "rng mode", {RngMode::philox4, RngMode::triton});
}

MainloopKind read_mainloop_kind(const Json& v, const JsonPath& at) {
  return read_choice(v, at, "mainloop kind",
                     {MainloopKind::elementwise, MainloopKind::gemm, MainloopKind::dual_gemm});
}

std::string_view precision_name(Precision p) { return p == Precision::fast ? "fast" : "accurate"; }

Precision read_precision(const Json& v, const JsonPath& at) {
  const std::string s = read_string(v, at);
  for (Precision p : {Precision::accurate, Precision::fast})
    if (precision_name(p) == s) return p;
  fail(at, "unknown precision '{}' (expected accurate, fast)", names::excerpt(s));
}

}  // namespace epifuse::schema
