// `epifuse run CHAIN.json`: bind inputs (files or random), run on a device, and
// summarize or write the outputs. run() reads as its three steps: check and
// bind everything the user gave (before any work), run, report.
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
#include "ir/names.hpp"

namespace epifuse::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

struct RunOptions {
  std::string chain;
  std::string shape;
  std::vector<std::string> lds;  // NAME=LD
  std::int64_t batch = 1;                // --batch
  std::vector<std::string> batch_strides;  // NAME=S
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

// Everything a run needs, checked: the spec, the shape, the seeds, and where
// each operand comes from and each output goes.
struct RunPlan {
  KernelSpec spec;
  std::string label;  // chain_label: the name, or the file name of an unnamed chain
  Shape shape;
  std::uint64_t data_seed = 0;
  LaunchArgs args;
  std::vector<OperandDesc> required;
  std::map<std::string, std::string> input_files;   // operand -> file
  std::vector<std::string> output_names;            // in the chain's order
  std::map<std::string, std::string> output_files;  // output -> file
  std::string output_dir;
};

// What the run produced, for the report.
struct RunResult {
  Device device = Device::cpu;
  TensorMap inputs, outputs;
  double ms = 0;
  bool large = false;
};

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
  std::cerr << fmt::format("epifuse: note: input '{}' ({}) holds {}; converting to {}\n", want.name, printable(file),
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
  const double mn = static_cast<double>(shape.batch) * static_cast<double>(shape.m) * static_cast<double>(shape.n);
  switch (spec.mainloop.kind) {
    case MainloopKind::elementwise: return mn * static_cast<double>(spec.graph.nodes().size());
    case MainloopKind::gemm: return 2 * mn * static_cast<double>(shape.k);
    case MainloopKind::dual_gemm: return 4 * mn * static_cast<double>(shape.k);
  }
  return mn;
}

std::string shape_text(const KernelSpec& spec, const Shape& shape) {
  if (spec.mainloop.kind == MainloopKind::elementwise) return fmt::format("M={} N={}", shape.m, shape.n);
  std::string s = fmt::format("M={} N={} K={}", shape.m, shape.n, shape.k);
  // --ld: the strided operands (Note [Strided operands]), as the kernel reads them.
  const std::int64_t lds[] = {shape.lda, shape.ldb, shape.ldb1};
  const auto names = names::gemm_operand_names(spec.mainloop.kind);
  for (std::size_t i = 0; i < names.size(); ++i)
    if (gemm_operand_strided(spec.mainloop, shape, static_cast<int>(i))) s += fmt::format(" ld {}={}", names[i], lds[i]);
  // Note [Strided epilogue tensors]: the strided inputs and outputs.
  const Graph& g = spec.graph;
  for (std::size_t i = 0; i < g.inputs().size(); ++i)
    if (input_strided(shape, i)) s += fmt::format(" ld {}={}", g.node(g.inputs()[i]).name, input_ld(shape, i));
  for (std::size_t j = 0; j < g.outputs().size(); ++j)
    if (output_strided(shape, j)) s += fmt::format(" ld {}={}", g.outputs()[j].name, output_ld(shape, j));
  if (shape.batch > 1) {  // Note [Batched GEMM]: the batch and each operand's batch stride
    s += fmt::format(" batch {}", shape.batch);
    for (std::size_t i = 0; i < names.size(); ++i)
      s += fmt::format(" {}:{}", names[i], gemm_operand_batch_stride(spec.mainloop, shape, static_cast<int>(i)));
  }
  return s;
}

// --input NAME=FILE: each names an operand the chain takes, once.
std::map<std::string, std::string> input_bindings(const RunOptions& opt, const std::vector<OperandDesc>& required) {
  std::vector<std::string> names;
  for (const auto& d : required) names.push_back(d.name);
  std::map<std::string, std::string> files;
  for (const std::string& b : opt.inputs) {
    auto [name, file] = parse_binding(b, "--input");
    EPIFUSE_CHECK(std::find(names.begin(), names.end(), name) != names.end(),
                  "--input {}: the chain has no input '{}' (it takes: {})", b, name, fmt::join(names, ", "));
    EPIFUSE_CHECK(files.emplace(name, file).second, "--input {}: '{}' is bound twice", b, name);
  }
  return files;
}

// Where --output-dir writes output `name`.
fs::path output_dir_file(const RunPlan& plan, const std::string& name) {
  return fs::path(plan.output_dir) / (name + ".npy");
}

// --output NAME=FILE and --output-dir: checked before any work, so that a
// long run does not end in a path that could never be written.
void output_bindings(const RunOptions& opt, RunPlan& plan) {
  for (const Output& o : plan.spec.graph.outputs()) plan.output_names.push_back(o.name);
  const auto& names = plan.output_names;
  // The directory first, so that an --output may name a file in it.
  plan.output_dir = opt.output_dir;
  if (!plan.output_dir.empty()) {
    for (const auto& name : names) check_file_name(name);
    std::error_code ec;
    fs::create_directories(plan.output_dir, ec);
    EPIFUSE_CHECK(!ec && fs::is_directory(plan.output_dir), "--output-dir {}: cannot create it: {}",
                  plan.output_dir, ec ? ec.message() : "not a directory");
  }
  // No two outputs may land in one file: the later would replace the earlier
  // and the run would still end in exit code 0.
  OutputFiles files;
  for (const std::string& b : opt.outputs) {
    auto [name, file] = parse_binding(b, "--output");
    EPIFUSE_CHECK(std::find(names.begin(), names.end(), name) != names.end(),
                  "--output {}: the chain has no output '{}' (it has: {})", b, name, fmt::join(names, ", "));
    EPIFUSE_CHECK(plan.output_files.emplace(name, file).second, "--output {}: '{}' is named twice", b, name);
    const fs::path dir = fs::path(file).parent_path();
    std::error_code ec;
    EPIFUSE_CHECK(dir.empty() || fs::exists(dir, ec), "--output {}: directory '{}' does not exist", b,
                  dir.string());
    EPIFUSE_CHECK(dir.empty() || fs::is_directory(dir, ec), "--output {}: '{}' is not a directory", b,
                  dir.string());
    files.add(fmt::format("--output {}", b), file);
  }
  if (!plan.output_dir.empty())
    for (const auto& name : names)
      files.add(fmt::format("--output-dir {} (output {})", plan.output_dir, name), output_dir_file(plan, name));
}

// Step 1: everything the user gave is checked before any work starts.
RunPlan plan_run(const RunOptions& opt) {
  RunPlan plan;
  plan.spec = load_spec(opt.chain);
  verify(plan.spec);
  plan.label = chain_label(plan.spec, opt.chain);
  plan.shape = resolve_shape(opt.shape, plan.spec);
  apply_lds(opt.lds, plan.spec, plan.shape);
  apply_batch(opt.batch, opt.batch_strides, plan.spec, plan.shape);
  plan.data_seed = parse_u64(opt.data_seed, "--data-seed");
  plan.args.seed = parse_u64(opt.seed, "--seed");
  plan.args.offset = parse_u64(opt.offset, "--offset");
  plan.required = required_inputs(plan.spec, plan.shape);
  plan.input_files = input_bindings(opt, plan.required);
  output_bindings(opt, plan);
  return plan;
}

// Reads the --input files; the other operands are drawn from --data-seed.
TensorMap bind_inputs(const RunPlan& plan, Json& inputs_json) {
  TensorMap given;
  inputs_json = Json::array();
  for (const OperandDesc& d : plan.required) {
    Json j = {{"name", d.name}, {"dtype", to_string(d.dtype)}, {"shape", d.shape}};
    if (auto it = plan.input_files.find(d.name); it != plan.input_files.end()) {
      given.emplace(d.name, load_input(d, it->second));
      j["source"] = "file";
      j["file"] = it->second;
    } else {
      j["source"] = "random";
    }
    inputs_json.push_back(std::move(j));
  }
  return make_inputs(plan.spec, plan.shape, plan.data_seed, std::move(given));
}

// Step 2: run on the device, timed, with progress lines for a long CPU run.
RunResult execute(const RunPlan& plan, const RunOptions& opt, TensorMap inputs) {
  RunResult r;
  r.inputs = std::move(inputs);
  r.device = choose_device(opt.device);
  EPIFUSE_CHECK(r.device != Device::cpu || !opt.tile.tile(),
                "--threads, --vec and --blocks-per-sm choose a GPU kernel's tile; the CPU reference has none");
  const double flops = flop_estimate(plan.spec, plan.shape);
  r.large = flops > k_large_run_flops;
  if (r.large)
    std::cerr << fmt::format("epifuse: running '{}' on {} ({}, about {:.2g} GFLOP)...\n", plan.label,
                             to_string(r.device), shape_text(plan.spec, plan.shape), flops * 1e-9);
  const auto t0 = std::chrono::steady_clock::now();
  r.outputs = run_on_device(r.device, plan.spec, plan.shape, r.inputs, plan.args, opt.tile.tile());
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (r.large) std::cerr << fmt::format("epifuse: done in {:.3f} s\n", r.ms * 1e-3);
  return r;
}

// Step 3a: writes the outputs asked for and summarizes every output, as JSON
// (`outputs_json`) and as text (returned).
std::string report_outputs(const RunPlan& plan, const RunResult& r, Json& outputs_json) {
  outputs_json = Json::array();
  std::string text;
  for (const std::string& name : plan.output_names) {
    auto it = r.outputs.find(name);
    EPIFUSE_ASSERT(it != r.outputs.end(), "the device returned no output '{}'", name);
    const HostTensor& t = it->second;
    Json j = {{"name", name}, {"dtype", to_string(t.dtype)}, {"shape", t.shape}};
    std::vector<std::string> written;
    const auto file = plan.output_files.find(name);
    if (file != plan.output_files.end()) {
      write_output_npy(file->second, t);
      written.push_back(file->second);
    }
    if (!plan.output_dir.empty()) {
      const fs::path p = output_dir_file(plan, name);
      write_output_npy(p, t);
      written.push_back(p.string());
    }
    if (!written.empty()) j["files"] = written;
    // The JSON document has the paths as given (its writer escapes them); text shows them printable.
    for (std::string& w : written) w = printable(w);
    const Summary s = summarize(t);
    j["min"] = s.min;  // NaN (no finite value) is written as null
    j["max"] = s.max;
    j["mean"] = s.mean;
    j["nonfinite"] = s.nonfinite;
    j["first"] = s.first;
    outputs_json.push_back(std::move(j));

    if (file != plan.output_files.end()) {
      text += fmt::format("{}: {} {} -> {}\n", name, to_string(t.dtype), shape_string(t.shape), fmt::join(written, ", "));
      continue;
    }
    if (t.numel() == 0) {
      text += fmt::format("{}: {} {}  (empty)\n", name, to_string(t.dtype), shape_string(t.shape));
      if (!written.empty()) text += fmt::format("  written to {}\n", fmt::join(written, ", "));
      continue;
    }
    text += fmt::format("{}: {} {}  min {:.6g}  max {:.6g}  mean {:.6g}{}\n", name, to_string(t.dtype),
                        shape_string(t.shape), s.min, s.max, s.mean,
                        s.nonfinite ? fmt::format("  non-finite {}", s.nonfinite) : "");
    text += fmt::format("  first: {:.6g}{}\n", fmt::join(s.first, ", "), t.numel() > k_first_values ? ", ..." : "");
    if (!written.empty()) text += fmt::format("  written to {}\n", fmt::join(written, ", "));
  }
  return text;
}

// Step 3b: on the CPU the run *is* the reference, so there is nothing
// independent to compare. On a GPU, --verify evaluates the reference on the
// same inputs and compares every output with the tolerance of its dtype
// (docs/design.md §3). A GEMM chain's device accumulators differ from the exact
// product by up to accumulation_bound (fp32 summation order), which the chain
// may amplify (a gate times acc1): the reference is also evaluated with the
// accumulators moved by -/+ that bound, and an output passes within its
// dtype's tolerance of the interval they span. Sets exit code 1 when an
// output differs.
std::string verify_outputs(const RunPlan& plan, const RunResult& r, Json& verify_json) {
  const char* note = "the cpu device runs the reference evaluator itself; nothing to compare against";
  verify_json = {{"checked", false}, {"passed", true}, {"reason", note}};
  if (r.device == Device::cpu) return fmt::format("verify: {}\n", note);
  if (r.large) std::cerr << "epifuse: verifying against the CPU reference ...\n";
  const TensorMap want = evaluate(plan.spec, plan.shape, r.inputs, plan.args);
  std::vector<TensorMap> moved;
  if (const double bound = accumulation_bound(plan.spec, plan.shape, r.inputs); bound > 0) {
    const bool dual = plan.spec.mainloop.kind == MainloopKind::dual_gemm;
    for (const float s0 : {-1.0f, 1.0f})
      for (const float s1 : dual ? std::vector<float>{-1.0f, 1.0f} : std::vector<float>{0.0f}) {
        EvalOptions options;
        options.accumulator_shift = {static_cast<float>(s0 * bound), static_cast<float>(s1 * bound)};
        moved.push_back(evaluate(plan.spec, plan.shape, r.inputs, plan.args, options));
      }
  }
  verify_json = {{"checked", true}, {"passed", true}, {"outputs", Json::array()}};
  std::string text;
  for (const Output& o : plan.spec.graph.outputs()) {
    std::vector<const HostTensor*> wants = {&want.at(o.name)};
    for (const TensorMap& m : moved) wants.push_back(&m.at(o.name));
    const Comparison c = compare_within(r.outputs.at(o.name), wants, tolerance_for(o.dtype, plan.spec.precision));
    verify_json["outputs"].push_back({{"name", o.name}, {"passed", c.ok}, {"max_abs_error", c.max_abs_error},
                                      {"mismatches", c.mismatches}, {"message", c.message}});
    text += c.ok ? fmt::format("verify {}: ok ({} elements, max abs error {:.3g})\n", o.name, c.checked,
                               c.max_abs_error)
                 : fmt::format("verify {}: FAILED: {}\n", o.name, c.message);
    if (!c.ok) {
      verify_json["passed"] = false;
      session().exit_code = k_exit_target_failed;
    }
  }
  return text;
}

void run(const RunOptions& opt) {
  const RunPlan plan = plan_run(opt);
  Json inputs_json, outputs_json, verify_json;
  TensorMap inputs = bind_inputs(plan, inputs_json);
  const RunResult r = execute(plan, opt, std::move(inputs));
  const std::string outputs_text = report_outputs(plan, r, outputs_json);
  const std::string verify_text = opt.verify ? verify_outputs(plan, r, verify_json) : "";

  if (session().json) {
    Json doc;
    doc["name"] = plan.spec.name;
    doc["device"] = to_string(r.device);
    doc["shape"] = plan.spec.mainloop.kind == MainloopKind::elementwise
                       ? Json{plan.shape.m, plan.shape.n}
                       : Json{plan.shape.m, plan.shape.n, plan.shape.k};
    if (plan.shape.batch > 1) doc["batch"] = plan.shape.batch;
    doc["seed"] = plan.args.seed;
    doc["offset"] = plan.args.offset;
    doc["data_seed"] = plan.data_seed;
    doc["inputs"] = std::move(inputs_json);
    doc["outputs"] = std::move(outputs_json);
    doc["time_ms"] = r.ms;
    if (opt.verify) doc["verify"] = std::move(verify_json);
    print_json(doc);
    return;
  }
  print_text(fmt::format("{} on {}: {}, seed {} offset {}, data seed {} ({:.3f} ms)\n{}{}", plan.label,
                         to_string(r.device), shape_text(plan.spec, plan.shape), plan.args.seed,
                         plan.args.offset, plan.data_seed, r.ms, outputs_text, verify_text));
}

}  // namespace

