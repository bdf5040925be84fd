// `epifuse run CHAIN.json`: bind inputs (files or random), run on a device, and
// summarize or write the outputs.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "common.hpp"
#include "device.hpp"
#include "jit_options.hpp"
#include "epifuse/compare.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/json.hpp"
#include "epifuse/npy.hpp"
#include "epifuse/reference.hpp"

namespace epifuse::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

struct RunOptions {
  std::string chain;
  std::string shape;
  std::string device;
  std::vector<std::string> inputs;   // NAME=FILE.npy
  std::vector<std::string> outputs;  // NAME=FILE.npy
  std::string output_dir;
  std::string data_seed = "0";
  std::string seed = "0";
  std::string offset = "0";
  bool verify = false;
  TileOptions tile;
};

// Work above which the CPU reference takes long enough to deserve progress lines.
constexpr double k_large_run_flops = 1e8;
constexpr std::int64_t k_first_values = 8;

// Reads an --input file and checks it against the operand it binds; f32/f16/bf16
// files are converted to the operand's dtype (rounding to nearest even).
HostTensor load_input(const OperandDesc& want, const std::string& file) {
  HostTensor t;
  try {
    t = read_npy(file);
  } catch (const UserError& e) {
    throw UserError(fmt::format("--input {}: {}", want.name, e.what()));
  }
  EPIFUSE_CHECK(t.shape == want.shape, "--input {}={}: shape {} does not match the expected {} ({} operand)",
                want.name, file, shape_string(t.shape), shape_string(want.shape), to_string(want.dtype));
  if (t.dtype == want.dtype) return t;
  std::cerr << fmt::format("epifuse: note: input '{}' ({}) holds {}; converting to {}\n", want.name, file,
                           to_string(t.dtype), to_string(want.dtype));
  HostTensor converted = HostTensor::zeros(want.dtype, want.shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) converted.set(i, t.get(i));
  return converted;
}

// An output name becomes a file name under --output-dir: keep it to a plain name.
void check_file_name(const std::string& name) {
  bool ok = !name.empty() && name[0] != '.';
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.');
  EPIFUSE_CHECK(ok, "--output-dir: output '{}' is not a plain file name", name);
}

struct Summary {
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double mean = 0;
  std::int64_t nonfinite = 0;
  std::vector<float> first;
};

Summary summarize(const HostTensor& t) {
  Summary s;
  double sum = 0;
  std::int64_t finite = 0;
  const std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = t.get(i);
    if (i < k_first_values) s.first.push_back(v);
    if (!std::isfinite(v)) {
      ++s.nonfinite;
      continue;
    }
    s.min = std::min<double>(s.min, v);
    s.max = std::max<double>(s.max, v);
    sum += v;
    ++finite;
  }
  s.mean = finite ? sum / static_cast<double>(finite) : std::nan("");
  if (!finite) s.min = s.max = std::nan("");
  return s;
}

double flop_estimate(const KernelSpec& spec, const Shape& shape) {
  const double mn = static_cast<double>(shape.m) * static_cast<double>(shape.n);
  switch (spec.mainloop.kind) {
    case MainloopKind::elementwise: return mn * static_cast<double>(spec.graph.nodes().size());
    case MainloopKind::gemm: return 2 * mn * static_cast<double>(shape.k);
    case MainloopKind::dual_gemm: return 4 * mn * static_cast<double>(shape.k);
  }
  return mn;
}

