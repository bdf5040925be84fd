// Note [Tile formats]
// Each tile type declares its fields once, in the order it is spelled: the
// text before each value, the value's name in the form, and whether it is
// always written, written only when not its default (an optional number), or
// one of a few spellings (a choice). str(), the parsers, the forms in error
// messages and in the CLI's help (tile_forms) all read that table. The hash and
// the disk record (runtime/cache_records.cpp) read the struct itself: every
// tile type is a struct of ints, hashed and stored as its ints in declaration
// order after its TileConfig index.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "epifuse/tile.hpp"

#include <array>
#include <cctype>
#include <initializer_list>

#include <fmt/format.h>

#include "epifuse/errors.hpp"
#include "epifuse/tile_format.hpp"

namespace epifuse {

namespace {

enum class FieldKind { number, optional_number, choice };

struct Spelling {
  int value;
  std::string_view text;  ///< "" for the value written as nothing
};

template <class T>
struct TileField {
  std::string_view tag;   ///< the text before the value
  std::string_view name;  ///< the value in the form ("BM"); a choice's whole form ("[k|kr]", ".OP")
  int T::*member;
  FieldKind kind = FieldKind::number;
  int fallback = 0;  ///< optional_number: the value that is not written
  std::array<Spelling, 3> spellings{};  ///< choice: longest first where one is a prefix of another
  int spelling_count = 0;
};

template <class T>
struct TileFormat;

template <>
struct TileFormat<ElementwiseTile> {
  static constexpr std::string_view kind = "elementwise", prefix = "t",
                                    example = "t256v8g0 (what bench and compile print; or --threads, --vec and "
                                              "--blocks-per-sm), t256v8g0s3 (a column-sum kernel's loads three "
                                              "rows ahead through shared memory)";
  static constexpr std::array<TileField<ElementwiseTile>, 4> fields{{
      {"", "THREADS", &ElementwiseTile::threads},
      {"v", "VEC", &ElementwiseTile::vec},
      {"g", "BLOCKS", &ElementwiseTile::blocks_per_sm},
      {"s", "STAGES", &ElementwiseTile::stages, FieldKind::optional_number, 0},
  }};
};

template <>
struct TileFormat<GemmTile> {
  static constexpr std::string_view kind = "gemm", prefix = "", example = "128x128x32w2x2s4g8 or 64x64x64w2x2s3g8k4";
  static constexpr std::array<TileField<GemmTile>, 8> fields{{
      {"", "BM", &GemmTile::bm},
      {"x", "BN", &GemmTile::bn},
      {"x", "BK", &GemmTile::bk},
      {"w", "WM", &GemmTile::warps_m},
      {"x", "WN", &GemmTile::warps_n},
      {"s", "STAGES", &GemmTile::stages},
      {"g", "GROUP", &GemmTile::group_m},
      {"k", "SPLIT", &GemmTile::split_k, FieldKind::optional_number, 1},
  }};
};

template <>
struct TileFormat<WgmmaTile> {
  static constexpr std::string_view kind = "wgmma", prefix = "h",
                                    example = "h128x256x64s4g8, h128x256x64s4g8c2 or h128x128x64s6g8c2p";
  static constexpr std::array<TileField<WgmmaTile>, 7> fields{{
      {"", "BM", &WgmmaTile::bm},
      {"x", "BN", &WgmmaTile::bn},
      {"x", "BK", &WgmmaTile::bk},
      {"s", "STAGES", &WgmmaTile::stages},
      {"g", "GROUP", &WgmmaTile::group_m},
      {"c", "CLUSTER", &WgmmaTile::cluster, FieldKind::optional_number, 1},
      {"", "[p]", &WgmmaTile::pingpong, FieldKind::choice, 0, {{{1, "p"}, {0, ""}}}, 2},
  }};
};

template <>
struct TileFormat<RowTile> {
  static constexpr std::string_view kind = "row", prefix = "r",
                                    example = "r256v8x2, r256v8x4g32 (32 threads a row), r1024v8x4c4 (a cluster of 4 "
                                              "blocks a row), r512v8x8c8s2 (a 2-stage shared-memory ring), "
                                              "r1024v4x4c16s5p4 (a ring of 5 quarter-row pieces), r256v8x2c4s2t "
                                              "(column sums' tree in the ring's shared memory), r512v8x2c8s2m2t "
                                              "(and registers for two blocks a multiprocessor); x0 streams "
                                              "the row, k keeps a stage's values for the next (kr: in the ring's "
                                              "bytes), b one block a row";
  static constexpr std::array<TileField<RowTile>, 11> fields{{
      {"", "THREADS", &RowTile::threads},
      {"v", "VEC", &RowTile::vec},
      {"x", "REGS", &RowTile::regs},
      {"g", "GROUP", &RowTile::group, FieldKind::optional_number, 0},
      {"c", "CLUSTER", &RowTile::cluster, FieldKind::optional_number, 1},
      {"s", "RING", &RowTile::ring, FieldKind::optional_number, 0},
      {"p", "PIECES", &RowTile::pieces, FieldKind::optional_number, 0},
      {"m", "MINBLOCKS", &RowTile::min_blocks, FieldKind::optional_number, 0},
      {"", "[t]", &RowTile::tree, FieldKind::choice, 0, {{{1, "t"}, {0, ""}}}, 2},
      {"", "[k|kr]", &RowTile::keep, FieldKind::choice, 0, {{{2, "kr"}, {1, "k"}, {0, ""}}}, 3},
      {"", "[b]", &RowTile::persistent, FieldKind::choice, 0, {{{0, "b"}, {1, ""}}}, 2},
  }};
};

template <>
struct TileFormat<WaveTile> {
  static constexpr std::string_view kind = "wave", prefix = "m",
                                    example = "m128x128x32w2x2g8.mfma (OP mfma, wmma, mfma-fma or wmma-fma)";
  static constexpr std::array<TileField<WaveTile>, 8> fields{{
      {"", "BM", &WaveTile::bm},
      {"x", "BN", &WaveTile::bn},
      {"x", "BK", &WaveTile::bk},
      {"w", "WM", &WaveTile::waves_m},
      {"x", "WN", &WaveTile::waves_n},
      {"g", "GROUP", &WaveTile::group_m},
      {"", ".OP", &WaveTile::op, FieldKind::choice, 0, {{{0, ".mfma"}, {1, ".wmma"}}}, 2},
      {"", "", &WaveTile::fma, FieldKind::choice, 0, {{{1, "-fma"}, {0, ""}}}, 2},
  }};
};

// Every tile type is a struct of ints, every one of them a field.
template <class T>
constexpr bool fields_cover_struct = sizeof(T) == TileFormat<T>::fields.size() * sizeof(int) &&
                                     std::has_unique_object_representations_v<T>;
static_assert(fields_cover_struct<ElementwiseTile> && fields_cover_struct<GemmTile> &&
              fields_cover_struct<WgmmaTile> && fields_cover_struct<RowTile> && fields_cover_struct<WaveTile>);

template <class T>
std::string form_of() {
  std::string s(TileFormat<T>::prefix);
  for (const TileField<T>& f : TileFormat<T>::fields) {
    if (f.kind == FieldKind::number) s += fmt::format("{}{}", f.tag, f.name);
    else if (f.kind == FieldKind::optional_number) s += fmt::format("[{}{}]", f.tag, f.name);
    else s += f.name;
  }
  return s;
}

template <class T>
std::string format_tile(const T& t) {
  std::string s(TileFormat<T>::prefix);
  for (const TileField<T>& f : TileFormat<T>::fields) {
    const int v = t.*f.member;
    if (f.kind == FieldKind::number || (f.kind == FieldKind::optional_number && v != f.fallback)) {
      s += fmt::format("{}{}", f.tag, v);
    } else if (f.kind == FieldKind::choice) {
      // A value out of range (in the message that refuses it) is spelled as 1.
      const Spelling* chosen = nullptr;
      for (int i = 0; i < f.spelling_count; ++i) {
        const Spelling& sp = f.spellings[static_cast<std::size_t>(i)];
        if (sp.value == v || (!chosen && sp.value == 1)) chosen = &sp;
        if (sp.value == v) break;
      }
      if (chosen) s += chosen->text;
    }
  }
  return s;
}

// A decimal int, optionally negative, off the front of `rest`.
bool take_int(std::string_view& rest, int& out) {
  std::size_t k = rest.starts_with("-") ? 1 : 0;
  const std::size_t digits = k;
  while (k < rest.size() && k < digits + 9 && std::isdigit(static_cast<unsigned char>(rest[k]))) ++k;
  if (k == digits) return false;
  out = std::stoi(std::string(rest.substr(0, k)));
  rest.remove_prefix(k);
  return true;
}

template <class T>
T parse_as(const std::string& text) {
  using F = TileFormat<T>;
  T t;
  std::string_view rest(text);
  bool ok = rest.starts_with(F::prefix);
  if (ok) rest.remove_prefix(F::prefix.size());
  for (const TileField<T>& f : F::fields) {
    if (!ok) break;
    if (f.kind == FieldKind::number) {
      ok = rest.starts_with(f.tag);
      if (ok) rest.remove_prefix(f.tag.size());
      ok = ok && take_int(rest, t.*f.member);
    } else if (f.kind == FieldKind::optional_number) {
      t.*f.member = f.fallback;
      if (rest.starts_with(f.tag) && rest.size() > f.tag.size() &&
          (std::isdigit(static_cast<unsigned char>(rest[f.tag.size()])) || rest[f.tag.size()] == '-')) {
        rest.remove_prefix(f.tag.size());
        ok = take_int(rest, t.*f.member);
      }
    } else {
      bool found = false;
      for (int i = 0; i < f.spelling_count && !found; ++i) {
        const Spelling& s = f.spellings[static_cast<std::size_t>(i)];
        if (rest.starts_with(s.text)) {
          t.*f.member = s.value;
          rest.remove_prefix(s.text.size());
          found = true;
        }
      }
      ok = found;
    }
  }
  EPIFUSE_CHECK(ok && rest.empty(), "{} tile '{}': expected {}, e.g. {}", F::kind, text, form_of<T>(), F::example);
  return t;
}

}  // namespace

std::string ElementwiseTile::str() const { return format_tile(*this); }
std::string GemmTile::str() const { return format_tile(*this); }
std::string WgmmaTile::str() const { return format_tile(*this); }
std::string RowTile::str() const { return format_tile(*this); }
std::string WaveTile::str() const { return format_tile(*this); }

ElementwiseTile parse_elementwise_tile(const std::string& text) { return parse_as<ElementwiseTile>(text); }
GemmTile parse_gemm_tile(const std::string& text) { return parse_as<GemmTile>(text); }
WgmmaTile parse_wgmma_tile(const std::string& text) { return parse_as<WgmmaTile>(text); }
RowTile parse_row_tile(const std::string& text) { return parse_as<RowTile>(text); }
WaveTile parse_wave_tile(const std::string& text) { return parse_as<WaveTile>(text); }

// By prefix; the tile type without one (GemmTile) takes the rest.
TileConfig parse_tile(const std::string& text) {
  if (text.starts_with(TileFormat<ElementwiseTile>::prefix)) return parse_elementwise_tile(text);
  if (text.starts_with(TileFormat<WgmmaTile>::prefix)) return parse_wgmma_tile(text);
  if (text.starts_with(TileFormat<WaveTile>::prefix)) return parse_wave_tile(text);
  if (text.starts_with(TileFormat<RowTile>::prefix)) return parse_row_tile(text);
  return parse_gemm_tile(text);
}

std::string tile_forms() {
  return fmt::format("elementwise {}, GEMM {}, wgmma {}, wave (AMD) {}, row {}", form_of<ElementwiseTile>(),
                     form_of<GemmTile>(), form_of<WgmmaTile>(), form_of<WaveTile>(), form_of<RowTile>());
}

std::string to_string(const TileConfig& tile) {
  return std::visit([](const auto& t) { return t.str(); }, tile);
}

std::uint64_t tile_hash(const TileConfig& tile) {
  // Every tile type is a struct of ints (Note [Tile formats]): hash the alternative's index and its bytes.
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
