// `epifuse grad CHAIN.json`: the backward spec of a chain (docs/autodiff.md),
// the forward with what it saves for it, and a gradient check on the CPU.
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "common.hpp"
#include "epifuse/autodiff.hpp"
#include "epifuse/dgrad.hpp"
#include "epifuse/gradient_check.hpp"
#include "epifuse/json.hpp"
#include "io/atomic_file.hpp"

namespace epifuse::cli {
namespace {

struct GradCliOptions {
  std::string chain, forward, backward, check_shape, as_gemm_epilogue;
  std::vector<std::string> wrt;
  bool check = false;
};

constexpr double k_check_bar = 1e-6;

std::string pretty(const KernelSpec& spec) { return spec_to_json(spec).dump(2) + "\n"; }

void grad_command(const GradCliOptions& opt) {
  const KernelSpec spec = load_spec(opt.chain);
  OutputFiles files;
  if (!opt.forward.empty()) files.add("--forward", opt.forward);
  if (!opt.backward.empty()) files.add("--backward", opt.backward);
  GradResult r = grad(spec, {opt.wrt});
  std::string dgrad_note;
  if (!opt.as_gemm_epilogue.empty()) {
    // The upstream gradient becomes the accumulator of A·B, both row-major in its dtype.
    const Value up = r.backward.graph.find(opt.as_gemm_epilogue);
    Mainloop gemm;
    gemm.kind = MainloopKind::gemm;
    if (up.valid()) gemm.a = gemm.b = r.backward.graph.node(up).dtype;
    r.backward = as_gemm_epilogue(r.backward, opt.as_gemm_epilogue, gemm);
    dgrad_note = fmt::format("dgrad: {} is the accumulator of A [M,K] times B [K,N], row-major {}\n",
                             opt.as_gemm_epilogue, to_string(gemm.a));
  }

  std::optional<GradCheckReport> report;
  if (opt.check) {
    // Small by default: every element is moved four times.
    Shape shape = opt.check_shape.empty()
                      ? Shape{4, 6, spec.mainloop.kind == MainloopKind::elementwise ? 0 : 5}
                      : parse_shape(opt.check_shape, spec);
    require_nonempty(shape, "--check");
    EPIFUSE_CHECK(shape.m * shape.n <= 4096,
                  "--check {}: the gradient check evaluates the chain four times per element; give at most 4096 "
                  "elements (M*N)", opt.check_shape);
    GradCheckOptions o;
    o.grad.wrt = opt.wrt;
    report = gradient_check(spec, shape, o);
  }
  if (!opt.forward.empty()) io::write_file_atomically(opt.forward, pretty(r.forward));
  if (!opt.backward.empty()) io::write_file_atomically(opt.backward, pretty(r.backward));

  if (session().json) {
    nlohmann::ordered_json doc;
    doc["wrt"] = r.wrt;
    doc["saved"] = nlohmann::ordered_json::array();
    for (const auto& s : r.saved) doc["saved"].push_back({{"name", s.name}, {"kind", s.kind}, {"of", s.of}});
    doc["forward"] = spec_to_json(r.forward);
    doc["backward"] = spec_to_json(r.backward);
    if (!opt.as_gemm_epilogue.empty()) doc["as_gemm_epilogue"] = opt.as_gemm_epilogue;
    if (report) {
      doc["check"] = nlohmann::ordered_json::array();
      for (const auto& e : report->entries)
        doc["check"].push_back({{"wrt", e.wrt}, {"relative_error", e.relative_error()}, {"ok", e.relative_error() <= k_check_bar}});
    }
    print_json(doc);
  } else {
    std::string text;
    if (opt.backward.empty()) text += pretty(r.backward);
    // What the forward must save; on stderr when stdout holds the spec.
    std::string notes = dgrad_note;
    for (const auto& s : r.saved) notes += fmt::format("saved: {} ({} of {})\n", s.name, s.kind, printable(s.of));
    if (report)
      for (const auto& e : report->entries)
        notes += fmt::format("check: d{}: relative error {:.2e} {}\n", e.wrt, e.relative_error(),
                             e.relative_error() <= k_check_bar ? "ok" : "FAILED");
    if (opt.backward.empty()) std::cerr << notes;
    else text += notes;
    print_text(text);
  }
  if (report && report->max_relative_error() > k_check_bar) session().exit_code = k_exit_target_failed;
}

}  // namespace

void add_grad(CLI::App& app) {
  auto opt = std::make_shared<GradCliOptions>();
  CLI::App* sub = app.add_subcommand(
      "grad", "Print the backward spec of a chain: the gradients of its inputs from its outputs' gradients");
  sub->add_option("chain", opt->chain, "the JSON op chain (docs/json-schema.md)")->required()->check(non_empty());
  sub->add_option("--wrt", opt->wrt,
                  "an input to differentiate (repeatable; acc, acc0, acc1 for a GEMM's accumulators); default: every "
                  "input not marked \"grad\": false");
  sub->add_option("--forward", opt->forward, "write the forward spec with its saved tensors as outputs here")
      ->check(non_empty());
  sub->add_option("--backward", opt->backward, "write the backward spec here instead of printing it")
      ->check(non_empty());
  auto* check = sub->add_flag("--check", opt->check,
                              "compare the gradients with central differences in double on the CPU (exit 1 above a "
                              "relative error of 1e-6)");
  sub->add_option("--as-gemm-epilogue", opt->as_gemm_epilogue,
                  "print (or write with --backward) the backward as the epilogue of the GEMM that produces this "
                  "upstream gradient (e.g. dy): a GEMM chain whose accumulator A·B replaces it, A and B row-major "
                  "in its dtype (docs/gemm-backward.md)")
      ->check(non_empty());
  sub->add_option("--check-shape", opt->check_shape, "M,N (or M,N,K) for --check; default 4,6 (4,6,5)")
      ->needs(check)
      ->check(non_empty());
  add_json_flag(*sub);
  sub->footer(
      "The backward spec takes d<y> for each output y, the tensors the forward saved (saved_*:\n"
      "GEMM pre-activations, per-row statistics), the outputs it reads back (a softmax or a\n"
      "ReLU result) and the inputs it reads again; it gives d<x> for each input x (dacc for a\n"
      "GEMM's accumulator). Dropout masks are regenerated from the same seed, offset and\n"
      "stream, so run both with the same --seed and --offset.");
  sub->callback([opt] { grad_command(*opt); });
}

}  // namespace epifuse::cli