void run(const RunOptions& opt) {
  // Everything the user gave is checked before any work starts.
  const KernelSpec spec = load_spec(opt.chain);
  verify(spec);
  const Shape shape = resolve_shape(opt.shape, spec);
  const std::uint64_t data_seed = parse_u64(opt.data_seed, "--data-seed");
  LaunchArgs args;
  args.seed = parse_u64(opt.seed, "--seed");
  args.offset = parse_u64(opt.offset, "--offset");

  const std::vector<OperandDesc> required = required_inputs(spec, shape);
  std::vector<std::string> required_names;
  for (const auto& d : required) required_names.push_back(d.name);
  std::map<std::string, std::string> input_files;
  for (const std::string& b : opt.inputs) {
    auto [name, file] = parse_binding(b, "--input");
    EPIFUSE_CHECK(std::find(required_names.begin(), required_names.end(), name) != required_names.end(),
                  "--input {}: the chain has no input '{}' (it takes: {})", b, name,
                  fmt::join(required_names, ", "));
    EPIFUSE_CHECK(input_files.emplace(name, file).second, "--input {}: '{}' is bound twice", b, name);
  }

  std::vector<std::string> output_names;
  for (const Output& o : spec.graph.outputs()) output_names.push_back(o.name);
  std::map<std::string, std::string> output_files;
  for (const std::string& b : opt.outputs) {
    auto [name, file] = parse_binding(b, "--output");
    EPIFUSE_CHECK(std::find(output_names.begin(), output_names.end(), name) != output_names.end(),
                  "--output {}: the chain has no output '{}' (it has: {})", b, name, fmt::join(output_names, ", "));
    EPIFUSE_CHECK(output_files.emplace(name, file).second, "--output {}: '{}' is named twice", b, name);
    const fs::path dir = fs::path(file).parent_path();
    EPIFUSE_CHECK(dir.empty() || fs::is_directory(dir), "--output {}: directory '{}' does not exist", b,
                  dir.string());
  }
  if (!opt.output_dir.empty()) {
    for (const auto& name : output_names) check_file_name(name);
    std::error_code ec;
    fs::create_directories(opt.output_dir, ec);
    EPIFUSE_CHECK(!ec && fs::is_directory(opt.output_dir), "--output-dir {}: cannot create it: {}",
                  opt.output_dir, ec ? ec.message() : "not a directory");
  }

  TensorMap given;
  Json inputs_json = Json::array();
  for (const OperandDesc& d : required) {
    Json j = {{"name", d.name}, {"dtype", to_string(d.dtype)}, {"shape", d.shape}};
    if (auto it = input_files.find(d.name); it != input_files.end()) {
      given.emplace(d.name, load_input(d, it->second));
      j["source"] = "file";
      j["file"] = it->second;
    } else {
      j["source"] = "random";
    }
    inputs_json.push_back(std::move(j));
  }
  const TensorMap inputs = make_inputs(spec, shape, data_seed, std::move(given));
  const Device device = choose_device(opt.device);
  EPIFUSE_CHECK(device != Device::cpu || !opt.tile.tile(),
                "--threads, --vec and --blocks-per-sm choose a GPU kernel's tile; the CPU reference has none");

  const std::string shape_text = spec.mainloop.kind == MainloopKind::elementwise
                                     ? fmt::format("M={} N={}", shape.m, shape.n)
                                     : fmt::format("M={} N={} K={}", shape.m, shape.n, shape.k);
  const bool large = flop_estimate(spec, shape) > k_large_run_flops;
  if (large)
    std::cerr << fmt::format("epifuse: running '{}' on {} ({}, about {:.2g} GFLOP)...\n", spec.name,
                             to_string(device), shape_text, flop_estimate(spec, shape) * 1e-9);
  const auto t0 = std::chrono::steady_clock::now();
  const TensorMap outputs = run_on_device(device, spec, shape, inputs, args, opt.tile.tile());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (large) std::cerr << fmt::format("epifuse: done in {:.3f} s\n", ms * 1e-3);

  Json outputs_json = Json::array();
  std::string text;
  for (const std::string& name : output_names) {
    auto it = outputs.find(name);
    EPIFUSE_ASSERT(it != outputs.end(), "the device returned no output '{}'", name);
    const HostTensor& t = it->second;
    Json j = {{"name", name}, {"dtype", to_string(t.dtype)}, {"shape", t.shape}};
    std::vector<std::string> written;
    if (auto f = output_files.find(name); f != output_files.end()) {
      write_npy(f->second, t);
      written.push_back(f->second);
    }
    if (!opt.output_dir.empty()) {
      const fs::path p = fs::path(opt.output_dir) / (name + ".npy");
      write_npy(p, t);
      written.push_back(p.string());
    }
    if (!written.empty()) j["files"] = written;
    const Summary s = summarize(t);
    j["min"] = s.min;  // NaN (no finite value) is written as null
    j["max"] = s.max;
    j["mean"] = s.mean;
    j["nonfinite"] = s.nonfinite;
    j["first"] = s.first;
    outputs_json.push_back(std::move(j));

    if (output_files.count(name)) {
      text += fmt::format("{}: {} {} -> {}\n", name, to_string(t.dtype), shape_string(t.shape), fmt::join(written, ", "));
      continue;
    }
    text += fmt::format("{}: {} {}  min {:.6g}  max {:.6g}  mean {:.6g}{}\n", name, to_string(t.dtype),
                        shape_string(t.shape), s.min, s.max, s.mean,
                        s.nonfinite ? fmt::format("  non-finite {}", s.nonfinite) : "");
    text += fmt::format("  first: {:.6g}{}\n", fmt::join(s.first, ", "), t.numel() > k_first_values ? ", ..." : "");
    if (!written.empty()) text += fmt::format("  written to {}\n", fmt::join(written, ", "));
  }

  // On the CPU the run *is* the reference: there is nothing independent to compare.
  // On a GPU, --verify evaluates the reference on the same inputs and compares
  // every output with the tolerance of its dtype (DESIGN §3).
  const char* verify_note = "the cpu device runs the reference evaluator itself; nothing to compare against";
  Json verify_json = {{"checked", false}, {"passed", true}, {"reason", verify_note}};
  std::string verify_text = fmt::format("verify: {}\n", verify_note);
  if (opt.verify && device != Device::cpu) {
    if (large) std::cerr << "epifuse: verifying against the CPU reference ...\n";
    const TensorMap want = evaluate(spec, shape, inputs, args);
    verify_json = {{"checked", true}, {"passed", true}, {"outputs", Json::array()}};
    verify_text.clear();
    for (const Output& o : spec.graph.outputs()) {
      const Comparison c = compare(outputs.at(o.name), want.at(o.name), tolerance_for(o.dtype, spec.precision));
      verify_json["outputs"].push_back({{"name", o.name}, {"passed", c.ok}, {"max_abs_error", c.max_abs_error},
                                        {"mismatches", c.mismatches}, {"message", c.message}});
      verify_text += c.ok ? fmt::format("verify {}: ok ({} elements, max abs error {:.3g})\n", o.name, c.checked,
                                        c.max_abs_error)
                          : fmt::format("verify {}: FAILED: {}\n", o.name, c.message);
      if (!c.ok) {
        verify_json["passed"] = false;
        session().exit_code = k_exit_target_failed;
      }
    }
  }
  if (session().json) {
    Json doc;
    doc["name"] = spec.name;
    doc["device"] = to_string(device);
    doc["shape"] = spec.mainloop.kind == MainloopKind::elementwise ? Json{shape.m, shape.n}
                                                                    : Json{shape.m, shape.n, shape.k};
    doc["seed"] = args.seed;
    doc["offset"] = args.offset;
    doc["data_seed"] = data_seed;
    doc["inputs"] = std::move(inputs_json);
    doc["outputs"] = std::move(outputs_json);
    doc["time_ms"] = ms;
    if (opt.verify) doc["verify"] = verify_json;
    print_json(doc);
    return;
  }
  std::cout << fmt::format("{} on {}: {}, seed {} offset {}, data seed {} ({:.3f} ms)\n", spec.name,
                           to_string(device), shape_text, args.seed, args.offset, data_seed, ms);
  std::cout << text;
  if (opt.verify) std::cout << verify_text;
}

}  // namespace

