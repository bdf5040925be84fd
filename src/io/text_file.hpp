#pragma once
// Reading a text file the user names (a chain, a --variant source) with a cap
// on its size.
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace epifuse {

/// At most `max_bytes` + 1 bytes of `path`, read in chunks: enough to tell that
/// a file is too large without reading all of it (`/dev/zero` never ends);
/// pipes, process substitution and /dev/stdin work as files do. The caller
/// reports a result longer than `max_bytes` in its own words. UserError
/// "<path>: cannot read <what>: <why>" for a directory, a file that cannot be
/// opened, or a failed read.
std::string read_text_capped(const std::filesystem::path& path, std::size_t max_bytes, std::string_view what);

}  // namespace epifuse
