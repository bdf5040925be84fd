// The chain shorthand (docs/design.md §7.1): a linear list of steps applied to the
// mainloop's leaf, desugared into the same nodes the full form makes.
//
//   "bias"                       add the declared input `bias`
//   "gelu_tanh"                  apply an op of one operand and no attribute
//   {"op": "dropout", "p": 0.1}  an op with its attributes ("rng" too)
//   {"op": "mul", "arg": "gate"} a binary op with a declared input
//   {"op": "layernorm", "args": ["w", "b"], "eps": 1e-5}
//                                an op of more operands, each a declared input
//   {"dropout": 0.1}             one-key form: the op's main attribute
//   {"mul": "gate"}              (p, alpha, to, c) or the op's other operands
//   {"layernorm": ["w", "b"]}    (an input, or an array of inputs)
#include "ir/names.hpp"
#include "json/body.hpp"
#include "json/op_attributes.hpp"

namespace epifuse::schema {

namespace {

// An operand after the current value: a declared input.
Value input_operand(Scope& scope, const Json& v, const JsonPath& at) {
  const std::string name = read_string(v, at);
  const Value in = scope.input(name);
  if (!in.valid())
    fail(at, "'{}' is not a declared input (a chain step's operands after the current value are "
             "declared inputs)", names::excerpt(name));
  return in;
}

// What a step of `op` writes for its operands after the current value.
std::string operands_hint(const JsonOp& op) {
  if (op.arity() == 2) return "\"arg\": INPUT";
  std::string inputs;
  for (int k = 1; k < op.arity(); ++k) inputs += k == 1 ? "INPUT" : ", INPUT";
  return fmt::format("\"args\": [{}]", inputs);
}

// The current value, then the operands written at `at` (`v`): one input for an
// op of two operands, an array of arity - 1 inputs for more.
std::vector<Value> step_operands(Scope& scope, const JsonOp& op, Value current, const Json& v, const JsonPath& at) {
  std::vector<Value> args = {current};
  if (op.arity() == 2) {
    args.push_back(input_operand(scope, v, at));
    return args;
  }
  if (!v.is_array() || v.size() != static_cast<std::size_t>(op.arity() - 1))
    fail(at, "{} takes {} inputs after the current value, as {}, got {}", op.name(), op.arity() - 1,
         operands_hint(op), describe(v));
  for (std::size_t k = 0; k < v.size(); ++k) args.push_back(input_operand(scope, v[k], at.index(k)));
  return args;
}

Value step_from_string(Scope& scope, Value current, const std::string& s, const JsonPath& at) {
  const Value in = scope.input(s);
  const auto op = find_json_op(s);
  if (in.valid() && op)
    fail(at, "'{}' is both a declared input and an op, so the step is ambiguous; rename the input", s);
  if (in.valid()) {
    const Value args[] = {current, in};
    return OpAttributes{}.apply(scope.graph(), JsonOp{&op_info(OpKind::add), nullptr}, args, at);
  }
  if (!op) fail(at, "'{}' is neither a declared input nor an op", names::excerpt(s));
  if (op->arity() == 2)
    fail(at, "{0} needs a second operand: write {{\"op\": \"{0}\", \"arg\": INPUT}}", s);
  if (op->arity() > 2)
    fail(at, "{0} needs {1} more operands: write {{\"op\": \"{0}\", {2}}}", s, op->arity() - 1, operands_hint(*op));
  if (needs_attribute(*op)) {
    const auto attr = primary_attribute(*op);
    fail(at, "{0} needs its '{1}': write {{\"op\": \"{0}\", \"{1}\": ...}} or {{\"{0}\": ...}}", s, attr);
  }
  return OpAttributes{}.apply(scope.graph(), *op, std::span(&current, 1), at);
}

// {"op": NAME, attributes... and "arg" or "args"}
Value step_from_op_object(Scope& scope, Value current, const Json& e, const JsonPath& at) {
  const JsonOp op = read_op(*find(e, "op"), at.key("op"));
  const std::string_view operands_key = op.arity() == 2 ? "arg" : "args";
  std::vector<std::string_view> allowed = {"op"};
  if (op.arity() > 1) allowed.push_back(operands_key);
  for (auto key : attribute_keys(op)) allowed.push_back(key);
  check_keys(e, at, allowed, fmt::format("chain op {}", op.name()));
  std::vector<Value> args = {current};
  if (op.arity() > 1)
    args = step_operands(scope, op, current, require(e, at, operands_key), at.key(operands_key));
  OpAttributes attributes;
  attributes.read_all(op, e, at);
  return attributes.apply(scope.graph(), op, args, at);
}

// {OP: VALUE}
Value step_from_one_key(Scope& scope, Value current, const Json& e, const JsonPath& at) {
  const auto only = e.begin();
  const std::string& key = only.key();
  const Json& value = only.value();
  const JsonPath value_at = at.key(key);
  const auto op = find_json_op(key);
  if (!op)
    fail(value_at, "unknown op '{}' (a chain step object is {{\"op\": NAME, ...}} or {{OP: VALUE}})",
         names::excerpt(key));
  if (op->arity() > 1)
    return OpAttributes{}.apply(scope.graph(), *op, step_operands(scope, *op, current, value, value_at), at);
  const auto attr = primary_attribute(*op);
  if (attr.empty()) fail(value_at, "{0} takes no value: write the step as \"{0}\"", key);
  OpAttributes attributes;
  attributes.read(*op, attr, value, value_at);
  return attributes.apply(scope.graph(), *op, std::span(&current, 1), at);
}

Value apply_step(Scope& scope, Value current, const Json& e, const JsonPath& at) {
  if (e.is_string()) return step_from_string(scope, current, e.get<std::string>(), at);
  if (!e.is_object())
    fail(at, "a chain step is an input name, an op name or an op object, got {}", describe(e));
  if (find(e, "op")) return step_from_op_object(scope, current, e, at);
  if (e.size() != 1)
    fail(at, "a chain step object is {{\"op\": NAME, ...}} or has exactly one key {{OP: VALUE}}, "
             "got {}", show(e));
  return step_from_one_key(scope, current, e, at);
}

// The leaf a chain starts from.
Value chain_start(Scope& scope, const JsonPath& at) {
  switch (scope.kind()) {
    case MainloopKind::elementwise: {
      const Value x = scope.input("x");
      if (!x.valid())
        fail(at, "an elementwise chain starts from the input 'x', which is not declared in inputs");
      const Broadcast b = scope.graph().node(x).broadcast;
      if (b != Broadcast::full)
        fail(at, "an elementwise chain starts from the input 'x', which must be full [M,N], not {}",
             to_string(b));
      return x;
    }
    case MainloopKind::gemm: return scope.lookup(names::k_gemm_accumulators[0], at);
    case MainloopKind::dual_gemm: break;
  }
  fail(at, "a dual_gemm kernel has two accumulators and a chain only one start; "
           "write it with ops and outputs");
}

}  // namespace

void read_chain(Scope& scope, const Json& chain, const JsonPath& at, DType out) {
  expect_array(chain, at);
  Value current = chain_start(scope, at);
  for (std::size_t i = 0; i < chain.size(); ++i)
    current = apply_step(scope, current, chain[i], at.index(i));
  at_path(at, [&] { scope.graph().output("y", current, out); });
}

}  // namespace epifuse::schema
