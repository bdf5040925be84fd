#include "epifuse/graph.hpp"

#include <cfloat>
#include <algorithm>
#include <cmath>
#include <set>

#include "epifuse/errors.hpp"
#include "ir/limits.hpp"
#include "ir/names.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

std::string_view to_string(RngMode m) { return m == RngMode::philox4 ? "philox4" : "triton"; }

using names::excerpt;

const Node& Graph::node(Value v) const {
  EPIFUSE_CHECK(v.id < nodes_.size(), "value #{} does not belong to this graph", v.id);
  return nodes_[v.id];
}

void Graph::check_operand(Value v, std::string_view what) const {
  EPIFUSE_CHECK(v.valid() && v.id < nodes_.size(),
                "{}: operand is not a value of this graph", what);
}

// Input, value and output names: identifiers of bounded length. `what` is
// "input name", "value name" or "output name".
static void check_name(std::string_view name, std::string_view what) {
  EPIFUSE_CHECK(name.size() <= limits::k_max_name_length,
                "{} '{}' has {} characters, more than the limit of {}", what, excerpt(name),
                name.size(), limits::k_max_name_length);
  EPIFUSE_CHECK(names::is_identifier(name), "{} '{}' must be an identifier ([A-Za-z_][A-Za-z0-9_]*)",
                what, excerpt(name));
}

void Graph::check_new_name(std::string_view name, std::string_view what) const {
  check_name(name, what);
  EPIFUSE_CHECK(!names::is_accumulator_name(name),
                "{} '{}' is reserved for the mainloop accumulators ({})", what, name,
                names::k_accumulator_list);
  EPIFUSE_CHECK(!find(name).valid(), "duplicate value name '{}'", name);
}

Value Graph::push(Node n) {
  const Value v{static_cast<std::uint32_t>(nodes_.size())};
  if (!n.name.empty()) names_.emplace(n.name, v.id);
  nodes_.push_back(std::move(n));
  return v;
}

// Every op node passes here, so the op limit holds for every builder call.
Value Graph::push_op(Node n) {
  EPIFUSE_CHECK(op_count_ < limits::k_max_ops, "{}: more than the limit of {} ops in one graph",
                op_info(n.op).name, limits::k_max_ops);
  ++op_count_;
  return push(std::move(n));
}

Value Graph::accumulator(int index) {
  EPIFUSE_CHECK(index == 0 || index == 1, "accumulator index must be 0 or 1, got {}", index);
  Value& made = accumulators_[static_cast<std::size_t>(index)];
  if (made.valid()) return made;
  Node n;
  n.kind = NodeKind::accumulator;
  n.accumulator = index;
  n.dtype = DType::f32;
  n.broadcast = Broadcast::full;
  made = push(std::move(n));
  return made;
}

Value Graph::input(std::string name, DType dtype, Broadcast broadcast) {
  check_new_name(name, "input name");
  EPIFUSE_CHECK(inputs_.size() < limits::k_max_inputs,
                "input '{}': more than the limit of {} inputs in one graph", name, limits::k_max_inputs);
  Node n;
  n.kind = NodeKind::input;
  n.dtype = dtype;
  n.broadcast = broadcast;
  n.name = std::move(name);
  inputs_.push_back(push(std::move(n)));
  return inputs_.back();
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
  return push_op(std::move(n));
}