void add_run(CLI::App& app) {
  auto opt = std::make_shared<RunOptions>();
  CLI::App* sub = app.add_subcommand("run", "Run a chain on a device (or the CPU reference) and show or save its outputs");
  sub->add_option("chain", opt->chain, "the JSON op chain (docs/json-schema.md)")->required()->check(non_empty());
  sub->add_option("--shape", opt->shape,
                  "problem shape: M,N (elementwise; leading dims folded into M) or M,N,K (gemm, "
                  "dual_gemm); default: the chain's \"shape\"")
      ->check(non_empty());
  sub->add_option("--ld", opt->lds,
                  "NAME=LD: a GEMM operand's leading dimension (a, b; dual: a, b0, b1), or a chain's full "
                  "[M,N] input's or output's (LD >= N; repeatable): the device buffer's rows LD elements apart, run by "
                  "the strided kernel (docs/strided-batched.md)")
      ->allow_extra_args(false);
  add_batch_options(*sub, opt->batch, opt->batch_strides);
  sub->add_option("--device", opt->device,
                  "cuda, hip or cpu (the reference evaluator); default: the GPU present, else cpu")
      ->check(CLI::IsMember({"cuda", "hip", "cpu"}));
  sub->add_option("--input", opt->inputs,
                  "NAME=FILE.npy: bind an input (repeatable); GEMM operands are a [M,K], b [K,N] "
                  "(dual: a, b0, b1); inputs not given are drawn from --data-seed")
      ->allow_extra_args(false);
  sub->add_option("--output", opt->outputs, "NAME=FILE.npy: write an output there (repeatable)")
      ->allow_extra_args(false);
  sub->add_option("--output-dir", opt->output_dir, "write every output as DIR/NAME.npy (DIR is created)")
      ->check(non_empty());
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
