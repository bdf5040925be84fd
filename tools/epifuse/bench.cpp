// `epifuse bench CHAIN.json --shape M,N [--shape ...]`: the fused kernel, the
// same chain unfused, and the copy ceiling for exactly the fused kernel's
// bytes, all measured in one run; ratios, a block-size sweep, --json.
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "common.hpp"
#include "epifuse/bench.hpp"
#include "epifuse/json.hpp"

namespace epifuse::cli {
namespace {

struct BenchCliOptions {
  std::string chain;
  std::vector<std::string> shapes;
  int repeats = 30;
  bool no_tune = false, no_unfused = false, no_sweep = false;
  double min_of_copy = 0;
  std::string seed = "0", offset = "0";
};

nlohmann::ordered_json to_json(const BenchReport& r) {
  nlohmann::ordered_json j;
  j["device"] = r.device;
  j["shape"] = {r.shape.m, r.shape.n};
  j["bytes"] = r.bytes;
  j["copy"] = {{"ms", r.copy_ms}, {"gbps", r.copy_gbps}};
  j["fused"] = {{"tile", to_string(r.tile)},    {"ms", r.fused_ms},        {"gbps", r.fused_gbps},
                {"of_copy", r.fused_of_copy}, {"registers", r.registers}};
  if (r.unfused_ms)
    j["unfused"] = {{"kernels", r.unfused_kernels}, {"ms", *r.unfused_ms}, {"speedup", r.speedup_vs_unfused}};
  j["sweep"] = nlohmann::ordered_json::array();
  for (const SweepRow& s : r.sweep)
    j["sweep"].push_back({{"threads", s.tile.threads},
                          {"vec", s.tile.vec},
                          {"blocks_per_sm", s.tile.blocks_per_sm},
                          {"ms", s.ms},
                          {"gbps", s.gbps},
                          {"of_copy", s.of_copy}});
  j["host"] = {{"compile_ms", r.compile_ms}, {"hit_us", r.hit_us}, {"launch_us", r.launch_us}};
  return j;
}

void print_report(const BenchReport& r) {
  std::cout << fmt::format("== {} x {} on {} ({:.1f} MB moved)\n", r.shape.m, r.shape.n, r.device, r.bytes / 1e6);
  std::cout << fmt::format("  {:<28} {:>10} {:>10} {:>9}\n", "", "ms", "GB/s", "of copy");
  std::cout << fmt::format("  {:<28} {:>10.4f} {:>10.0f} {:>8.1f}%\n", "copy ceiling (DtoD)", r.copy_ms, r.copy_gbps,
                           100.0);
  std::cout << fmt::format("  {:<28} {:>10.4f} {:>10.0f} {:>8.1f}%\n", "fused " + to_string(r.tile), r.fused_ms,
                           r.fused_gbps, 100 * r.fused_of_copy);
  if (r.unfused_ms)
    std::cout << fmt::format("  {:<28} {:>10.4f} {:>10.0f} {:>8.1f}%   fused is {:.2f}x faster\n",
                             fmt::format("unfused ({} kernels)", r.unfused_kernels), *r.unfused_ms,
                             r.bytes / (*r.unfused_ms * 1e6), 100 * r.bytes / (*r.unfused_ms * 1e6) / r.copy_gbps,
                             r.speedup_vs_unfused);
  if (!r.sweep.empty()) {
    std::cout << "  block-size sweep (vec " << r.sweep.front().tile.vec << "):\n";
    std::cout << fmt::format("  {:>8} {:>14} {:>10} {:>10} {:>9}\n", "threads", "blocks/SM", "ms", "GB/s", "of copy");
    for (const SweepRow& s : r.sweep)
      std::cout << fmt::format("  {:>8} {:>14} {:>10.4f} {:>10.0f} {:>8.1f}%\n", s.tile.threads,
                               s.tile.blocks_per_sm ? std::to_string(s.tile.blocks_per_sm) : "cover", s.ms, s.gbps,
                               100 * s.of_copy);
  }
  std::cout << fmt::format("  host: cold compile {:.1f} ms, cache hit (key + lookup) {:.2f} us, launch {:.2f} us\n",
                           r.compile_ms, r.hit_us, r.launch_us);
}

void bench_command(const BenchCliOptions& opt) {
  const KernelSpec spec = load_spec(opt.chain);
  std::vector<Shape> shapes;
  for (const std::string& s : opt.shapes) shapes.push_back(parse_shape(s, spec));
  if (shapes.empty()) shapes.push_back(resolve_shape("", spec));
  Jit jit;  // the GPU's target; RuntimeError/UserError without one
  BenchOptions bo;
  bo.repeats = opt.repeats;
  bo.tune = !opt.no_tune;
  bo.unfused = !opt.no_unfused;
  bo.sweep = !opt.no_sweep;
  bo.args = {parse_u64(opt.seed, "--seed"), parse_u64(opt.offset, "--offset")};
  nlohmann::ordered_json doc;
  doc["chain"] = opt.chain;
  doc["results"] = nlohmann::ordered_json::array();
  for (const Shape& shape : shapes) {
    if (!session().json) std::cerr << fmt::format("epifuse: benchmarking {} x {} ...\n", shape.m, shape.n);
    const BenchReport r = bench(jit, spec, shape, bo);
    if (session().json)
      doc["results"].push_back(to_json(r));
    else
      print_report(r);
    if (opt.min_of_copy > 0 && r.fused_of_copy < opt.min_of_copy) {
      session().exit_code = k_exit_target_failed;
      if (!session().json)
        std::cout << fmt::format("  TARGET MISSED: {:.1f}% of copy < {:.1f}%\n", 100 * r.fused_of_copy,
                                 100 * opt.min_of_copy);
    }
  }
  if (session().json) print_json(doc);
}

}  // namespace

void add_bench(CLI::App& app) {
  auto opt = std::make_shared<BenchCliOptions>();
  CLI::App* sub = app.add_subcommand(
      "bench", "Time the fused kernel against the unfused chain and the same-run copy ceiling (needs a GPU)");
  sub->add_option("chain", opt->chain, "JSON op chain")->required();
  sub->add_option("--shape", opt->shapes, "M,N (repeatable); default the chain's shape");
  sub->add_option("--repeats", opt->repeats, "Timed batches per measurement (median reported)")
      ->check(CLI::Range(3, 10000));
  sub->add_flag("--no-tune", opt->no_tune, "Use the default tile instead of autotuning");
  sub->add_flag("--no-unfused", opt->no_unfused, "Skip the one-kernel-per-op baseline");
  sub->add_flag("--no-sweep", opt->no_sweep, "Skip the block-size sweep");
  sub->add_option("--min-of-copy", opt->min_of_copy,
                  "Exit 1 when the fused kernel reaches less than this fraction of copy bandwidth")
      ->check(CLI::Range(0.0, 2.0));
  sub->add_option("--seed", opt->seed, "Dropout seed (uint64)");
  sub->add_option("--offset", opt->offset, "Dropout offset (uint64)");
  add_json_flag(*sub);
  sub->callback([opt] { bench_command(*opt); });
}

}  // namespace epifuse::cli
