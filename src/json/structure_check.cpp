#include "json/structure_check.hpp"

#include "ir/limits.hpp"
#include "ir/names.hpp"

namespace epifuse::schema {

bool StructureCheck::operator()(int /*depth*/, Json::parse_event_t event, Json& parsed) {
  using E = Json::parse_event_t;
  switch (event) {
    case E::object_start: open(true); break;
    case E::array_start: open(false); break;
    case E::key: key(parsed.get<std::string>()); break;
    case E::object_end:
    case E::array_end:
      stack_.pop_back();
      element_done();
      break;
    case E::value:
      element_begins();
      element_done();
      break;
  }
  return true;
}

JsonPath StructureCheck::where() const {
  JsonPath at;
  for (const Frame& f : stack_) at = f.object ? at.key(f.key) : at.index(f.count);
  return at;
}

void StructureCheck::open(bool object) {
  element_begins();
  // Checked before the container is made: a million `[` stop at the 65th.
  if (stack_.size() >= static_cast<std::size_t>(limits::k_max_depth))
    fail(where(), "JSON nesting deeper than the limit of {} levels", limits::k_max_depth);
  stack_.push_back({object});
}

void StructureCheck::key(std::string key) {
  Frame& top = stack_.back();
  top.key = std::move(key);
  if (top.count >= limits::k_max_object_keys)
    fail(where(), "more than the limit of {} keys in one object", limits::k_max_object_keys);
  ++top.count;
  if (!top.keys.insert(top.key).second)
    fail(where(), "duplicate key '{}' (a repeated key would silently replace the first)",
         names::excerpt(top.key));
}

// An array's next element: checked when it begins, before it is built.
void StructureCheck::element_begins() {
  if (stack_.empty() || stack_.back().object) return;
  if (stack_.back().count >= limits::k_max_array_elements)
    fail(where(), "more than the limit of {} elements in one array", limits::k_max_array_elements);
}

void StructureCheck::element_done() {
  if (!stack_.empty() && !stack_.back().object) ++stack_.back().count;
}

}  // namespace epifuse::schema
