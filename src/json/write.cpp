// spec_to_json: the full form of schema version 1, written so that reading it
// back gives the same signature() (leaves first, ops in node order).
#include <algorithm>
#include <set>

#include "epifuse/json.hpp"
#include "ir/names.hpp"
#include "ir/op_table.hpp"
#include "json/read.hpp"
#include "json/scope.hpp"

namespace epifuse {

using schema::Json;

namespace {

// A JSON name for every node: inputs keep their binding names, named op values
// keep theirs, an unnamed op value stored by an output takes the output's name
// (the chain result `y`), and the rest are `v<index>`, never colliding.
std::vector<std::string> value_names(const KernelSpec& spec) {
  const auto& nodes = spec.graph.nodes();
  std::vector<std::string> names(nodes.size());
  std::set<std::string, std::less<>> taken;
  for (auto kind : {MainloopKind::gemm, MainloopKind::dual_gemm})
    for (std::string_view reserved : names::accumulator_names(kind)) taken.emplace(reserved);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.kind == NodeKind::accumulator) {
      names[i] = names::accumulator_name(spec.mainloop.kind, n.accumulator);
    } else if (n.kind == NodeKind::input) {
      names[i] = n.name;
      taken.insert(n.name);
    }
  }
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].kind == NodeKind::op && !nodes[i].name.empty() && taken.insert(nodes[i].name).second)
      names[i] = nodes[i].name;
  for (const Output& o : spec.graph.outputs())
    if (nodes[o.value.id].kind == NodeKind::op && names[o.value.id].empty() &&
        taken.insert(o.name).second)
      names[o.value.id] = o.name;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].kind != NodeKind::op || !names[i].empty()) continue;
    std::string name = fmt::format("v{}", i);
    while (!taken.insert(name).second) name += "_";
    names[i] = name;
  }
  return names;
}

Json mainloop_json(const Mainloop& m) {
  if (m.kind == MainloopKind::elementwise) return "elementwise";
  Json j = Json::object();
  j["kind"] = to_string(m.kind);
  j["a"] = to_string(m.a);
  j["b"] = to_string(m.b);
  j["a_layout"] = to_string(m.a_layout);
  j["b_layout"] = to_string(m.b_layout);
  if (m.math != GemmMath::exact) j["math"] = to_string(m.math);
  return j;
}

// `stream`: the stream the reader would give this dropout (one more than the
// largest before it); written only when the node's differs.
Json op_json(const Node& n, const std::string& name, const std::vector<std::string>& names, int stream) {
  Json j = Json::object();
  j["name"] = name;
  j["op"] = op_info(n.op).name;
  Json args = Json::array();
  for (Value a : n.args) args.push_back(names[a.id]);
  j["args"] = std::move(args);
  switch (n.op) {
    case OpKind::scale: j["alpha"] = n.alpha; break;
    case OpKind::add_scalar: j["c"] = n.alpha; break;
    case OpKind::dropout:
      j["p"] = n.p;
      if (n.rng != RngMode::philox4) j["rng"] = to_string(n.rng);
      if (n.stream != stream) j["stream"] = n.stream;
      break;
    case OpKind::cast: j["to"] = to_string(n.dtype); break;
    default: break;
  }
  return j;
}

}  // namespace

Json spec_to_json(const KernelSpec& spec) {
  const Graph& g = spec.graph;
  const auto names = value_names(spec);
  Json doc = Json::object();
  doc["epifuse"] = k_schema_version;
  if (!spec.name.empty()) doc["name"] = spec.name;
  doc["mainloop"] = mainloop_json(spec.mainloop);

  Json inputs = Json::object();
  Json ops = Json::array();
  int next_stream = 0;
  for (std::size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.kind == NodeKind::input) {
      Json decl = Json::object();
      decl["dtype"] = to_string(n.dtype);
      if (n.broadcast != Broadcast::full) decl["broadcast"] = to_string(n.broadcast);
      if (!n.differentiable) decl["grad"] = false;
      inputs[n.name] = std::move(decl);
    } else if (n.kind == NodeKind::op) {
      ops.push_back(op_json(n, names[i], names, next_stream));
      if (n.op == OpKind::dropout) next_stream = std::max(next_stream, n.stream + 1);
    }
  }
  doc["inputs"] = std::move(inputs);
  doc["ops"] = std::move(ops);

  Json outputs = Json::object();
  for (const Output& o : g.outputs()) {
    Json decl = Json::object();
    decl["dtype"] = to_string(o.dtype);
    if (names[o.value.id] != o.name) decl["value"] = names[o.value.id];
    outputs[o.name] = std::move(decl);
  }
  doc["outputs"] = std::move(outputs);

  if (spec.precision != Precision::accurate) doc["precision"] = schema::precision_name(spec.precision);
  if (spec.default_shape) {
    const Shape& s = *spec.default_shape;
    doc["shape"] = spec.mainloop.kind == MainloopKind::elementwise ? Json{s.m, s.n}
                                                                   : Json{s.m, s.n, s.k};
  }
  return doc;
}

}  // namespace epifuse