Value Graph::unary(OpKind op, Value a) {
  const auto& info = op_info(op);
  EPIFUSE_CHECK(info.arity == 1, "{} is not a unary op", info.name);
  EPIFUSE_CHECK(op != OpKind::scale && op != OpKind::dropout && op != OpKind::cast && op != OpKind::add_scalar,
                "{} takes an attribute: use Graph::{}", info.name, info.name);
  check_operand(a, info.name);
  Node n;
  n.op = op;
  n.args = {a};
  n.broadcast = nodes_[a.id].broadcast;
  if (is_row_reduction(op)) {
    EPIFUSE_CHECK(n.broadcast == Broadcast::full, "{} reduces a full [M,N] value along its rows; its operand is {}",
                  info.name, to_string(n.broadcast));
    n.broadcast = Broadcast::col;
  }
  if (op == OpKind::expand) n.broadcast = Broadcast::full;
  if (op == OpKind::col_sum) {
    EPIFUSE_CHECK(n.broadcast == Broadcast::full, "col_sum reduces a full [M,N] value over its rows; its operand is {}",
                  to_string(n.broadcast));
    n.broadcast = Broadcast::row;
  }
  return push_op(std::move(n));
}

// Note [Composites add all their ops or none]
// A composite is several builder calls, and only the op limit can stop one
// part-way (its operands and eps are checked before the first op). Were the
// limit met at its third op, the first two would stay in the graph as orphans
// that a caller who catches the UserError (the C ABI, the Python module) goes
// on building with. So each composite asks for room for all its ops up front,
// and asserts afterwards that it made exactly that many, which keeps the
// counts below honest when a composite's body changes.
static void check_op_room(std::size_t used, std::string_view composite, std::size_t ops) {
  EPIFUSE_CHECK(used + ops <= limits::k_max_ops,
                "{}: its {} ops would make more than the limit of {} ops in one graph ({} left)", composite,
                ops, limits::k_max_ops, limits::k_max_ops - used);
}

static constexpr std::size_t k_softmax_ops = 5;      // row_max, sub, exp, row_sum, div
static constexpr std::size_t k_log_softmax_ops = 6;  // row_max, sub, exp, row_sum, log, sub
static constexpr std::size_t k_rmsnorm_ops = 6;      // mul, row_mean, add_scalar, rsqrt, mul, mul
static constexpr std::size_t k_layernorm_ops = 9;    // row_mean, sub, mul, row_mean, add_scalar, rsqrt, mul, mul, add

Value Graph::softmax(Value x) {
  check_op_room(op_count_, "softmax", k_softmax_ops);
  const std::size_t before = op_count_;
  const Value e = exp(sub(x, row_max(x)));
  const Value y = div(e, row_sum(e));
  EPIFUSE_ASSERT(op_count_ - before == k_softmax_ops, "softmax made {} ops", op_count_ - before);
  return y;
}

Value Graph::log_softmax(Value x) {
  check_op_room(op_count_, "log_softmax", k_log_softmax_ops);
  const std::size_t before = op_count_;
  const Value shifted = sub(x, row_max(x));
  const Value y = sub(shifted, log(row_sum(exp(shifted))));
  EPIFUSE_ASSERT(op_count_ - before == k_log_softmax_ops, "log_softmax made {} ops", op_count_ - before);
  return y;
}

// A norm's weight and bias scale and shift each column, as torch's
// normalized_shape [N] parameters do: row vectors.
static void check_row_operand(const Graph& g, Value v, std::string_view op, std::string_view what) {
  const Broadcast b = g.node(v).broadcast;
  EPIFUSE_CHECK(b == Broadcast::row, "{}: {} must be a row vector ([N], broadcast row), got a {} value", op, what,
                to_string(b));
}

static void check_full_operand(const Graph& g, Value x, std::string_view op) {
  const Broadcast b = g.node(x).broadcast;
  EPIFUSE_CHECK(b == Broadcast::full,
                "{}: x must be a full [M,N] value (it is normalized along its rows), got a {} value", op,
                to_string(b));
}

Value Graph::rmsnorm(Value x, Value weight, double eps) {
  check_operand(x, "rmsnorm x");
  check_operand(weight, "rmsnorm weight");
  check_full_operand(*this, x, "rmsnorm");
  check_row_operand(*this, weight, "rmsnorm", "weight");
  check_eps("rmsnorm", eps);
  check_op_room(op_count_, "rmsnorm", k_rmsnorm_ops);
  const std::size_t before = op_count_;
  const Value ms = row_mean(mul(x, x));
  const Value y = mul(mul(x, rsqrt(add_scalar(ms, eps))), weight);
  EPIFUSE_ASSERT(op_count_ - before == k_rmsnorm_ops, "rmsnorm made {} ops", op_count_ - before);
  return y;
}

