// The chain shorthand (DESIGN §7.1): a linear list of steps applied to the
// mainloop's leaf, desugared into the same nodes the full form makes.
//
//   "bias"                       add the declared input `bias`
//   "gelu_tanh"                  apply an op of one operand and no attribute
//   {"op": "dropout", "p": 0.1}  an op with its attributes ("rng" too)
//   {"op": "mul", "arg": "gate"} a binary op with a declared input
//   {"dropout": 0.1}             one-key form: the op's main attribute
//   {"mul": "gate"}              (p, alpha, to) or a binary op's input
#include "ir/names.hpp"
#include "json/body.hpp"
#include "json/op_attributes.hpp"

namespace epifuse::schema {

namespace {

// The second operand of a binary step: a declared input.
Value input_operand(Scope& scope, const Json& v, const JsonPath& at) {
  const std::string name = read_string(v, at);
  const Value in = scope.input(name);
  if (!in.valid())
    fail(at, "'{}' is not a declared input (a chain's binary op takes an input as its "
             "second operand)", names::excerpt(name));
  return in;
}

Value apply_binary(Scope& scope, OpKind op, Value current, Value in, const JsonPath& at) {
  const Value args[] = {current, in};
  return OpAttributes{}.apply(scope.graph(), op, args, at);
}

Value step_from_string(Scope& scope, Value current, const std::string& s, const JsonPath& at) {
  const Value in = scope.input(s);
  const OpInfo* op = find_op(s);
  if (in.valid() && op)
    fail(at, "'{}' is both a declared input and an op, so the step is ambiguous; rename the input", s);
  if (in.valid()) return apply_binary(scope, OpKind::add, current, in, at);
  if (!op) fail(at, "'{}' is neither a declared input nor an op", names::excerpt(s));
  if (op->arity == 2)
    fail(at, "{0} needs a second operand: write {{\"op\": \"{0}\", \"arg\": INPUT}}", s);
  if (auto attr = primary_attribute(op->kind); !attr.empty())
    fail(at, "{0} needs its '{1}': write {{\"op\": \"{0}\", \"{1}\": ...}} or {{\"{0}\": ...}}", s,
         attr);
  return OpAttributes{}.apply(scope.graph(), op->kind, std::span(&current, 1), at);
}

// {"op": NAME, attributes... or "arg"}
Value step_from_op_object(Scope& scope, Value current, const Json& e, const JsonPath& at) {
  const OpInfo& info = read_op(*find(e, "op"), at.key("op"));
  std::vector<std::string_view> allowed = {"op"};
  if (info.arity == 2) allowed.push_back("arg");
  for (auto key : attribute_keys(info.kind)) allowed.push_back(key);
  check_keys(e, at, allowed, fmt::format("chain op {}", info.name));
  if (info.arity == 2)
    return apply_binary(scope, info.kind, current,
                        input_operand(scope, require(e, at, "arg"), at.key("arg")), at);
  OpAttributes attributes;
  attributes.read_all(info.kind, e, at);
  return attributes.apply(scope.graph(), info.kind, std::span(&current, 1), at);
}

// {OP: VALUE}
Value step_from_one_key(Scope& scope, Value current, const Json& e, const JsonPath& at) {
  const auto only = e.begin();
  const std::string& key = only.key();
  const Json& value = only.value();
  const JsonPath value_at = at.key(key);
  const OpInfo* info = find_op(key);
  if (!info)
    fail(value_at, "unknown op '{}' (a chain step object is {{\"op\": NAME, ...}} or {{OP: VALUE}})",
         names::excerpt(key));
  if (info->arity == 2)
    return apply_binary(scope, info->kind, current, input_operand(scope, value, value_at), at);
  const auto attr = primary_attribute(info->kind);
  if (attr.empty()) fail(value_at, "{0} takes no value: write the step as \"{0}\"", key);
  OpAttributes attributes;
  attributes.read(info->kind, attr, value, value_at);
  return attributes.apply(scope.graph(), info->kind, std::span(&current, 1), at);
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
