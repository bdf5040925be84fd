#pragma once
// The parser callback that bounds a JSON document while it is parsed, so that
// nothing past a limit is ever built (docs/limits.md): nesting depth, keys per
// object, elements per array; and a key repeated within one object, which
// nlohmann would otherwise keep only once.
#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "json/read.hpp"

namespace epifuse::schema {

class StructureCheck {
 public:
  /// nlohmann's parser callback: throws JsonError at the first value that
  /// breaks a limit or repeats a key; keeps every value otherwise.
  bool operator()(int depth, Json::parse_event_t event, Json& parsed);

  /// Where the value being parsed goes; after a failure, where the failure is.
  /// Built from the open containers only when asked (a failure), so that the
  /// callback costs the same at any depth.
  JsonPath where() const;

 private:
  struct Frame {
    bool object;
    std::size_t count = 0;  // arrays: elements done; objects: keys seen
    std::string key;        // objects: the current key
    std::set<std::string, std::less<>> keys = {};
  };

  void open(bool object);
  void key(std::string key);
  void element_begins();
  void element_done();

  std::vector<Frame> stack_;
};

}  // namespace epifuse::schema
