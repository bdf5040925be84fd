#pragma once
/// The epilogue IR: a DAG of typed values (docs/design.md §1, §3).
///
/// Leaves are mainloop accumulators (`acc`, `acc0`, `acc1`, fp32) and tensor
/// inputs (storage dtype + broadcast). Ops compute in fp32. Nodes are
/// validated when they are made: a bad operand throws UserError right there.
/// A graph is bounded (at most 1024 ops, 128 inputs, 32 outputs, 256 scale and
/// 256 dropout ops, names of at most 64 characters: docs/limits.md), and every
/// builder call takes constant time, so building any graph is linear.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "epifuse/dtype.hpp"

namespace epifuse {

/// Every op of the IR. The one table describing them is src/ir/op_table.
enum class OpKind : std::uint8_t {
  add, sub, mul, max, min,    // binary, broadcasting
  scale,                      // alpha * x
  relu, gelu_tanh, gelu_erf, sigmoid, silu, tanh,
  dropout,                    // docs/design.md §4
  cast,                       // round to a dtype (explicit rounding point)
  div,                        // binary, broadcasting (after cast: the enum's values are signature bytes)
  exp, log, rsqrt,            // unary
  row_max, row_sum, row_mean, // reductions over a full value's row (N): one value per row (`col`)
  add_scalar,                 // a + c, c a constant attribute (in Node::alpha)
  col_sum,                    // reduction over a full value's M rows: one value per column (`row`)
  step,                       // 1 if a > 0, 0.5 if a == 0, 0 if a < 0: max/min's derivative
  // Derivatives of the activations (docs/autodiff.md), fused where the chain
  // rule through the primitive ops would take several:
  relu_deriv, gelu_tanh_deriv, gelu_erf_deriv, sigmoid_deriv, silu_deriv, tanh_deriv,
  expand,                     // a as a full [M,N] value (a row, col or scalar value broadcast)
  div_n,                      // a / N, N the row length: row_mean's derivative
};

/// Dropout RNG mode (docs/design.md §4).
enum class RngMode : std::uint8_t { philox4, triton };
std::string_view to_string(RngMode);

enum class NodeKind : std::uint8_t { accumulator, input, op };

/// A handle to a value of one Graph: the index of its node.
struct Value {
  std::uint32_t id = UINT32_MAX;
  bool valid() const { return id != UINT32_MAX; }
  friend bool operator==(Value, Value) = default;
};

struct Node {
  NodeKind kind = NodeKind::op;
  OpKind op = OpKind::add;        ///< kind == op
  std::vector<Value> args;        ///< kind == op
  DType dtype = DType::f32;       ///< inputs: storage dtype; cast: target; else f32
  Broadcast broadcast = Broadcast::full;  ///< shape class of the value
  int accumulator = 0;            ///< kind == accumulator: 0 (`acc`/`acc0`) or 1 (`acc1`)
  double alpha = 1.0;             ///< scale: alpha; add_scalar: c
  double p = 0.0;                 ///< dropout probability
  RngMode rng = RngMode::philox4; ///< dropout
  int stream = 0;                 ///< dropout: index among the graph's dropout nodes
  std::string name;               ///< binding name (inputs) or value name (ops); not code
  /// Inputs: false for one grad() must not differentiate (an additive mask);
  /// not part of the signature (the forward kernel is the same).
  bool differentiable = true;
};

struct Output {
  std::string name;
  Value value;
  DType dtype = DType::f32;
};

/// Builder and container. Every method validates its operands and throws
/// UserError naming the offending operand or the limit it would exceed.
class Graph {
 public:
  /// Accumulator leaf: index 0 is `acc` (gemm) or `acc0` (dual_gemm), 1 is
  /// `acc1`. Made once; later calls return the same value.
  Value accumulator(int index = 0);
  /// Tensor input bound by name at launch. Names are unique identifiers of at
  /// most 64 characters, not an accumulator's (`acc`, `acc0`, `acc1`).
  Value input(std::string name, DType dtype, Broadcast broadcast = Broadcast::full);
  /// Marks an input as one grad() never differentiates (JSON `"grad": false`):
  /// asking for its gradient is a UserError (docs/autodiff.md).
  void set_differentiable(Value input, bool differentiable);

