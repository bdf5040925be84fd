#include "io/text_file.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "epifuse/errors.hpp"

namespace epifuse {

std::string read_text_capped(const std::filesystem::path& path, std::size_t max_bytes, std::string_view what) {
  const std::string name = path.string();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError(fmt::format("{}: cannot read {}: it is a directory", name, what));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(fmt::format("{}: cannot read {}: {}", name, what, std::strerror(errno)));
  std::string text;
  std::array<char, 64 * 1024> chunk;
  while (in && text.size() <= max_bytes) {
    const std::size_t want = std::min(chunk.size(), max_bytes + 1 - text.size());
    in.read(chunk.data(), static_cast<std::streamsize>(want));
    text.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw UserError(fmt::format("{}: cannot read {}: read failed", name, what));
  return text;
}

}  // namespace epifuse