Value Graph::layernorm(Value x, Value weight, Value bias, double eps) {
  check_operand(x, "layernorm x");
  check_operand(weight, "layernorm weight");
  check_operand(bias, "layernorm bias");
  check_full_operand(*this, x, "layernorm");
  check_row_operand(*this, weight, "layernorm", "weight");
  check_row_operand(*this, bias, "layernorm", "bias");
  check_eps("layernorm", eps);
  check_op_room(op_count_, "layernorm", k_layernorm_ops);
  const std::size_t before = op_count_;
  const Value centered = sub(x, row_mean(x));
  const Value var = row_mean(mul(centered, centered));
  const Value y = add(mul(mul(centered, rsqrt(add_scalar(var, eps))), weight), bias);
  EPIFUSE_ASSERT(op_count_ - before == k_layernorm_ops, "layernorm made {} ops", op_count_ - before);
  return y;
}

// Attributes become float32 kernel parameters: a double that rounds to
// infinity in float would turn every output into inf or NaN.
void Graph::check_alpha(double alpha) {
  EPIFUSE_CHECK(limits::finite_in_float32(alpha),
                "scale: alpha {} is not finite in float32 (|alpha| <= {})", alpha, FLT_MAX);
}

// c is written into the kernel as a float literal: it must stay finite there.
void Graph::check_constant(double c) {
  EPIFUSE_CHECK(limits::finite_in_float32(c), "add_scalar: c {} is not finite in float32 (|c| <= {})", c, FLT_MAX);
}

// eps is added in fp32: one that rounds to 0 (or below) in float would leave
// a zero row's rsqrt at +inf.
void Graph::check_eps(std::string_view op, double eps) {
  EPIFUSE_CHECK(limits::finite_in_float32(eps) && static_cast<float>(eps) > 0.0f,
                "{}: eps must be a positive number finite in float32 (added in fp32), got {}", op, eps);
}

void Graph::check_probability(double p) {
  EPIFUSE_CHECK(limits::finite_in_float32(p) && p >= 0.0 && p <= 1.0,
                "dropout probability must be in [0, 1], got {}", p);
}

Value Graph::scale(Value a, double alpha) {
  check_operand(a, "scale");
  check_alpha(alpha);
  EPIFUSE_CHECK(scale_count_ < limits::k_max_scale_ops,
                "scale: more than the limit of {} scale ops in one graph (each alpha is a kernel "
                "parameter)", limits::k_max_scale_ops);
  Node n;
  n.op = OpKind::scale;
  n.args = {a};
  n.alpha = alpha;
  n.broadcast = nodes_[a.id].broadcast;
  const Value v = push_op(std::move(n));
  ++scale_count_;
  return v;
}

Value Graph::add_scalar(Value a, double c) {
  check_operand(a, "add_scalar");
  check_constant(c);
  Node n;
  n.op = OpKind::add_scalar;
  n.args = {a};
  n.alpha = c;
  n.broadcast = nodes_[a.id].broadcast;
  return push_op(std::move(n));
}

void Graph::check_stream(std::int64_t stream) {
  EPIFUSE_CHECK(stream >= 0 && static_cast<std::uint64_t>(stream) < limits::k_max_dropouts,
                "dropout: stream must be in [0, {}), got {}", limits::k_max_dropouts, stream);
}

