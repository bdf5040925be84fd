// `epifuse tune CHAIN.json --shape ...`: choose the tile for a shape on the GPU.
// Candidates compile in parallel threads, each is timed on random inputs, the
// best few again for longer; the choice is remembered by this process's JIT and
// kept in the disk cache (docs/disk-cache.md), where later processes find it.
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "bench/bench.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "epifuse/json.hpp"
#include "epifuse/tile_format.hpp"

namespace epifuse::cli {
namespace {

struct TuneOptions {
  std::string chain;
  std::vector<std::string> shapes;
  std::vector<std::string> tiles;  ///< --tile: time these instead of the family's candidates
};

// Work per launch, for a rate beside each time: FLOPs of a GEMM, else bytes.
std::string rate(const KernelSpec& spec, const Shape& s, double ms) {
  if (spec.mainloop.kind == MainloopKind::elementwise) return "";
  const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k) *
                       (spec.mainloop.kind == MainloopKind::dual_gemm ? 2 : 1);
  return fmt::format("{:8.1f} TFLOP/s", flops / (ms * 1e9));
}

void tune_command(const TuneOptions& opt) {
  const KernelSpec spec = load_spec(opt.chain);
  std::vector<Shape> shapes;
  for (const std::string& s : opt.shapes) shapes.push_back(parse_shape(s, spec));
  if (shapes.empty()) shapes.push_back(resolve_shape("", spec));
  std::vector<TileConfig> tiles;
  for (const std::string& t : opt.tiles) tiles.push_back(parse_tile(t));
  for (const Shape& s : shapes) require_nonempty(s, "--shape");
  Jit jit;  // the GPU's target; RuntimeError without one
  nlohmann::ordered_json doc = {{"chain", opt.chain}, {"target", jit.target()}, {"results", nlohmann::ordered_json::array()}};
  for (const Shape& shape : shapes) {
    const std::string shape_text = fmt::format("{},{},{}", shape.m, shape.n, shape.k);
    const std::vector<TileConfig> candidates = tiles.empty() ? jit.tile_candidates(spec, shape) : tiles;
    std::cerr << fmt::format("epifuse: tuning {} at {}: compiling {} candidates in parallel, then timing them ...\n",
                             printable(opt.chain), shape_text, candidates.size());
    const TuneReport r = tune_on_random_data(jit, spec, shape, 1, {}, candidates);
    nlohmann::ordered_json res = {{"shape", {shape.m, shape.n, shape.k}}, {"tile", to_string(r.result.tile)},
                                  {"ms", r.result.ms}, {"seconds", r.seconds},
                                  {"candidates", nlohmann::ordered_json::array()}};
    for (const auto& c : r.result.all)
      res["candidates"].push_back({{"tile", to_string(c.tile)}, {"ms", c.ms}, {"compile_ms", c.compile_ms}});
    if (session().json) {
      doc["results"].push_back(std::move(res));
      continue;
    }
    std::cout << fmt::format("== {} at {} ({} of {} candidates ran, {:.2f} s with compiles)\n", printable(opt.chain), shape_text,
                             r.result.all.size(), r.candidates, r.seconds);
    for (const auto& c : r.result.all)
      std::cout << fmt::format("  {:<24} {:10.4f} ms {}  (compile {:.0f} ms){}\n", to_string(c.tile), c.ms,
                               rate(spec, shape, c.ms), c.compile_ms, c.tile == r.result.tile ? "   <- chosen" : "");
    std::cout << fmt::format("  chosen: {} ({:.4f} ms in the longer second round)\n", to_string(r.result.tile),
                             r.result.ms);
  }
  if (session().json) print_json(doc);
}

}  // namespace

void add_tune(CLI::App& app) {
  auto opt = std::make_shared<TuneOptions>();
  CLI::App* sub = app.add_subcommand("tune", "Choose the tile configuration for a shape on the GPU (timed candidates)");
  sub->add_option("chain", opt->chain, "JSON op chain")->required();
  sub->add_option("--shape", opt->shapes, "M,N (elementwise) or M,N,K (GEMM kinds), repeatable; default the chain's shape");
  sub->add_option("--tile", opt->tiles,
                  fmt::format("tile to time instead of the built-in candidates ({}); repeatable", tile_forms()));
  add_json_flag(*sub);
  sub->footer("The choice is kept by this process's JIT and by the disk cache (EPIFUSE_CACHE=0 turns it off), so later runs of the same chain and shape use it.");
  sub->callback([opt] { tune_command(*opt); });
}

}  // namespace epifuse::cli
