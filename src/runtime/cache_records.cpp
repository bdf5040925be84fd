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

std::string tile_bytes(const TileConfig& tile) {
  std::string out;
  put(out, static_cast<std::uint32_t>(tile.index()));
  std::visit(
      [&](const auto& t) {
        using T = std::decay_t<decltype(t)>;
        if constexpr (std::is_same_v<T, ElementwiseTile>) {
          for (int v : {t.threads, t.vec, t.blocks_per_sm}) put(out, static_cast<std::int32_t>(v));
        } else if constexpr (std::is_same_v<T, RowTile>) {
          for (int v : {t.threads, t.vec, t.regs, t.persistent, t.group, t.cluster, t.ring, t.keep})
            put(out, static_cast<std::int32_t>(v));
        } else if constexpr (std::is_same_v<T, WaveTile>) {
          for (int v : {t.bm, t.bn, t.bk, t.waves_m, t.waves_n, t.group_m, t.op, t.fma})
            put(out, static_cast<std::int32_t>(v));
        } else if constexpr (std::is_same_v<T, WgmmaTile>) {
          for (int v : {t.bm, t.bn, t.bk, t.stages, t.group_m, t.cluster, t.pingpong})
            put(out, static_cast<std::int32_t>(v));
        } else {
          for (int v : {t.bm, t.bn, t.bk, t.warps_m, t.warps_n, t.stages, t.group_m, t.split_k})
            put(out, static_cast<std::int32_t>(v));
        }
      },
      tile);
  return out;
}

std::optional<TileConfig> tile_from_bytes(std::string_view bytes) {
  Reader r{bytes};
  std::uint32_t index = 0;
  if (!r.get(index)) return std::nullopt;
  auto ints = [&](std::initializer_list<int*> fields) {
    for (int* f : fields) {
      std::int32_t v = 0;
      if (!r.get(v)) return false;
      *f = v;
    }
    return r.rest.empty();
  };
  if (index == 0) {
    ElementwiseTile t;
    if (!ints({&t.threads, &t.vec, &t.blocks_per_sm})) return std::nullopt;
    return t;
  }
  if (index == 1) {
    GemmTile t;
    if (!ints({&t.bm, &t.bn, &t.bk, &t.warps_m, &t.warps_n, &t.stages, &t.group_m, &t.split_k})) return std::nullopt;
    return t;
  }
  if (index == 2) {
    WgmmaTile t;
    if (!ints({&t.bm, &t.bn, &t.bk, &t.stages, &t.group_m, &t.cluster, &t.pingpong})) return std::nullopt;
    return t;
  }
  if (index == 3) {
    RowTile t;
    if (!ints({&t.threads, &t.vec, &t.regs, &t.persistent, &t.group, &t.cluster, &t.ring, &t.keep})) return std::nullopt;
    return t;
  }
  if (index == 4) {
    WaveTile t;
    if (!ints({&t.bm, &t.bn, &t.bk, &t.waves_m, &t.waves_n, &t.group_m, &t.op, &t.fma})) return std::nullopt;
    return t;
  }
  return std::nullopt;
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