Value Graph::dropout(Value a, double p, RngMode rng, std::optional<int> stream) {
  check_operand(a, "dropout");
  check_probability(p);
  if (stream) check_stream(*stream);
  EPIFUSE_CHECK(static_cast<std::size_t>(dropout_count_) < limits::k_max_dropouts,
                "dropout: more than the limit of {} dropout ops in one graph", limits::k_max_dropouts);
  const int s = stream.value_or(next_stream_);
  EPIFUSE_CHECK(static_cast<std::size_t>(s) < limits::k_max_dropouts,
                "dropout: its stream would be {}, past the last one, {}: give the stream", s,
                limits::k_max_dropouts - 1);
  Node n;
  n.op = OpKind::dropout;
  n.args = {a};
  n.p = p;
  n.rng = rng;
  n.stream = s;
  n.broadcast = Broadcast::full;  // the mask is per output element
  const Value v = push_op(std::move(n));
  ++dropout_count_;
  next_stream_ = std::max(next_stream_, s + 1);
  return v;
}

Value Graph::copy_op(const Node& like, std::span<const Value> args) {
  EPIFUSE_CHECK(like.kind == NodeKind::op, "copy_op copies ops, not leaves");
  EPIFUSE_CHECK(args.size() == static_cast<std::size_t>(op_info(like.op).arity), "{} takes {} operands, got {}",
                op_info(like.op).name, op_info(like.op).arity, args.size());
  switch (like.op) {
    case OpKind::scale: return scale(args[0], like.alpha);
    case OpKind::add_scalar: return add_scalar(args[0], like.alpha);
    case OpKind::dropout: return dropout(args[0], like.p, like.rng, like.stream);
    case OpKind::cast: return cast(args[0], like.dtype);
    default: return op_info(like.op).arity == 2 ? binary(like.op, args[0], args[1]) : unary(like.op, args[0]);
  }
}

Value Graph::cast(Value a, DType to) {
  check_operand(a, "cast");
  Node n;
  n.op = OpKind::cast;
  n.args = {a};
  n.dtype = to;
  n.broadcast = nodes_[a.id].broadcast;
  return push_op(std::move(n));
}

void Graph::output(std::string name, Value v, DType dtype) {
  check_operand(v, fmt::format("output '{}'", excerpt(name)));
  // An output name is a binding, not a value: it may be an accumulator's
  // (`"outputs": {"acc": ...}` stores the accumulator itself).
  check_name(name, "output name");
  // At most k_max_outputs: a linear scan is cheaper than a map.
  for (const auto& o : outputs_)
    EPIFUSE_CHECK(o.name != name, "duplicate output name '{}'", name);
  EPIFUSE_CHECK(outputs_.size() < limits::k_max_outputs,
                "output '{}': more than the limit of {} outputs in one graph", name,
                limits::k_max_outputs);
  EPIFUSE_CHECK(nodes_[v.id].broadcast != Broadcast::scalar,
                "output '{}' is a scalar value; outputs are full [M,N], row [N] (a col_sum) or col [M] (a row "
                "reduction): combine it with the accumulator or a full input first",
                name);
  outputs_.push_back({std::move(name), v, dtype});
}

void Graph::set_differentiable(Value v, bool differentiable) {
  check_operand(v, "set_differentiable");
  EPIFUSE_CHECK(nodes_[v.id].kind == NodeKind::input, "only inputs can be marked (not) differentiable");
  nodes_[v.id].differentiable = differentiable;
}

void Graph::set_name(Value v, std::string name) {
  check_operand(v, "set_name");
  EPIFUSE_CHECK(nodes_[v.id].kind == NodeKind::op, "only op values can be renamed");
  Node& n = nodes_[v.id];
  if (n.name == name) return;
  check_new_name(name, "value name");
  if (!n.name.empty()) names_.erase(n.name);
  names_.emplace(name, v.id);
  n.name = std::move(name);
}

Value Graph::find(std::string_view name) const {
  auto it = names_.find(name);
  return it == names_.end() ? Value{} : Value{it->second};
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
  for (Value in : g.inputs())
    EPIFUSE_CHECK(used[in.id], "input '{}' is never used", g.node(in).name);
}

}  // namespace epifuse