  Value add(Value a, Value b) { return binary(OpKind::add, a, b); }
  Value sub(Value a, Value b) { return binary(OpKind::sub, a, b); }
  Value mul(Value a, Value b) { return binary(OpKind::mul, a, b); }
  Value max(Value a, Value b) { return binary(OpKind::max, a, b); }
  Value min(Value a, Value b) { return binary(OpKind::min, a, b); }
  Value relu(Value a) { return unary(OpKind::relu, a); }
  Value gelu_tanh(Value a) { return unary(OpKind::gelu_tanh, a); }
  Value gelu_erf(Value a) { return unary(OpKind::gelu_erf, a); }
  Value sigmoid(Value a) { return unary(OpKind::sigmoid, a); }
  Value silu(Value a) { return unary(OpKind::silu, a); }
  Value tanh(Value a) { return unary(OpKind::tanh, a); }
  Value div(Value a, Value b) { return binary(OpKind::div, a, b); }
  Value step(Value a) { return unary(OpKind::step, a); }
  Value relu_deriv(Value a) { return unary(OpKind::relu_deriv, a); }
  Value sigmoid_deriv(Value a) { return unary(OpKind::sigmoid_deriv, a); }
  Value exp(Value a) { return unary(OpKind::exp, a); }
  Value log(Value a) { return unary(OpKind::log, a); }
  Value rsqrt(Value a) { return unary(OpKind::rsqrt, a); }
  /// Reductions along the row: the operand must be full; the result is one
  /// value per row, used by later ops with `col` broadcast (docs/row-reductions.md).
  Value row_max(Value a) { return unary(OpKind::row_max, a); }
  Value row_sum(Value a) { return unary(OpKind::row_sum, a); }
  Value row_mean(Value a) { return unary(OpKind::row_mean, a); }
  /// The reduction over rows: the operand must be full; the result is one
  /// value per column ([N], `row` broadcast), e.g. a bias's gradient.
  Value col_sum(Value a) { return unary(OpKind::col_sum, a); }
  /// `a` broadcast to a full [M,N] value (an [M,N] gradient of a vector).
  Value expand(Value a) { return unary(OpKind::expand, a); }
  /// a / N with N the row length of the problem (a kernel parameter).
  Value div_n(Value a) { return unary(OpKind::div_n, a); }
  /// Composites, desugared here into the ops above (the graph keeps no
  /// composite node): exp(x - row_max(x)) / row_sum(exp(x - row_max(x))), and
  /// (x - m) - log(row_sum(exp(x - m))) with m = row_max(x).
  Value softmax(Value x);
  Value log_softmax(Value x);
  /// Normalizations over the row, desugared likewise; `weight` and `bias` are
  /// row vectors ([N], `row` broadcast), eps > 0 (checked as check_eps does):
  /// x * rsqrt(add_scalar(row_mean(x*x), eps)) * weight, and
  /// (x - m) * rsqrt(add_scalar(row_mean((x-m)*(x-m)), eps)) * weight + bias
  /// with m = row_mean(x), the biased variance as torch.nn.LayerNorm's.
  Value rmsnorm(Value x, Value weight, double eps);
  Value layernorm(Value x, Value weight, Value bias, double eps);
  /// `alpha * a`; alpha is a float32 kernel parameter, so it must be finite
  /// when rounded to float (|alpha| <= FLT_MAX).
  Value scale(Value a, double alpha);
  /// `a + c`; c is a constant of the generated code (a float literal, so it
  /// is in the signature), and must be finite when rounded to float.
  Value add_scalar(Value a, double c);
  /// Dropout with probability p in [0,1]. Its stream (docs/design.md §4) is
  /// `stream` when given, in [0, 256); else one more than the largest stream
  /// made so far (0 for the first), so dropouts made in order number 0, 1, 2.
  /// Two dropouts of one stream (and p and rng) draw the same mask: a
  /// backward spec regenerates its forward's masks that way. The result is
  /// always full ([M,N]).
  Value dropout(Value a, double p, RngMode rng = RngMode::philox4, std::optional<int> stream = std::nullopt);
  Value cast(Value a, DType to);
  /// A new op like `like` (same op and attributes, dropout stream included)
  /// on `args`: how a pass copies a graph's ops into another graph.
  Value copy_op(const Node& like, std::span<const Value> args);

  Value binary(OpKind op, Value a, Value b);
  Value unary(OpKind op, Value a);

  /// The checks scale() and dropout() make on their attribute, for callers
  /// that report an attribute at its own location (the JSON layer).
  static void check_alpha(double alpha);
  static void check_probability(double p);
  /// A dropout stream given explicitly: in [0, 256).
  static void check_stream(std::int64_t stream);
  /// add_scalar's c: finite in float32.
  static void check_constant(double c);
  /// A norm's eps (`op` names the norm in the message): positive and finite
  /// in float32, and still positive when rounded to float.
  static void check_eps(std::string_view op, double eps);

  /// Marks a value as an output stored in `dtype`: a full value is an [M,N]
  /// output, a `row` value (a col_sum) an [N] one, a `col` value (a row
  /// reduction) an [M] one; scalars are refused.
  void output(std::string name, Value v, DType dtype);

  /// Gives an op node a display name (JSON value name); not part of the
  /// signature. The name follows the rules of input names.
  void set_name(Value v, std::string name);

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Output>& outputs() const { return outputs_; }
  const Node& node(Value v) const;
  /// Input nodes in declaration order (their binding order).
  const std::vector<Value>& inputs() const { return inputs_; }
  int dropout_count() const { return dropout_count_; }
  /// The stream a dropout made without an explicit one would get.
  int next_dropout_stream() const { return next_stream_; }
  /// Looks up an input or named value; returns an invalid Value when absent.
  Value find(std::string_view name) const;

 private:
  Value push(Node n);
  Value push_op(Node n);
  void check_operand(Value v, std::string_view what) const;
  void check_new_name(std::string_view name, std::string_view what) const;

  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::vector<Node> nodes_;
  std::vector<Output> outputs_;
  std::vector<Value> inputs_;                      // in declaration order
  std::array<Value, 2> accumulators_{};            // by index; invalid until made
  std::unordered_map<std::string, std::uint32_t, NameHash, std::equal_to<>> names_;  // name -> node
  std::size_t op_count_ = 0, scale_count_ = 0;
  int dropout_count_ = 0;
  int next_stream_ = 0;
};

/// Checks a whole graph: at least one output, every output full, no unused
/// inputs are allowed (they are bindings without code), names unique.
void verify(const Graph& g);

}  // namespace epifuse
