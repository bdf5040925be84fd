#pragma once
// Templates are real files under templates/, embedded at build time
// (cmake/embed_templates.cmake). `${name}` placeholders are substituted
// strictly: a placeholder without a value, or a value no placeholder uses, is
// an internal error, so a template and its emitter cannot drift apart.
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace epifuse {

using TemplateVars = std::map<std::string, std::string, std::less<>>;

/// The embedded text of templates/<path>; InternalError when absent.
std::string_view embedded_template(std::string_view path);
/// Every embedded template as (path, text), sorted by path.
const std::vector<std::pair<std::string_view, std::string_view>>& embedded_templates();
/// xxh3 over every embedded template's path and text: part of each cache key.
std::uint64_t templates_hash();

/// Substitutes `${name}`; throws InternalError on a missing or unused key.
std::string render_template(std::string_view text, const TemplateVars& vars,
                            std::string_view template_name = "<template>");

}  // namespace epifuse
