#include <fmt/format.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "epifuse/tile.hpp"

#include <cctype>
#include <cstdio>

#include "epifuse/errors.hpp"

namespace epifuse {

std::string ElementwiseTile::str() const { return fmt::format("t{}v{}g{}", threads, vec, blocks_per_sm); }

ElementwiseTile parse_elementwise_tile(const std::string& text) {
  ElementwiseTile t;
  int used = 0;
  const int n = std::sscanf(text.c_str(), "t%dv%dg%d%n", &t.threads, &t.vec, &t.blocks_per_sm, &used);
  EPIFUSE_CHECK(n == 3 && used == static_cast<int>(text.size()),
                "elementwise tile '{}': expected tTHREADSvVECgBLOCKS, e.g. t256v8g0 (what bench and compile print; "
                "or --threads, --vec and --blocks-per-sm)",
                text);
  return t;
}

std::string GemmTile::str() const {
  std::string s = fmt::format("{}x{}x{}w{}x{}s{}g{}", bm, bn, bk, warps_m, warps_n, stages, group_m);
  if (split_k != 1) s += fmt::format("k{}", split_k);
  return s;
}

GemmTile parse_gemm_tile(const std::string& text) {
  GemmTile t;
  int used = 0, more = 0;
  const int n = std::sscanf(text.c_str(), "%dx%dx%dw%dx%ds%dg%d%n", &t.bm, &t.bn, &t.bk, &t.warps_m, &t.warps_n,
                            &t.stages, &t.group_m, &used);
  const bool split = n == 7 && used < static_cast<int>(text.size()) &&
                     std::sscanf(text.c_str() + used, "k%d%n", &t.split_k, &more) == 1;
  EPIFUSE_CHECK(n == 7 && used + more == static_cast<int>(text.size()) && (split || more == 0),
                "gemm tile '{}': expected BMxBNxBKwWMxWNsSTAGESgGROUP[kSPLIT], e.g. 128x128x32w2x2s4g8 or "
                "64x64x64w2x2s3g8k4",
                text);
  return t;
}

std::string WgmmaTile::str() const {
  std::string s = fmt::format("h{}x{}x{}s{}g{}", bm, bn, bk, stages, group_m);
  if (cluster != 1) s += fmt::format("c{}", cluster);
  if (pingpong) s += "p";
  return s;
}

WgmmaTile parse_wgmma_tile(const std::string& text) {
  WgmmaTile t;
  int used = 0, more = 0;
  const int n = std::sscanf(text.c_str(), "h%dx%dx%ds%dg%d%n", &t.bm, &t.bn, &t.bk, &t.stages, &t.group_m, &used);
  std::string_view rest = n == 5 ? std::string_view(text).substr(static_cast<std::size_t>(used)) : std::string_view();
  bool ok = n == 5;
  if (ok && rest.starts_with("c")) {
    const std::string tail(rest);
    ok = std::sscanf(tail.c_str(), "c%d%n", &t.cluster, &more) == 1;
    rest.remove_prefix(ok ? static_cast<std::size_t>(more) : 0);
  }
  if (ok && rest == "p") {
    t.pingpong = 1;
    rest = {};
  }
  EPIFUSE_CHECK(ok && rest.empty(),
                "wgmma tile '{}': expected hBMxBNxBKsSTAGESgGROUP[cCLUSTER][p], e.g. h128x256x64s4g8, "
                "h128x256x64s4g8c2 or h128x128x64s6g8c2p",
                text);
  return t;
}

std::string RowTile::str() const {
  std::string s = fmt::format("r{}v{}x{}", threads, vec, regs);
  if (group > 0) s += fmt::format("g{}", group);
  if (cluster != 1) s += fmt::format("c{}", cluster);
  if (ring > 0) s += fmt::format("s{}", ring);
  if (keep) s += keep == 2 ? "kr" : "k";
  if (!persistent) s += "b";
  return s;
}

RowTile parse_row_tile(const std::string& text) {
  RowTile t;
  int used = 0;
  const int n = std::sscanf(text.c_str(), "r%dv%dx%d%n", &t.threads, &t.vec, &t.regs, &used);
  std::string_view rest = n == 3 ? std::string_view(text).substr(static_cast<std::size_t>(used)) : "?";
  // Optional suffixes in order: gGROUP, cCLUSTER, sRING, k, b.
  auto number_after = [&](char tag, int& field) {
    if (rest.empty() || rest[0] != tag) return;
    std::size_t k = 1;
    while (k < rest.size() && k < 4 && std::isdigit(static_cast<unsigned char>(rest[k]))) ++k;
    if (k == 1) return;  // no digits: left in `rest`, refused below
    field = std::stoi(std::string(rest.substr(1, k - 1)));
    rest.remove_prefix(k);
  };
  number_after('g', t.group);
  number_after('c', t.cluster);
  number_after('s', t.ring);
  if (rest.starts_with("kr")) {
    t.keep = 2;
    rest.remove_prefix(2);
  } else if (rest.starts_with("k")) {
    t.keep = 1;
    rest.remove_prefix(1);
  }
  if (rest == "b") {
    t.persistent = 0;
    rest = {};
  }
  EPIFUSE_CHECK(n == 3 && rest.empty(),
                "row tile '{}': expected rTHREADSvVECxREGS[gGROUP][cCLUSTER][sRING][k|kr][b], e.g. r256v8x2, r256v8x4g32 "
                "(32 threads a row), r1024v8x4c4 (a cluster of 4 blocks a row), r512v8x8c8s2 (a 2-stage shared-memory "
                "ring); x0 streams the row, k keeps a stage's values for the next (kr: in the ring's bytes), b one block a row",
                text);
  return t;
}

std::string WaveTile::str() const {
  return fmt::format("m{}x{}x{}w{}x{}g{}.{}{}", bm, bn, bk, waves_m, waves_n, group_m, op == 0 ? "mfma" : "wmma",
                     fma ? "-fma" : "");
}

WaveTile parse_wave_tile(const std::string& text) {
  WaveTile t;
  int used = 0;
  const int n = std::sscanf(text.c_str(), "m%dx%dx%dw%dx%dg%d%n", &t.bm, &t.bn, &t.bk, &t.waves_m, &t.waves_n,
                            &t.group_m, &used);
  const std::string_view rest = n == 6 ? std::string_view(text).substr(static_cast<std::size_t>(used)) : "?";
  bool ok = true;
  if (rest == ".mfma" || rest == ".mfma-fma")
    t.op = 0;
  else if (rest == ".wmma" || rest == ".wmma-fma")
    t.op = 1;
  else
    ok = false;
  t.fma = rest.ends_with("-fma") ? 1 : 0;
  EPIFUSE_CHECK(ok, "wave tile '{}': expected mBMxBNxBKwWMxWNgGROUP.OP with OP mfma, wmma, mfma-fma or wmma-fma, e.g. "
                "m128x128x32w2x2g8.mfma",
                text);
  return t;
}

TileConfig parse_tile(const std::string& text) {
  if (text.starts_with("t")) return parse_elementwise_tile(text);
  if (text.starts_with("h")) return parse_wgmma_tile(text);
  if (text.starts_with("m")) return parse_wave_tile(text);
  if (text.starts_with("r")) return parse_row_tile(text);
  return parse_gemm_tile(text);
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
