#pragma once
// Templates are real files under templates/, embedded at build time
// (cmake/embed_templates.cmake). `${name}` placeholders are substituted
// strictly: a placeholder without a value, or a value no placeholder uses, is
// an internal error, so a template and its emitter cannot drift apart.
//
// EPIFUSE_TEMPLATE_DIR=DIR makes every function below read the templates from
// DIR (a checkout's templates/) instead of the embedded copies, once per
// process: edit a template and rerun, no rebuild. The cache keys follow
// (templates_hash); the CPU reference, which includes common/philox.cuh when
// compiled, does not.
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace epifuse {

using TemplateVars = std::map<std::string, std::string, std::less<>>;

/// The embedded text of templates/<path>; InternalError when absent.
std::string_view embedded_template(std::string_view path);
/// Every embedded template as (path, text), sorted by path (read from
/// EPIFUSE_TEMPLATE_DIR instead when it is set).
const std::vector<std::pair<std::string_view, std::string_view>>& embedded_templates();
/// Every embedded template's path with its text read from `dir`/path instead;
/// UserError naming the first file that cannot be read (the folder must hold
/// them all, as templates/ does).
std::vector<std::pair<std::string, std::string>> read_templates(const std::filesystem::path& dir);
/// xxh3 over every embedded template's path and text: part of each cache key.
std::uint64_t templates_hash();

/// Substitutes `${name}`; throws InternalError on a missing or unused key.
std::string render_template(std::string_view text, const TemplateVars& vars,
                            std::string_view template_name = "<template>");

}  // namespace epifuse
