// `epifuse bench CHAIN.json --shape M,N [--shape ...]`: the fused kernel, the
// same chain unfused, and the copy ceiling for exactly the fused kernel's
// bytes, all measured in one run; ratios, a block-size sweep, --json. GEMM
// chains (--shape M,N,K) get a table against cuBLAS instead (docs/bench.md).
#include <filesystem>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "backend/device_runtime.hpp"
#include "bench/bench.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "epifuse/json.hpp"
#include "epifuse/tile_format.hpp"
#include "io/text_file.hpp"

namespace epifuse::cli {
namespace {

struct BenchCliOptions {
  std::string chain;
  std::vector<std::string> shapes;
  std::vector<std::string> lds;  // NAME=LD, every shape
  std::int64_t batch = 1;                  // --batch, every shape
  std::vector<std::string> batch_strides;  // NAME=S
  int repeats = 30;
  std::string tile;  ///< --tile
  bool no_tune = false, no_unfused = false, no_sweep = false, no_cublas = false, seeds_on_device = false;
  double min_of_copy = 0;
  std::string seed = "0", offset = "0";
  std::vector<std::string> variants;
};

// A variant's kernel source (`--variant`): a text file of at most 16 MiB.
std::string read_variant(const std::string& path) {
  constexpr std::size_t k_max = 16u << 20;
  std::string text = read_text_capped(path, k_max, "the --variant source");
  if (text.size() > k_max) throw UserError(fmt::format("--variant {}: more than 16 MiB of source", path));
  return text;
}

nlohmann::ordered_json to_json(const GemmBenchReport& g, const Shape& shape) {
  nlohmann::ordered_json j;
  j["shape"] = {shape.m, shape.n, shape.k};
  j["flops"] = g.flops;
  j["cublaslt"] = g.cublaslt.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(g.cublaslt);
  j["rows"] = nlohmann::ordered_json::object();
  for (const GemmRow& row : g.rows) {
    nlohmann::ordered_json o = {{"label", row.label}, {"detail", row.detail}, {"kernels", row.kernels},
                                {"ms", row.ms},       {"tflops", row.tflops}};
    if (row.of_cublas) o["of_cublas"] = *row.of_cublas;
    if (row.bytes) o["bytes"] = row.bytes;
    j["rows"][row.key] = o;
  }
  j["skipped"] = g.skipped;
  j["checks"] = nlohmann::ordered_json::array();
  for (const GemmCheck& c : g.checks)
    j["checks"].push_back(
        {{"what", c.what}, {"max_abs_diff", c.max_abs_diff}, {"max_abs", c.max_abs}, {"ok", c.ok}});
  return j;
}

nlohmann::ordered_json to_json(const BenchReport& r) {
  nlohmann::ordered_json j;
  j["device"] = r.device;
  j["shape"] = {r.shape.m, r.shape.n};
  j["bytes"] = r.bytes;
  j["copy"] = {{"ms", r.copy_ms}, {"gbps", r.copy_gbps}};
  j["fused"] = {{"tile", to_string(r.tile)},    {"ms", r.fused_ms},        {"gbps", r.fused_gbps},
                {"of_copy", r.fused_of_copy}, {"registers", r.registers}};
  if (r.per_row_grid_ms) j["per_row_grid"] = {{"ms", *r.per_row_grid_ms}, {"gbps", r.bytes / (*r.per_row_grid_ms * 1e6)}};
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
  j["host"] = {{"compile_ms", r.compile_ms},
               {"compile_from_disk", r.compile_from_disk},
               {"hit_us", r.hit_us},
               {"launch_us", r.launch_us},
               {"disk_first_launch_ms",
                r.disk_first_launch_ms ? nlohmann::ordered_json(*r.disk_first_launch_ms) : nlohmann::ordered_json()}};
  if (r.gemm) j["gemm"] = to_json(*r.gemm, r.shape);
  if (!r.variants.empty()) {
    j["variants"] = nlohmann::ordered_json::object();
    for (const VariantRow& v : r.variants) {
      if (!v.skipped.empty()) {
        j["variants"][v.label] = {{"skipped", v.skipped}};
        continue;
      }
      j["variants"][v.label] = {{"ms", v.ms},
                                {"gbps", v.gbps},
                                {"of_copy", v.of_copy},
                                {"fused_ms", v.fused_ms},
                                {"of_fused", v.ms / v.fused_ms},
                                {"max_abs_diff", v.max_abs_diff},
                                {"max_abs", v.max_abs},
                                {"ok", v.ok}};
    }
  }
  return j;
}

// A GEMM chain: TFLOP/s and time against cuBLAS alone; no copy ceiling or sweep.
// The host costs: the first compile (NVRTC, or a disk read), a memory-cache
// hit, a launch, and a new process's first launch from the disk cache.
void print_host(const BenchReport& r) {
  std::cout << fmt::format("  host: {} {:.1f} ms, cache hit (key + lookup) {:.2f} us, launch {:.2f} us",
                           r.compile_from_disk ? "first compile read from the disk cache in" : "cold compile",
                           r.compile_ms, r.hit_us, r.launch_us);
  if (r.disk_first_launch_ms) std::cout << fmt::format(", first launch from disk {:.2f} ms", *r.disk_first_launch_ms);
  std::cout << "\n";
}

void print_gemm_report(const BenchReport& r, const KernelSpec& spec) {
  const GemmBenchReport& g = *r.gemm;
  const Mainloop& ml = spec.mainloop;
  std::cout << fmt::format("== {} x {} x {} {} (A {}, B {}) on {}\n", r.shape.m, r.shape.n, r.shape.k,
                           to_string(ml.a), to_string(ml.a_layout), to_string(ml.b_layout), r.device);
  if (!g.cublaslt.empty()) std::cout << "  " << g.cublaslt << "\n";
  std::cout << fmt::format("  {:<32} {:>10} {:>9} {:>12} {:>9}\n", "", "ms", "TFLOP/s", "time/cuBLAS", "MiB");
  for (const GemmRow& row : g.rows)
    std::cout << fmt::format("  {:<32} {:>10.4f} {:>9.1f} {:>12} {:>9}   {}\n", row.label, row.ms, row.tflops,
                             row.of_cublas ? fmt::format("{:.2f}x", *row.of_cublas) : "-",
                             row.bytes ? fmt::format("{:.1f}", static_cast<double>(row.bytes) / (1 << 20)) : "-",
                             row.detail);
  if (r.unfused_ms)
    std::cout << fmt::format("  fused is {:.2f}x faster than cuBLAS + one kernel per op\n", r.speedup_vs_unfused);
  for (const std::string& line : g.skipped) std::cout << "  " << line << "\n";
  for (const GemmCheck& c : g.checks)
    std::cout << fmt::format("  check {}: max |diff| {:.4g} (max |value| {:.4g}): {}\n", c.what, c.max_abs_diff,
                             c.max_abs, c.ok ? "ok" : "MISMATCH");
  print_host(r);
}

void print_report(const BenchReport& r) {
  std::cout << fmt::format("== {} x {} on {} ({:.1f} MB moved)\n", r.shape.m, r.shape.n, r.device, r.bytes / 1e6);
  std::cout << fmt::format("  {:<28} {:>10} {:>10} {:>9}\n", "", "ms", "GB/s", "of copy");
  std::cout << fmt::format("  {:<28} {:>10.4f} {:>10.0f} {:>8.1f}%\n", "copy ceiling (DtoD)", r.copy_ms, r.copy_gbps,
                           100.0);
  std::cout << fmt::format("  {:<28} {:>10.4f} {:>10.0f} {:>8.1f}%\n", "fused " + to_string(r.tile), r.fused_ms,
                           r.fused_gbps, 100 * r.fused_of_copy);
  if (r.per_row_grid_ms)
    std::cout << fmt::format("  {:<28} {:>10.4f} {:>10.0f} {:>8.1f}%\n", "same, one block per row", *r.per_row_grid_ms,
                             r.bytes / (*r.per_row_grid_ms * 1e6), 100 * r.bytes / (*r.per_row_grid_ms * 1e6) / r.copy_gbps);
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
  for (const VariantRow& v : r.variants) {
    if (!v.skipped.empty()) {
      std::cout << fmt::format("  variant {}: skipped: {}\n", v.label, v.skipped);
      continue;
    }
    std::cout << fmt::format("  {:<28} {:>10.4f} {:>10.0f} {:>8.1f}%   {:.3f}x the fused kernel's {:.4f} ms in the same turns\n",
                             "variant " + v.label, v.ms, v.gbps, 100 * v.of_copy, v.ms / v.fused_ms, v.fused_ms);
    std::cout << fmt::format("  check variant {} vs fused: max |diff| {:.4g} (max |value| {:.4g}): {}\n", v.label,
                             v.max_abs_diff, v.max_abs, !v.ok ? "MISMATCH" : v.max_abs_diff == 0 ? "ok, bit-equal" : "ok");
  }
  print_host(r);
}

std::string shape_text(const KernelSpec& spec, const Shape& s) {
  return spec.mainloop.kind == MainloopKind::elementwise ? fmt::format("{} x {}", s.m, s.n)
                                                         : fmt::format("{} x {} x {}", s.m, s.n, s.k);
}

void bench_command(const BenchCliOptions& opt) {
  const KernelSpec spec = load_spec(opt.chain);
  std::vector<Shape> shapes;
  for (const std::string& s : opt.shapes) shapes.push_back(parse_shape(s, spec));
  if (shapes.empty()) shapes.push_back(resolve_shape("", spec));
  for (Shape& s : shapes) apply_lds(opt.lds, spec, s);
  for (Shape& s : shapes) apply_batch(opt.batch, opt.batch_strides, spec, s);
  for (const Shape& s : shapes) require_nonempty(s, "--shape");
  BenchOptions bo;
  for (const std::string& path : opt.variants)
    bo.variants.push_back({std::filesystem::path(path).filename().string(), read_variant(path)});
  if (!opt.tile.empty()) {
    if (opt.no_tune) throw UserError("--tile names the fused kernel's tile, --no-tune asks for the default one: give one or the other");
    bo.tile = parse_tile(opt.tile);
  }
  Jit jit;  // the GPU's target; RuntimeError/UserError without one
  bo.repeats = opt.repeats;
  bo.tune = !opt.no_tune;
  bo.unfused = !opt.no_unfused;
  bo.sweep = !opt.no_sweep;
  bo.cublas = !opt.no_cublas;
  bo.args = {parse_u64(opt.seed, "--seed"), parse_u64(opt.offset, "--offset")};
  // --seeds-on-device: every launch reads {seed, 0} from device memory (Note
  // [Seeds on the device]), as the PyTorch module's launches do; the masks are
  // the same, the cost of the reads is what it times.
  std::optional<backend::DeviceMemory> state;
  if (opt.seeds_on_device) {
    backend::DeviceRuntime& drv = backend::device_runtime(backend::vendor_of(jit.target()));
    const std::uint64_t words[2] = {bo.args.seed, 0};
    state.emplace(drv, sizeof words);
    drv.copy_to_device(state->ptr(), words, sizeof words);
    bo.args.rng_state = state->ptr();
  }
  nlohmann::ordered_json doc;
  doc["chain"] = opt.chain;
  doc["seeds_on_device"] = opt.seeds_on_device;
  doc["results"] = nlohmann::ordered_json::array();
  for (const Shape& shape : shapes) {
    if (!session().json) std::cerr << fmt::format("epifuse: benchmarking {} ...\n", shape_text(spec, shape));
    const BenchReport r = bench(jit, spec, shape, bo);
    if (session().json && r.gemm)  // stdout holds the JSON; say what was left out on stderr too
      for (const std::string& line : r.gemm->skipped) std::cerr << "epifuse: " << line << "\n";
    if (session().json)
      for (const VariantRow& v : r.variants)
        if (!v.skipped.empty()) std::cerr << fmt::format("epifuse: variant {}: skipped: {}\n", v.label, v.skipped);
    if (session().json)
      doc["results"].push_back(to_json(r));
    else if (r.gemm)
      print_gemm_report(r, spec);
    else
      print_report(r);
    // A baseline that disagrees with the fused kernel is a failed verification.
    if (r.gemm)
      for (const GemmCheck& c : r.gemm->checks)
        if (!c.ok) session().exit_code = k_exit_target_failed;
    for (const VariantRow& v : r.variants)
      if (!v.ok) session().exit_code = k_exit_target_failed;
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
      "bench",
      "Time the fused kernel against the unfused chain and the same-run copy ceiling; GEMM chains against "
      "cuBLASLt (needs a GPU)");
  sub->add_option("chain", opt->chain, "JSON op chain")->required();
  sub->add_option("--shape", opt->shapes, "M,N (GEMM chains: M,N,K; repeatable); default the chain's shape");
  sub->add_option("--ld", opt->lds,
                  "NAME=LD: a GEMM operand's leading dimension for every shape (a, b; dual: a, b0, b1), or a "
                  "chain's full [M,N] input's or output's (repeatable): the fused kernel is the strided variant; the "
                  "cuBLAS and unfused baselines are skipped")
      ->allow_extra_args(false);
  add_batch_options(*sub, opt->batch, opt->batch_strides);
  sub->add_option("--repeats", opt->repeats, "Timed batches per measurement (median reported)")
      ->check(CLI::Range(3, 10000));
  sub->add_flag("--no-tune", opt->no_tune, "Use the default tile instead of autotuning");
  sub->add_option("--tile", opt->tile,
                  fmt::format("The fused kernel's tile instead of autotuning ({}); emit a --variant for the same tile",
                              tile_forms()))
      ->type_name("TILE");
  sub->add_flag("--no-unfused", opt->no_unfused, "Skip the one-kernel-per-op baseline");
  sub->add_flag("--no-sweep", opt->no_sweep, "Skip the block-size sweep");
  sub->add_flag("--no-cublas", opt->no_cublas, "GEMM chains: skip the cuBLASLt baselines");
  sub->add_option("--min-of-copy", opt->min_of_copy,
                  "Exit 1 when the fused kernel reaches less than this fraction of copy bandwidth")
      ->check(CLI::Range(0.0, 2.0));
  sub->add_option("--variant", opt->variants,
                  "Another source of the fused kernel (epifuse emit of another build, or edited), timed as its own row "
                  "in turns with the others (elementwise and row chains: with the fused kernel) and checked against "
                  "the fused outputs; repeatable. "
                  "With --tile T, emit it with --tile T; with --no-tune, for the default tile (with tuning, for the tuned one): the same kernel name")
      ->type_name("FILE");
  sub->add_option("--seed", opt->seed, "Dropout seed (uint64)");
  sub->add_option("--offset", opt->offset, "Dropout offset (uint64)");
  sub->add_flag("--seeds-on-device", opt->seeds_on_device,
                "Launch with the seed read from device memory (as the PyTorch module does), the same masks");
  add_json_flag(*sub);
  sub->callback([opt] { bench_command(*opt); });
}

}  // namespace epifuse::cli
