#include "epifuse/graph.hpp"

#include <cmath>
#include <set>

#include "epifuse/errors.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

std::string_view to_string(RngMode m) { return m == RngMode::philox4 ? "philox4" : "triton"; }

namespace {
bool is_identifier(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(s[0])) return false;
  for (char c : s)
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  return true;
}
}  // namespace

const Node& Graph::node(Value v) const {
  EPIFUSE_CHECK(v.id < nodes_.size(), "value #{} does not belong to this graph", v.id);
  return nodes_[v.id];
}

void Graph::check_operand(Value v, std::string_view what) const {
  EPIFUSE_CHECK(v.valid() && v.id < nodes_.size(),
                "{}: operand is not a value of this graph", what);
}

Value Graph::push(Node n) {
  nodes_.push_back(std::move(n));
  return Value{static_cast<std::uint32_t>(nodes_.size() - 1)};
}

Value Graph::accumulator(int index) {
  EPIFUSE_CHECK(index == 0 || index == 1, "accumulator index must be 0 or 1, got {}", index);
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].kind == NodeKind::accumulator && nodes_[i].accumulator == index)
      return Value{static_cast<std::uint32_t>(i)};
  Node n;
  n.kind = NodeKind::accumulator;
  n.accumulator = index;
  n.dtype = DType::f32;
  n.broadcast = Broadcast::full;
  return push(std::move(n));
}

Value Graph::input(std::string name, DType dtype, Broadcast broadcast) {
  EPIFUSE_CHECK(is_identifier(name),
                "input name '{}' must be an identifier ([A-Za-z_][A-Za-z0-9_]*, at most 64)",
                name);
  EPIFUSE_CHECK(name != "acc" && name != "acc0" && name != "acc1",
                "input name '{}' is reserved for the mainloop accumulator", name);
  EPIFUSE_CHECK(!find(name).valid(), "duplicate value name '{}'", name);
  Node n;
  n.kind = NodeKind::input;
  n.dtype = dtype;
  n.broadcast = broadcast;
  n.name = std::move(name);
  return push(std::move(n));
}

Value Graph::binary(OpKind op, Value a, Value b) {
  const auto& info = op_info(op);
  EPIFUSE_CHECK(info.arity == 2, "{} is not a binary op", info.name);
  check_operand(a, fmt::format("{} operand 0", info.name));
  check_operand(b, fmt::format("{} operand 1", info.name));
  Node n;
  n.op = op;
  n.args = {a, b};
  n.broadcast = join(nodes_[a.id].broadcast, nodes_[b.id].broadcast);
  return push(std::move(n));
}

Value Graph::unary(OpKind op, Value a) {
  const auto& info = op_info(op);
  EPIFUSE_CHECK(info.arity == 1, "{} is not a unary op", info.name);
  EPIFUSE_CHECK(op != OpKind::scale && op != OpKind::dropout && op != OpKind::cast,
                "{} takes an attribute: use Graph::{}", info.name, info.name);
  check_operand(a, info.name);
  Node n;
  n.op = op;
  n.args = {a};
  n.broadcast = nodes_[a.id].broadcast;
  return push(std::move(n));
}

Value Graph::scale(Value a, double alpha) {
  check_operand(a, "scale");
  EPIFUSE_CHECK(std::isfinite(alpha), "scale: alpha must be finite, got {}", alpha);
  Node n;
  n.op = OpKind::scale;
  n.args = {a};
  n.alpha = alpha;
  n.broadcast = nodes_[a.id].broadcast;
  return push(std::move(n));
}

Value Graph::dropout(Value a, double p, RngMode rng) {
  check_operand(a, "dropout");
  EPIFUSE_CHECK(std::isfinite(p) && p >= 0.0 && p <= 1.0,
                "dropout probability must be in [0, 1], got {}", p);
  EPIFUSE_CHECK(dropout_count_ < 0x8000, "too many dropout nodes (at most 32768)");
  Node n;
  n.op = OpKind::dropout;
  n.args = {a};
  n.p = p;
  n.rng = rng;
  n.stream = dropout_count_++;
  n.broadcast = Broadcast::full;  // the mask is per output element
  return push(std::move(n));
}

Value Graph::cast(Value a, DType to) {
  check_operand(a, "cast");
  Node n;
  n.op = OpKind::cast;
  n.args = {a};
  n.dtype = to;
  n.broadcast = nodes_[a.id].broadcast;
  return push(std::move(n));
}

void Graph::output(std::string name, Value v, DType dtype) {
  check_operand(v, fmt::format("output '{}'", name));
  EPIFUSE_CHECK(is_identifier(name), "output name '{}' must be an identifier", name);
  for (const auto& o : outputs_)
    EPIFUSE_CHECK(o.name != name, "duplicate output name '{}'", name);
  EPIFUSE_CHECK(nodes_[v.id].broadcast == Broadcast::full,
                "output '{}' is a {} value; outputs must be full [M,N] "
                "(combine it with the accumulator or a full input first)",
                name, to_string(nodes_[v.id].broadcast));
  outputs_.push_back({std::move(name), v, dtype});
}

void Graph::set_name(Value v, std::string name) {
  check_operand(v, "set_name");
  EPIFUSE_CHECK(is_identifier(name), "value name '{}' must be an identifier", name);
  EPIFUSE_CHECK(nodes_[v.id].kind == NodeKind::op, "only op values can be renamed");
  auto existing = find(name);
  EPIFUSE_CHECK(!existing.valid() || existing == v, "duplicate value name '{}'", name);
  nodes_[v.id].name = std::move(name);
}

std::vector<Value> Graph::inputs() const {
  std::vector<Value> out;
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].kind == NodeKind::input) out.push_back(Value{static_cast<std::uint32_t>(i)});
  return out;
}

Value Graph::find(std::string_view name) const {
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (!nodes_[i].name.empty() && nodes_[i].name == name)
      return Value{static_cast<std::uint32_t>(i)};
  return {};
}

void verify(const Graph& g) {
  EPIFUSE_CHECK(!g.outputs().empty(), "graph has no outputs");
  std::set<std::string_view> names;
  for (const auto& n : g.nodes()) {
    if (n.kind == NodeKind::op) {
      EPIFUSE_ASSERT(n.args.size() == static_cast<std::size_t>(op_info(n.op).arity),
                     "arity of {}", op_info(n.op).name);
    }
    if (!n.name.empty())
      EPIFUSE_CHECK(names.insert(n.name).second, "duplicate value name '{}'", n.name);
  }
  // An input no op reads is a binding without code: almost always a typo.
  std::vector<bool> used(g.nodes().size(), false);
  for (const auto& n : g.nodes())
    for (Value a : n.args) used[a.id] = true;
  for (const auto& o : g.outputs()) used[o.value.id] = true;
  for (std::size_t i = 0; i < g.nodes().size(); ++i)
    if (g.nodes()[i].kind == NodeKind::input)
      EPIFUSE_CHECK(used[i], "input '{}' is never used", g.nodes()[i].name);
}

}  // namespace epifuse
