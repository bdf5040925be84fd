#pragma once
// Typed readers for JSON values. Each checks the value's type (and, for a
// choice, its spelling) and fails at the value's path saying what it expected.
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "epifuse/spec.hpp"
#include "ir/names.hpp"
#include "json/json_path.hpp"

namespace epifuse::schema {

using Json = nlohmann::ordered_json;

/// "object", "array", "string", "number", "boolean" or "null".
std::string_view type_name(const Json& v);
/// The value as compact JSON text, cut to a short excerpt for a message; the
/// work is bounded by the excerpt, not by the value.
std::string show(const Json& v);
/// Type and value for a message: `number 3`, `string "x"`, `null`.
std::string describe(const Json& v);

void expect_object(const Json& v, const JsonPath& at);
void expect_array(const Json& v, const JsonPath& at);
/// Fails at the first key of object `obj` that is not in `allowed` (a typo must
/// not be ignored); `owner` names what the keys belong to ("an input", "op relu").
void check_keys(const Json& obj, const JsonPath& at, const std::vector<std::string_view>& allowed,
                std::string_view owner);
/// Member `key` of object `obj`, or nullptr when absent.
const Json* find(const Json& obj, std::string_view key);
/// Member `key` of object `obj` (at `at`); fails when it is absent.
const Json& require(const Json& obj, const JsonPath& at, std::string_view key);

std::string read_string(const Json& v, const JsonPath& at);
/// A finite number; integers are numbers, booleans and strings are not.
double read_number(const Json& v, const JsonPath& at);

/// A string spelling one of `choices` (as to_string spells them); `what` names the kind.
template <class E>
E read_choice(const Json& v, const JsonPath& at, std::string_view what,
              std::initializer_list<E> choices) {
  const std::string s = read_string(v, at);
  std::string expected;
  for (E c : choices) {
    if (to_string(c) == s) return c;
    expected += fmt::format("{}{}", expected.empty() ? "" : ", ", to_string(c));
  }
  fail(at, "unknown {} '{}' (expected {})", what, names::excerpt(s), expected);
}

DType read_dtype(const Json& v, const JsonPath& at);
Broadcast read_broadcast(const Json& v, const JsonPath& at);
Layout read_layout(const Json& v, const JsonPath& at);
RngMode read_rng(const Json& v, const JsonPath& at);
MainloopKind read_mainloop_kind(const Json& v, const JsonPath& at);
/// The value of "mainloop": "elementwise", a kind alone, or {"kind", "a", "b",
/// "a_layout", "b_layout", "math"} (parse.cpp; the C ABI reads it too).
Mainloop read_mainloop(const Json& v, const JsonPath& at);
Precision read_precision(const Json& v, const JsonPath& at);
std::string_view precision_name(Precision p);

}  // namespace epifuse::schema
