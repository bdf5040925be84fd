#pragma once
/// JSON op chains, schema version 1 (DESIGN §7.1; docs/json-schema.md).
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "epifuse/spec.hpp"

namespace epifuse {

inline constexpr int k_schema_version = 1;

/// Parses a spec (ordered: input declaration order is binding order); every malformed input is a UserError whose message starts
/// with the JSON path (`ops[2].p: ...`).
KernelSpec spec_from_json(const nlohmann::ordered_json& doc);
/// Parses text; syntax errors become UserError naming `source` and the position.
KernelSpec spec_from_json_text(std::string_view text, std::string_view source = "<json>");
/// Reads and parses a file (UserError when it cannot be read).
KernelSpec load_spec(const std::filesystem::path& path);

/// The full form (inputs/ops/outputs); parsing it gives the same signature.
nlohmann::ordered_json spec_to_json(const KernelSpec& spec);

}  // namespace epifuse
