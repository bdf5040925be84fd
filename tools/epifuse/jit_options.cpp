#include "jit_options.hpp"

#include <string>
#include <vector>

#include <fmt/format.h>

#include "epifuse/errors.hpp"
#include "epifuse/tile_format.hpp"
#include "ir/limits.hpp"

namespace epifuse::cli {

std::optional<TileConfig> TileOptions::tile() const {
  if (!gemm.empty()) {
    EPIFUSE_CHECK(!threads && !vec && blocks_per_sm < 0,
                  "--tile names the whole tile; --threads, --vec and --blocks-per-sm are the parts of an elementwise one: give one or the other");
    return parse_tile(gemm);
  }
  if (!threads && !vec && blocks_per_sm < 0) return std::nullopt;
  ElementwiseTile t;
  if (threads) t.threads = threads;
  t.vec = vec;
  if (blocks_per_sm >= 0) t.blocks_per_sm = blocks_per_sm;
  return t;
}

namespace {

// Threads per block: a whole number of warps, within the CUDA block limit.
CLI::Validator threads_per_block() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        int n = 0;
        if (!CLI::detail::lexical_cast(value, n) || n < limits::k_min_threads || n > limits::k_max_threads ||
            n % 32 != 0)
          return "threads per block must be a multiple of 32 in [" + std::to_string(limits::k_min_threads) +
                 ", " + std::to_string(limits::k_max_threads) + "], got " + value;
        return {};
      },
      "WARPS*32", "threads per block");
}

}  // namespace

void add_tile_options(CLI::App& sub, TileOptions& opt) {
  sub.add_option("--threads", opt.threads, "Threads per block (multiple of 32, 32..1024)")
      ->check(threads_per_block());
  sub.add_option("--vec", opt.vec, "Elements per thread per step: 1, 2, 4, 8, 16 (default: 16 bytes)")
      ->check(CLI::IsMember(std::vector<int>(limits::k_vec_widths.begin(), limits::k_vec_widths.end())));
  sub.add_option("--blocks-per-sm", opt.blocks_per_sm,
                 "Grid: 0 covers every vector once; k > 0 is a grid-stride grid of k blocks per SM")
      ->check(CLI::Range(0, limits::k_max_blocks_per_sm));
  sub.add_option("--tile", opt.gemm,
                 fmt::format("Tile: {} (e.g. t256v8g0, 128x128x32w2x2s4g8, h128x256x64s4g8, m128x128x32w2x2g8.mfma, "
                             "r256v8x4g32; an elementwise tile also as --threads/--vec/--blocks-per-sm; default: tuned)",
                             tile_forms()));
}

}  // namespace epifuse::cli
