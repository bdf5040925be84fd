// The row family's default tile (Note [Default row tile]): the tile a chain
// gets without `epifuse tune`, pinned for a few chains, shapes and devices.
// The timings behind each choice are in docs/perf/rows.md ("Default tiles").
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "codegen/family.hpp"
#include "epifuse/autodiff.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/device_info.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/json.hpp"

using namespace epifuse;

namespace {

const std::filesystem::path kSource = std::filesystem::path(EPIFUSE_SOURCE_DIR);

KernelSpec example(const std::string& path, bool f32 = false) {
  std::ifstream in(kSource / path);
  std::stringstream text;
  text << in.rdbuf();
  std::string json = text.str();
  // The f32 variant of a bf16 example, as the benchmarks write it (tools/perf/row_chains.sh).
  if (f32)
    for (std::size_t at = json.find("\"bf16\""); at != std::string::npos; at = json.find("\"bf16\"", at))
      json.replace(at, 6, "\"f32\"");
  return spec_from_json_text(json, path);
}

// M·N = 2^27, the shapes of docs/perf/rows.md.
Shape rows_of(std::int64_t n) { return {(std::int64_t{1} << 27) / n, n, 0}; }

std::string default_tile(const KernelSpec& spec, const Shape& shape, std::string_view target, const DeviceInfo& device) {
  return to_string(family_for(spec).resolve_tile(spec, shape, std::nullopt, target, device));
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("row and elementwise default tiles: every default is a tile the family accepts when requested") {
    // Every example chain without a GEMM, forward and backward, at row lengths from 1
    // to 2^20 and on devices with less shared memory or fewer SMs than an H100: the
    // default passes the checks a requested tile passes, so a chain never fails for
    // the tile the library chose itself.
    std::vector<std::string> paths;
    for (const char* dir : {"examples/chains", "examples/backward"})
      for (const auto& entry : std::filesystem::directory_iterator(kSource / dir))
        if (entry.path().extension() == ".json") paths.push_back(std::string(dir) + "/" + entry.path().filename().string());
    std::sort(paths.begin(), paths.end());
    const DeviceInfo h100 = assumed_device("sm_90a");
    DeviceInfo slice = h100, sm86 = h100;
    slice.multiprocessors = 16;
    sm86.multiprocessors = 84;
    sm86.shared_per_block = 99 * 1024;
    const std::pair<std::string_view, DeviceInfo> devices[] = {
        {"sm_90a", h100}, {"sm_90a", slice}, {"sm_86", sm86}, {"gfx90a", assumed_device("gfx90a")}};
    int checked = 0;
    for (const std::string& path : paths)
      for (const bool f32 : {false, true}) {
        const KernelSpec spec = example(path, f32);
        if (spec.mainloop.kind != MainloopKind::elementwise) continue;
        const KernelFamily& family = family_for(spec);
        for (const auto& [target, device] : devices)
          for (const std::int64_t n : {1, 3, 100, 1024, 4097, 65536, 262144, 1 << 20})
            for (const std::int64_t m : {1, 7, 512}) {
              const Shape shape{m, n, 0};
              INFO(path << std::string(f32 ? " (f32)" : "") << " " << target << " " << m << "x" << n);
              TileConfig tile;
              try {
                tile = family.resolve_tile(spec, shape, std::nullopt, target, device);
              } catch (const UserError& e) {
                // The one refusal of a default: column sums over rows no tile holds, said so.
                CHECK_MESSAGE(std::string(e.what()).find("no row tile holds rows of N") != std::string::npos, e.what());
                continue;
              }
              INFO("default " << to_string(tile));
              CHECK_NOTHROW((void)family.resolve_tile(spec, shape, tile, target, device));
              const std::vector<TileConfig> candidates = tile_candidates(spec, shape, target, device);
              CHECK(std::find(candidates.begin(), candidates.end(), tile) != candidates.end());
              ++checked;
            }
      }
    CHECK(checked > 500);
  }

  TEST_CASE("row default tile: the measured classes on an H100's properties") {
    const DeviceInfo h100 = assumed_device("sm_90a");
    REQUIRE(h100.shared_per_block == 227 * 1024);
    const KernelSpec softmax = example("examples/chains/softmax.json");
    // Short rows in registers, one block per row; then a one-stage ring, one
    // block per row, the row split over a cluster whose part fits a third of
    // the shared memory (bf16 softmax reads 2 bytes an element: 65536 -> 2 blocks).
    CHECK(default_tile(softmax, rows_of(1024), "sm_90a", h100) == "r128v8x1b");
    CHECK(default_tile(softmax, rows_of(4096), "sm_90a", h100) == "r256v8x2s1b");
    CHECK(default_tile(softmax, rows_of(16384), "sm_90a", h100) == "r512v8x4s1b");
    CHECK(default_tile(softmax, rows_of(65536), "sm_90a", h100) == "r512v8x8c2s1b");
    CHECK(default_tile(softmax, rows_of(262144), "sm_90a", h100) == "r512v8x8c8s1b");
    // dy and y in f32, 8 bytes an element: 16 blocks' parts still overflow the
    // third at 262144, so the row is held in registers across the cluster.
    const KernelSpec softmax_bwd = example("examples/backward/softmax_backward.json", true);
    CHECK(default_tile(softmax_bwd, rows_of(65536), "sm_90a", h100) == "r512v4x4c8s1b");
    CHECK(default_tile(softmax_bwd, rows_of(262144), "sm_90a", h100) == "r1024v4x4c16");
    // Dropout: draws after the reductions keep values in the ring's bytes
    // (kr); draws a reduction reads (the backward's dropout of dy) take two
    // ring stages on a persistent grid where they fit, else one with keep.
    const KernelSpec attention = example("examples/chains/scaled_masked_softmax_dropout.json");
    CHECK(default_tile(attention, rows_of(65536), "sm_90a", h100) == "r512v8x4c4s1krb");
    const KernelSpec attention_bwd = example("examples/backward/scaled_masked_softmax_dropout_backward.json");
    CHECK(default_tile(attention_bwd, rows_of(16384), "sm_90a", h100) == "r512v8x4s2k");
    CHECK(default_tile(attention_bwd, rows_of(65536), "sm_90a", h100) == "r512v8x4c4s2k");
    CHECK(default_tile(example("examples/backward/scaled_masked_softmax_dropout_backward.json", true), rows_of(16384),
                       "sm_90a", h100) == "r512v4x8s1kb");
    // Column sums: a persistent grid, two vectors a thread; layernorm's two
    // sums of 16 accumulators leave no room in 64 registers a thread at 1024
    // threads, add+rmsnorm's one does. Note [Default column tree and keep]:
    // 512-thread blocks of two vectors on a cluster of more than two take the
    // tree and two blocks' registers (m2t); four vectors a thread do not.
    const KernelSpec layernorm_bwd = example("examples/backward/layernorm_backward.json");
    CHECK(default_tile(layernorm_bwd, rows_of(65536), "sm_90a", h100) == "r512v8x2c8s2m2t");
    CHECK(default_tile(layernorm_bwd, rows_of(262144), "sm_90a", h100) == "r512v8x4c16s2");
    // Rows of 512 to 2,048 vectors: one a thread, keeping a stage's values (k)
    // for layernorm's one [M,N] output; past 1,024 vectors, one block of two a
    // thread with the tree in the ring (t) where that output is the only one,
    // else a cluster of two.
    CHECK(default_tile(layernorm_bwd, rows_of(1024), "sm_90a", h100) == "r128v8x1s2k");
    CHECK(default_tile(layernorm_bwd, rows_of(4096), "sm_90a", h100) == "r512v8x1s2k");
    CHECK(default_tile(layernorm_bwd, rows_of(16384), "sm_90a", h100) == "r1024v8x2s2t");
    const KernelSpec layernorm_bwd_f32 = example("examples/backward/layernorm_backward.json", true);
    CHECK(default_tile(layernorm_bwd_f32, rows_of(8192), "sm_90a", h100) == "r1024v4x2s2t");
    CHECK(default_tile(layernorm_bwd_f32, rows_of(16384), "sm_90a", h100) == "r1024v4x2c2s2k");
    const KernelSpec add_rmsnorm_bwd = example("examples/backward/add_rmsnorm_backward.json");
    CHECK(default_tile(add_rmsnorm_bwd, rows_of(16384), "sm_90a", h100) == "r1024v8x1c2s2");
    CHECK(default_tile(add_rmsnorm_bwd, rows_of(65536), "sm_90a", h100) == "r1024v8x2c4s2");
    // Where one ring stage is all that fits, it is copied in quarter rows,
    // five slots (Note [Ring pieces]), for a row that writes one [M,N] output;
    // add+RMSNorm writes two, and keeps whole rows.
    CHECK(default_tile(example("examples/backward/layernorm_backward.json", true), rows_of(262144), "sm_90a", h100) ==
          "r1024v4x4c16s5p4");
    CHECK(default_tile(example("examples/backward/add_rmsnorm_backward.json", true), rows_of(262144), "sm_90a", h100) ==
          "r1024v4x4c16s1");
    CHECK(default_tile(layernorm_bwd, rows_of(524288), "sm_90a", h100) == "r512v8x8c16s5p4");
    // The ring in pieces keeps no values: add+RMSNorm's grad() spec with
    // dresidual (dx again) left out, as the torch op runs it, has one [M,N]
    // output and a cluster of two at 16,384 in f32, where keep measured slower.
    nlohmann::ordered_json once = spec_to_json(grad(example("examples/chains/add_rmsnorm.json", true)).backward);
    REQUIRE(once["outputs"].erase("dresidual") == 1);
    const KernelSpec add_rmsnorm_once = spec_from_json(once);
    CHECK(default_tile(add_rmsnorm_once, rows_of(16384), "sm_90a", h100) == "r1024v4x2c2s3p2");
    CHECK(default_tile(add_rmsnorm_once, rows_of(1024), "sm_90a", h100) == "r128v4x2s2k");
  }

  TEST_CASE("row default tile: the device's shared memory is a value, not a GPU") {
    const KernelSpec softmax = example("examples/chains/softmax.json");
    DeviceInfo small = assumed_device("sm_90a");
    small.shared_per_block = 100 * 1024;  // a third of it holds 16384 bf16 elements, not 32768
    CHECK(default_tile(softmax, rows_of(65536), "sm_90a", small) == "r512v8x4c4s1b");
    CHECK(default_tile(softmax, rows_of(262144), "sm_90a", small) == "r512v8x4c16s1b");
  }

  TEST_CASE("row default tile: without clusters and rings, and for very short rows, the plain default") {
    const KernelSpec softmax = example("examples/chains/softmax.json");
    const DeviceInfo a100 = assumed_device("sm_80");
    CHECK(default_tile(softmax, rows_of(4096), "sm_80", a100) == "r256v8x2");
    CHECK(default_tile(softmax, rows_of(65536), "sm_80", a100) == "r256v8x0");
    CHECK(default_tile(softmax, rows_of(4096), "", a100) == "r256v8x2");
    CHECK(default_tile(softmax, {64, 512, 0}, "sm_90a", assumed_device("sm_90a")) == "r256v8x1");
    // N = 4100 is no multiple of 8: vec 4 (8 bytes) cannot feed a ring's 16-byte copies.
    CHECK(default_tile(softmax, {64, 4100, 0}, "sm_90a", assumed_device("sm_90a")) == "r256v4x5");
  }

  TEST_CASE("row default tile: every row length gets a valid tile, for every row chain, dtype and device") {
    // Row lengths that are no power of two (N = 1000 once gave 250 threads a block).
    std::vector<std::int64_t> lengths;
    for (std::int64_t n = 1; n <= 4200; ++n) lengths.push_back(n);
    for (std::int64_t n = 4201; n <= 300000; n = n * 9 / 8 + 7) lengths.push_back(n);
    const char* chains[] = {"examples/chains/softmax.json",
                            "examples/chains/layernorm.json",
                            "examples/chains/add_rmsnorm.json",
                            "examples/chains/scaled_masked_softmax_dropout.json",
                            "examples/backward/softmax_backward.json",
                            "examples/backward/log_softmax_backward.json",
                            "examples/backward/layernorm_backward.json",
                            "examples/backward/add_rmsnorm_backward.json",
                            "examples/backward/scaled_masked_softmax_dropout_backward.json"};
    for (const char* path : chains)
      for (bool f32 : {false, true}) {
        const KernelSpec spec = example(path, f32);
        for (const char* target : {"sm_90a", "sm_80"}) {
          const DeviceInfo device = assumed_device(target);
          const std::string where = std::string(path) + (f32 ? " f32 on " : " on ") + target;
          int failed = 0;
          for (std::int64_t n : lengths) {
            try {
              (void)default_tile(spec, {16, n, 0}, target, device);
            } catch (const std::exception& e) {
              // Column sums need the whole row in one block without clusters: a
              // clear refusal for very long rows off sm_90 is the contract.
              if (target == std::string("sm_80") && n > 32768 &&
                  std::string(e.what()).find("no row tile holds rows") != std::string::npos)
                continue;
              if (++failed <= 3) {
                const std::string what = where + ", N = " + std::to_string(n) + ": " + e.what();
                FAIL_CHECK(what);
              }
            }
          }
          CHECK_MESSAGE(failed == 0, where << ": " << failed << " row lengths failed");
        }
      }
  }

  TEST_CASE("row default tile: a requested tile is kept as asked") {
    const KernelSpec softmax = example("examples/chains/softmax.json");
    const DeviceInfo h100 = assumed_device("sm_90a");
    const TileConfig asked = RowTile{256, 8, 2, 1};
    CHECK(family_for(softmax).resolve_tile(softmax, rows_of(4096), asked, "sm_90a", h100) == asked);
    CHECK(emit_kernel(softmax, rows_of(4096), asked, KernelPath::fastest, "sm_90a").tile == asked);
  }
}
