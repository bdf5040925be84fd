#include <fmt/format.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "epifuse/tile.hpp"

namespace epifuse {

std::string ElementwiseTile::str() const { return fmt::format("t{}v{}g{}", threads, vec, blocks_per_sm); }

std::string GemmTile::str() const {
  return fmt::format("{}x{}x{}w{}x{}s{}g{}", bm, bn, bk, warps_m, warps_n, stages, group_m);
}

std::string to_string(const TileConfig& tile) {
  return std::visit([](const auto& t) { return t.str(); }, tile);
}

std::uint64_t tile_hash(const TileConfig& tile) {
  // Every tile type is a struct of ints: hash the alternative's index and its bytes.
  return std::visit(
      [&](const auto& t) {
        static_assert(std::has_unique_object_representations_v<std::decay_t<decltype(t)>>,
                      "tile types are plain structs of ints, hashed by their bytes");
        const std::uint64_t family = tile.index();
        return static_cast<std::uint64_t>(XXH3_64bits_withSeed(&t, sizeof t, family));
      },
      tile);
}

}  // namespace epifuse
