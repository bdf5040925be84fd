#pragma once
// What the Jit keeps on disk (docs/disk-cache.md): the bytes of a whole
// CacheKey, a kernel's payload (source hash, NVRTC time, cubin) and a tuned
// tile's (the tile, its time). Every field is length-prefixed or fixed-width,
// so two different keys never give the same bytes.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epifuse/jit.hpp"

namespace epifuse {

/// Every field of the key, length-prefixed, in declaration order.
std::string key_bytes(const CacheKey& key);

/// The target a disk key names ("sm_90a", "gfx90a:xnack-"): a kernel's
/// key_bytes, or a tuned tile's ("tuned|" and key_bytes). nullopt when the
/// bytes are neither (`epifuse cache list --target` leaves such records out).
std::optional<std::string> target_of_key(std::string_view key);

/// The tile's family (variant index) and every field, fixed width.
std::string tile_bytes(const TileConfig& tile);
std::optional<TileConfig> tile_from_bytes(std::string_view bytes);

struct KernelRecord {
  std::uint64_t source_hash = 0;  ///< xxh3-64 of the generated source the cubin came from
  double compile_ms = 0;          ///< NVRTC's time when it was compiled
  std::vector<char> cubin;
};
std::string encode_kernel(const KernelRecord& r);
std::optional<KernelRecord> decode_kernel(std::string_view payload);

struct TunedRecord {
  TileConfig tile;
  double ms = 0;
};
std::string encode_tuned(const TunedRecord& r);
std::optional<TunedRecord> decode_tuned(std::string_view payload);

/// xxh3-64 of a generated source text.
std::uint64_t source_hash(std::string_view text);

}  // namespace epifuse
