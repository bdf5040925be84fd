#pragma once
/// Options the JIT subcommands share (emit, compile, run --device cuda, bench):
/// the target and an explicit tile.
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "epifuse/jit.hpp"

namespace epifuse::cli {

struct TileOptions {
  int threads = 0;        ///< 0: default (or the tuned tile)
  int vec = 0;
  int blocks_per_sm = -1;
  std::string gemm;       ///< --tile: a GEMM tile, "128x128x32w2x2s4g8"
  /// The requested tile; nullopt when no option was given (the tuned or default tile).
  std::optional<TileConfig> tile() const;
};

/// Adds --threads, --vec, --blocks-per-sm (elementwise) and --tile (GEMM).
void add_tile_options(CLI::App& sub, TileOptions& opt);

}  // namespace epifuse::cli
