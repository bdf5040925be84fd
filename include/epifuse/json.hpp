#pragma once
/// JSON op chains, schema version 1 (docs/design.md §7.1; docs/json-schema.md).
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "epifuse/errors.hpp"
#include "epifuse/spec.hpp"

namespace epifuse {

inline constexpr int k_schema_version = 1;

/// A UserError located in a JSON document. what() is "PATH: MESSAGE", where PATH
/// is the JSON path of the offending value (`ops[2].p`, `inputs.bias.broadcast`)
/// or `(root)` for the document itself.
class JsonError : public UserError {
 public:
  JsonError(std::string path, std::string message);
  const std::string& path() const { return path_; }
  const std::string& message() const { return message_; }

 private:
  std::string path_, message_;
};

/// Parses a spec (ordered: input declaration order is binding order); every
/// malformed input is a UserError (a JsonError) whose message starts with the
/// JSON path (`ops[2].p: ...`).
KernelSpec spec_from_json(const nlohmann::ordered_json& doc);
/// Parses text; syntax errors become UserError naming `source` and the position,
/// and a key repeated within one object is an error (it would otherwise be dropped).
KernelSpec spec_from_json_text(std::string_view text, std::string_view source = "<json>");
/// Reads and parses a file (UserError when it cannot be read).
KernelSpec load_spec(const std::filesystem::path& path);

/// The full form (inputs/ops/outputs); parsing it gives the same signature.
/// Op values without a name get a generated one (`v<index>`).
nlohmann::ordered_json spec_to_json(const KernelSpec& spec);

}  // namespace epifuse
