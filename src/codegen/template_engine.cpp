#include "codegen/template_engine.hpp"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "epifuse/errors.hpp"

namespace epifuse {

namespace detail {
const std::vector<std::pair<std::string_view, std::string_view>>& embedded_templates();
}

std::vector<std::pair<std::string, std::string>> read_templates(const std::filesystem::path& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, embedded_text] : detail::embedded_templates()) {
    std::ifstream in(dir / name, std::ios::binary);
    EPIFUSE_CHECK(in, "EPIFUSE_TEMPLATE_DIR={}: cannot read {} (the folder must hold every template, as templates/ does)",
                  dir.string(), name);
    out.emplace_back(std::string(name), std::string(std::istreambuf_iterator<char>(in), {}));
  }
  return out;
}

const std::vector<std::pair<std::string_view, std::string_view>>& embedded_templates() {
  static const std::vector<std::pair<std::string_view, std::string_view>> table = [] {
    const char* dir = std::getenv("EPIFUSE_TEMPLATE_DIR");
    if (!dir || !*dir) return detail::embedded_templates();
    static const std::vector<std::pair<std::string, std::string>> texts = read_templates(dir);
    std::vector<std::pair<std::string_view, std::string_view>> views(texts.begin(), texts.end());
    return views;
  }();
  return table;
}

std::string_view embedded_template(std::string_view path) {
  for (const auto& [name, text] : embedded_templates())
    if (name == path) return text;
  EPIFUSE_ASSERT(false, "no embedded template '{}'", path);
  return {};
}

std::uint64_t templates_hash() {
  static const std::uint64_t hash = [] {
    std::string all;
    for (const auto& [name, text] : embedded_templates()) {
      all.append(name);
      all.push_back('\0');
      all.append(text);
      all.push_back('\0');
    }
    return static_cast<std::uint64_t>(XXH3_64bits(all.data(), all.size()));
  }();
  return hash;
}

std::string render_template(std::string_view text, const TemplateVars& vars,
                            std::string_view template_name) {
  std::string out;
  out.reserve(text.size() * 2);
  std::set<std::string_view> used;
  std::size_t pos = 0;
  while (true) {
    const std::size_t open = text.find("${", pos);
    if (open == std::string_view::npos) break;
    const std::size_t close = text.find('}', open);
    EPIFUSE_ASSERT(close != std::string_view::npos, "{}: unterminated placeholder", template_name);
    const std::string_view key = text.substr(open + 2, close - open - 2);
    const auto it = vars.find(key);
    EPIFUSE_ASSERT(it != vars.end(), "{}: no value for placeholder ${{{}}}", template_name, key);
    out.append(text.substr(pos, open - pos));
    out.append(it->second);
    used.insert(it->first);
    pos = close + 1;
  }
  out.append(text.substr(pos));
  for (const auto& [key, value] : vars)
    EPIFUSE_ASSERT(used.count(key), "{}: value for ${{{}}} is never used", template_name, key);
  return out;
}

}  // namespace epifuse