void add_run(CLI::App& app) {
  auto opt = std::make_shared<RunOptions>();
  CLI::App* sub = app.add_subcommand("run", "Run a chain on a device (or the CPU reference) and show or save its outputs");
  sub->add_option("chain", opt->chain, "the JSON op chain (docs/json-schema.md)")->required();
  sub->add_option("--shape", opt->shape,
                  "problem shape: M,N (elementwise; leading dims folded into M) or M,N,K (gemm, "
                  "dual_gemm); default: the chain's \"shape\"");
  sub->add_option("--device", opt->device,
                  "cuda, hip or cpu (the reference evaluator); default: the GPU present, else cpu")
      ->check(CLI::IsMember({"cuda", "hip", "cpu"}));
  sub->add_option("--input", opt->inputs,
                  "NAME=FILE.npy: bind an input (repeatable); GEMM operands are a [M,K], b [K,N] "
                  "(dual: a, b0, b1); inputs not given are drawn from --data-seed")
      ->allow_extra_args(false);
  sub->add_option("--output", opt->outputs, "NAME=FILE.npy: write an output there (repeatable)")
      ->allow_extra_args(false);
  sub->add_option("--output-dir", opt->output_dir, "write every output as DIR/NAME.npy (DIR is created)");
  sub->add_option("--data-seed", opt->data_seed, "seed of the random inputs (uint64, decimal or 0x hex)")->capture_default_str();
  sub->add_option("--seed", opt->seed, "dropout seed (uint64, decimal or 0x hex)")->capture_default_str();
  sub->add_option("--offset", opt->offset, "dropout Philox offset (uint64, decimal or 0x hex)")->capture_default_str();
  add_tile_options(*sub, opt->tile);
  sub->add_flag("--verify", opt->verify, "check the device's outputs against the CPU reference");
  add_json_flag(*sub);
  sub->footer(
      "Files are .npy, logical row-major: full tensors [M,N], row vectors [N], column vectors\n"
      "[M], scalars 0-d. f32 is <f4, f16 <f2, bf16 <u2 holding the raw bfloat16 bits\n"
      "(arr.view(np.uint16) of an ml_dtypes.bfloat16 array). Other float files are converted.\n"
      "Example: epifuse run examples/chains/gemm_bias_relu.json --shape 64,128,256 --output-dir out");
  sub->callback([opt] { run(*opt); });
}

}  // namespace epifuse::cli
