#include "jit_options.hpp"

namespace epifuse::cli {

std::optional<TileConfig> TileOptions::tile() const {
  if (!threads && !vec && blocks_per_sm < 0) return std::nullopt;
  ElementwiseTile t;
  if (threads) t.threads = threads;
  t.vec = vec;
  if (blocks_per_sm >= 0) t.blocks_per_sm = blocks_per_sm;
  return t;
}

void add_tile_options(CLI::App& sub, TileOptions& opt) {
  sub.add_option("--threads", opt.threads, "Threads per block (multiple of 32, 32..1024)");
  sub.add_option("--vec", opt.vec, "Elements per thread per step: 1, 2, 4, 8, 16 (default: 16 bytes)");
  sub.add_option("--blocks-per-sm", opt.blocks_per_sm,
                 "Grid: 0 covers every vector once; k > 0 is a grid-stride grid of k blocks per SM");
}

}  // namespace epifuse::cli
