// `epifuse validate CHAIN.json`: check a chain and print its canonical graph.
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"
#include "common.hpp"
#include "epifuse/json.hpp"
#include "epifuse/reference.hpp"
#include "epifuse/spec.hpp"

namespace epifuse::cli {
namespace {

struct ValidateOptions {
  std::string chain;
};

nlohmann::ordered_json mainloop_json(const Mainloop& ml) {
  nlohmann::ordered_json j;
  j["kind"] = to_string(ml.kind);
  if (ml.kind != MainloopKind::elementwise) {
    j["a"] = to_string(ml.a);
    j["b"] = to_string(ml.b);
    j["a_layout"] = to_string(ml.a_layout);
    j["b_layout"] = to_string(ml.b_layout);
  }
  return j;
}

void validate(const ValidateOptions& opt) {
  const KernelSpec spec = load_spec(opt.chain);
  verify(spec);
  const Graph& g = spec.graph;
  const std::string hash = signature_hash(spec);

  if (session().json) {
    nlohmann::ordered_json doc;
    doc["file"] = opt.chain;
    doc["name"] = spec.name;
    doc["mainloop"] = mainloop_json(spec.mainloop);
    doc["signature"] = hash;
    doc["operands"] = mainloop_operand_names(spec.mainloop.kind);
    doc["inputs"] = nlohmann::ordered_json::array();
    for (Value v : g.inputs()) {
      const Node& n = g.node(v);
      doc["inputs"].push_back(
          {{"name", n.name}, {"dtype", to_string(n.dtype)}, {"broadcast", to_string(n.broadcast)}});
    }
    doc["outputs"] = nlohmann::ordered_json::array();
    for (const Output& o : g.outputs())
      doc["outputs"].push_back(
          {{"name", o.name}, {"dtype", to_string(o.dtype)}, {"broadcast", to_string(g.node(o.value).broadcast)}});
    if (spec.default_shape) {
      const Shape& s = *spec.default_shape;
      doc["shape"] = spec.mainloop.kind == MainloopKind::elementwise
                         ? nlohmann::ordered_json{s.m, s.n}
                         : nlohmann::ordered_json{s.m, s.n, s.k};
    }
    doc["precision"] = spec.precision == Precision::fast ? "fast" : "accurate";
    doc["graph"] = print(spec);
    print_json(doc);
    return;
  }
  // An unnamed chain says so rather than printing ''.
  const std::string name = spec.name.empty() ? "unnamed" : fmt::format("'{}'", printable(spec.name));
  print_text(fmt::format("{}: ok: {}, {} mainloop, signature {}\n{}", printable(opt.chain), name,
                         to_string(spec.mainloop.kind), hash, print(spec)));
}

}  // namespace

void add_validate(CLI::App& app) {
  auto opt = std::make_shared<ValidateOptions>();
  CLI::App* sub = app.add_subcommand(
      "validate", "Check a JSON op chain and print its canonical graph and signature hash");
  sub->add_option("chain", opt->chain, "the JSON op chain (docs/json-schema.md)")->required()->check(non_empty());
  add_json_flag(*sub);
  sub->footer(
      "Every problem is reported with its JSON path, e.g. 'ops[2].p: dropout probability must\n"
      "be in [0, 1], got 1.5', and exits with code 2. The signature hash ignores names: two\n"
      "chains that differ only in input, value or output names share it (and a kernel).");
  sub->callback([opt] { validate(*opt); });
}

}  // namespace epifuse::cli
