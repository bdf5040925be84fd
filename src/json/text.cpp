// JSON text and files to KernelSpec: syntax errors and repeated keys are
// reported here, everything else by spec_from_json.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "epifuse/json.hpp"
#include "json/read.hpp"

namespace epifuse {

using schema::Json;
using schema::JsonPath;

namespace {

// A parser callback that follows the path of the value being parsed and fails
// on a key repeated within one object: nlohmann keeps only one of the two, so a
// duplicated input or output would otherwise vanish without a word.
class DuplicateKeyCheck {
 public:
  bool operator()(int /*depth*/, Json::parse_event_t event, Json& parsed) {
    using E = Json::parse_event_t;
    switch (event) {
      case E::object_start: stack_.push_back({true, child()}); break;
      case E::array_start: stack_.push_back({false, child()}); break;
      case E::key: {
        Frame& top = stack_.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second)
          schema::fail(top.path.key(top.key),
                       "duplicate key '{}' (a repeated key would silently replace the first)",
                       top.key);
        break;
      }
      case E::object_end:
      case E::array_end:
        stack_.pop_back();
        value_done();
        break;
      case E::value: value_done(); break;
    }
    return true;
  }

  /// Where the value being parsed goes: after a failure, where the failure is.
  JsonPath child() const {
    if (stack_.empty()) return {};
    const Frame& top = stack_.back();
    return top.object ? top.path.key(top.key) : top.path.index(top.count);
  }

 private:
  struct Frame {
    bool object;
    JsonPath path;
    std::size_t count = 0;  // arrays: elements seen
    std::string key;        // objects: the current key
    std::set<std::string> keys = {};
  };

  void value_done() {
    if (!stack_.empty() && !stack_.back().object) ++stack_.back().count;
  }

  std::vector<Frame> stack_;
};

// "[json.exception.parse_error.101] parse error at line 1, column 5: syntax
// error ..." -> "syntax error ...": the position is given our way.
std::string parse_error_detail(const std::string& what) {
  const auto column = what.find("column ");
  const auto colon = column == std::string::npos ? column : what.find(": ", column);
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

// "[json.exception.out_of_range.406] number overflow parsing '1e999'" -> "number overflow ...".
std::string exception_detail(const std::string& what) {
  const auto bracket = what.find("] ");
  return bracket == std::string::npos ? what : what.substr(bracket + 2);
}

}  // namespace

KernelSpec spec_from_json_text(std::string_view text, std::string_view source) {
  Json doc;
  DuplicateKeyCheck check;
  try {
    doc = Json::parse(text.begin(), text.end(),
                      [&check](int depth, Json::parse_event_t event, Json& parsed) {
                        return check(depth, event, parsed);
                      });
  } catch (const Json::parse_error& e) {
    const std::size_t byte = std::min<std::size_t>(e.byte, text.size());
    // e.byte counts from 1 and points at the last character read.
    const auto before = text.substr(0, byte == 0 ? 0 : byte - 1);
    const auto line = 1 + std::count(before.begin(), before.end(), '\n');
    const auto line_start = before.rfind('\n');
    const auto column = before.size() - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
    const JsonPath where = check.child();
    throw UserError(fmt::format("{}: invalid JSON at byte {} (line {}, column {}{}): {}", source,
                                e.byte, line, column,
                                where.str() == "(root)" ? "" : fmt::format(", in {}", where.str()),
                                parse_error_detail(e.what())));
  } catch (const Json::out_of_range& e) {
    // nlohmann rejects a number that overflows a double (1e999) instead of
    // making it inf: report it where it was written.
    schema::fail(check.child(), "{} (a number must be a finite double)", exception_detail(e.what()));
  }
  return spec_from_json(doc);
}

KernelSpec load_spec(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError(fmt::format("{}: cannot read spec: it is a directory", path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw UserError(fmt::format("{}: cannot read spec: {}", path.string(), std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw UserError(fmt::format("{}: cannot read spec: read failed", path.string()));
  return spec_from_json_text(text.str(), path.string());
}

}  // namespace epifuse
