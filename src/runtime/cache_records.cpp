#include "runtime/cache_records.hpp"

#include <cstring>
#include <type_traits>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace epifuse {

namespace {

template <class T>
void put(std::string& out, T v) {
  static_assert(std::is_trivially_copyable_v<T>);
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_string(std::string& out, std::string_view s) {
  put(out, static_cast<std::uint64_t>(s.size()));
  out.append(s);
}

// Reads fixed-width fields off the front of a payload; false once short.
struct Reader {
  std::string_view rest;
  template <class T>
  bool get(T& v) {
    if (rest.size() < sizeof v) return false;
    std::memcpy(&v, rest.data(), sizeof v);
    rest.remove_prefix(sizeof v);
    return true;
  }
};

}  // namespace

std::uint64_t source_hash(std::string_view text) { return XXH3_64bits(text.data(), text.size()); }

// A tile's record: its TileConfig index, then its ints in declaration order
// (Note [Tile formats]: every tile type is a struct of ints).
std::string tile_bytes(const TileConfig& tile) {
  std::string out;
  put(out, static_cast<std::uint32_t>(tile.index()));
  std::visit(
      [&](const auto& t) {
        using T = std::decay_t<decltype(t)>;
        static_assert(std::has_unique_object_representations_v<T> && sizeof(T) % sizeof(std::int32_t) == 0);
        std::int32_t ints[sizeof(T) / sizeof(std::int32_t)];
        std::memcpy(ints, &t, sizeof t);
        for (std::int32_t v : ints) put(out, v);
      },
      tile);
  return out;
}

namespace {

template <std::size_t I = 0>
std::optional<TileConfig> tile_of_index(std::uint32_t index, std::string_view ints) {
  if constexpr (I == std::variant_size_v<TileConfig>) {
    return std::nullopt;
  } else {
    using T = std::variant_alternative_t<I, TileConfig>;
    if (index != I) return tile_of_index<I + 1>(index, ints);
    if (ints.size() != sizeof(T)) return std::nullopt;
    T t;
    std::memcpy(&t, ints.data(), sizeof t);
    return t;
  }
}

}  // namespace

std::optional<TileConfig> tile_from_bytes(std::string_view bytes) {
  Reader r{bytes};
  std::uint32_t index = 0;
  if (!r.get(index)) return std::nullopt;
  return tile_of_index(index, r.rest);
}

std::string key_bytes(const CacheKey& k) {
  std::string out;
  put_string(out, k.signature);
  put_string(out, k.shape_class);
  put(out, static_cast<std::uint32_t>(k.path == KernelPath::fastest ? 0 : 1));
  put_string(out, tile_bytes(k.tile));
  put_string(out, k.target);
  put_string(out, k.compiler);
  put_string(out, k.options);
  put(out, k.templates);
  put_string(out, k.version);
  return out;
}

std::optional<std::string> target_of_key(std::string_view key) {
  if (key.starts_with("tuned|")) key.remove_prefix(6);
  Reader r{key};
  // key_bytes: signature, shape class, path, tile, then the target.
  auto skip_string = [&](std::string* out) {
    std::uint64_t n = 0;
    if (!r.get(n) || n > r.rest.size()) return false;
    if (out) *out = std::string(r.rest.substr(0, n));
    r.rest.remove_prefix(n);
    return true;
  };
  std::uint32_t path = 0;
  std::string target;
  if (!skip_string(nullptr) || !skip_string(nullptr) || !r.get(path) || !skip_string(nullptr) || !skip_string(&target))
    return std::nullopt;
  return target;
}

std::string encode_kernel(const KernelRecord& r) {
  std::string out;
  put(out, r.source_hash);
  put(out, r.compile_ms);
  out.append(r.cubin.data(), r.cubin.size());
  return out;
}

std::optional<KernelRecord> decode_kernel(std::string_view payload) {
  Reader rd{payload};
  KernelRecord r;
  if (!rd.get(r.source_hash) || !rd.get(r.compile_ms) || rd.rest.empty()) return std::nullopt;
  r.cubin.assign(rd.rest.begin(), rd.rest.end());
  return r;
}

std::string encode_tuned(const TunedRecord& r) {
  std::string out;
  put(out, r.ms);
  out.append(tile_bytes(r.tile));
  return out;
}

std::optional<TunedRecord> decode_tuned(std::string_view payload) {
  Reader rd{payload};
  TunedRecord r;
  if (!rd.get(r.ms)) return std::nullopt;
  std::optional<TileConfig> t = tile_from_bytes(rd.rest);
  if (!t) return std::nullopt;
  r.tile = *t;
  return r;
}

}  // namespace epifuse
