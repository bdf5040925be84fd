// The full form of a spec body: `ops` and `outputs` (docs/design.md §7.1).
#include <map>

#include "ir/names.hpp"
#include "json/body.hpp"
#include "json/op_attributes.hpp"

namespace epifuse::schema {

namespace {

// Where each op value name is defined, so that a use before the definition is
// told apart from a name that is never defined. Tolerant: malformed entries are
// reported when they are read.
std::map<std::string, std::size_t, std::less<>> definitions(const Json& ops) {
  std::map<std::string, std::size_t, std::less<>> out;
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (const Json* name = ops[i].is_object() ? find(ops[i], "name") : nullptr; name && name->is_string())
      out.emplace(name->get<std::string>(), i);
  return out;
}

}  // namespace

void read_ops(Scope& scope, const Json& ops, const JsonPath& at) {
  expect_array(ops, at);
  const auto defined_at = definitions(ops);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const JsonPath here = at.index(i);
    const Json& op = ops[i];
    expect_object(op, here);
    const JsonOp info = read_op(require(op, here, "op"), here.key("op"));
    std::vector<std::string_view> allowed = {"name", "op", "args"};
    for (auto key : attribute_keys(info)) allowed.push_back(key);
    check_keys(op, here, allowed, fmt::format("op {}", info.name()));

    const std::string name = read_string(require(op, here, "name"), here.key("name"));
    const Json& args = require(op, here, "args");
    expect_array(args, here.key("args"));
    if (args.size() != static_cast<std::size_t>(info.arity()))
      fail(here.key("args"), "{} takes {} argument{}, got {}", info.name(), info.arity(),
           info.arity() == 1 ? "" : "s", args.size());
    std::vector<Value> operands;
    for (std::size_t a = 0; a < args.size(); ++a) {
      const JsonPath arg_at = here.key("args").index(a);
      const std::string ref = read_string(args[a], arg_at);
      const Value v = scope.lookup(ref, arg_at);
      if (!v.valid()) {
        auto def = defined_at.find(ref);
        if (def != defined_at.end() && def->second >= i)
          fail(arg_at, "'{}' is used before its definition (at {}); ops are listed in order",
               names::excerpt(ref), at.index(def->second).str());
        fail(arg_at, "unknown value '{}' (not a declared input, an accumulator or an earlier op)",
             names::excerpt(ref));
      }
      operands.push_back(v);
    }

    OpAttributes attributes;
    attributes.read_all(info, op, here);
    const Value v = attributes.apply(scope.graph(), info, operands, here);
    scope.define(name, v, here.key("name"), here.str());
  }
}

void read_outputs(Scope& scope, const Json& outputs, const JsonPath& at) {
  expect_object(outputs, at);
  if (outputs.empty()) fail(at, "at least one output is required");
  for (const auto& [name, decl] : outputs.items()) {
    const JsonPath here = at.key(name);
    expect_object(decl, here);
    check_keys(decl, here, {"dtype", "value"}, "an output");
    const DType dtype = read_dtype(require(decl, here, "dtype"), here.key("dtype"));
    // The output stores the value of its own name unless "value" names another.
    std::string ref = name;
    JsonPath ref_at = here;
    if (const Json* value = find(decl, "value")) {
      ref_at = here.key("value");
      ref = read_string(*value, ref_at);
    }
    const Value v = scope.lookup(ref, ref_at);
    if (!v.valid())
      fail(ref_at, "unknown value '{}' (an output stores a declared input, an accumulator or an op value)",
           names::excerpt(ref));
    // `&name = name`: clang before 16 cannot capture a structured binding.
    at_path(here, [&, &name = name] { scope.graph().output(name, v, dtype); });
  }
}

}  // namespace epifuse::schema
