// spec_from_json: the top level of schema version 1 (docs/design.md §7.1,
// docs/json-schema.md). The body is read by ops.cpp or chain.cpp.
#include <cstdint>

#include "epifuse/json.hpp"
#include "ir/limits.hpp"
#include "ir/names.hpp"
#include "json/body.hpp"

namespace epifuse {

using schema::fail;
using schema::find;
using schema::Json;
using schema::JsonPath;

namespace {

void read_version(const Json& doc, const JsonPath& root) {
  const Json* v = find(doc, "epifuse");
  if (!v)
    fail(root, "missing key 'epifuse', the schema version (this build reads \"epifuse\": {})",
         k_schema_version);
  const JsonPath at = root.key("epifuse");
  if (!v->is_number_integer())
    fail(at, "the schema version must be the integer {}, got {}", k_schema_version,
         schema::describe(*v));
  if (v->is_number_unsigned() ? v->get<std::uint64_t>() != k_schema_version
                              : v->get<std::int64_t>() != k_schema_version)
    fail(at, "unsupported schema version {} (this build reads version {})", schema::show(*v),
         k_schema_version);
}

// One problem dimension: an integer in [0, 2^40] (as verify_shape; 0 is an empty problem).
// Written as a JSON integer, as the schema version is: 4.0 and 2e12 are
// floats and are refused whatever their value, so that every integer field
// of a spec follows one rule.
std::int64_t read_dimension(const Json& v, const JsonPath& at) {
  using limits::k_max_dim;
  if (v.is_number_float())
    fail(at, "a dimension is a non-negative integer written without a fraction or exponent, got {}",
         schema::show(v));
  if (!v.is_number_integer())
    fail(at, "a dimension is a non-negative integer, got {}", schema::describe(v));
  if (!v.is_number_unsigned() && v.get<std::int64_t>() < 0)
    fail(at, "a dimension must not be negative, got {}", schema::show(v));
  if (v.get<std::uint64_t>() > static_cast<std::uint64_t>(k_max_dim))
    fail(at, "dimension {} exceeds the limit of 2^40 = {}", schema::show(v), k_max_dim);
  return v.get<std::int64_t>();
}

// The epifuse extension "shape": a default problem shape, [M, N] or [M, N, K].
Shape read_shape(const KernelSpec& spec, const Json& v, const JsonPath& at) {
  schema::expect_array(v, at);
  const bool gemm = spec.mainloop.kind != MainloopKind::elementwise;
  const std::size_t rank = gemm ? 3 : 2;
  if (v.size() != rank)
    fail(at, "the shape of a{} {} kernel is {}, got {} dimension{}", gemm ? "" : "n",
         to_string(spec.mainloop.kind), gemm ? "[M, N, K]" : "[M, N]", v.size(),
         v.size() == 1 ? "" : "s");
  Shape s;
  s.m = read_dimension(v[0], at.index(0));
  s.n = read_dimension(v[1], at.index(1));
  if (gemm) s.k = read_dimension(v[2], at.index(2));
  // Before verify_shape, whose message would read "shape: shape: ...".
  if (s.n != 0 && s.m > limits::k_max_elements / s.n)
    fail(at, "M*N = {}*{} exceeds the limit of 2^48 = {} elements", s.m, s.n, limits::k_max_elements);
  schema::at_path(at, [&] { verify_shape(spec, s); });
  return s;
}

// The chain's "name" is display text, not an identifier (it names kernels and
// is printed by the command line), so any printable text goes; a control
// character does not: "\u001b[2J" would clear the terminal of whoever lists
// the chain, and "\u0000" would cut the name short wherever it is passed on
// as a C string.
std::string read_chain_name(const Json& v, const JsonPath& at) {
  std::string name = schema::read_string(v, at);
  if (const std::optional<std::string> problem = names::chain_name_problem(name)) fail(at, "{}", *problem);
  return name;
}

// The accumulator names the full form refers to, so that their leaves can be
// made first. Tolerant: malformed entries are reported when they are read.
std::set<std::string, std::less<>> referenced_names(const Json* ops, const Json* outputs) {
  std::set<std::string, std::less<>> names;
  if (ops && ops->is_array())
    for (const auto& op : *ops)
      if (const Json* args = op.is_object() ? find(op, "args") : nullptr; args && args->is_array())
        for (const auto& a : *args)
          if (a.is_string()) names.insert(a.get<std::string>());
  if (outputs && outputs->is_object())
    for (const auto& [name, decl] : outputs->items()) {
      const Json* value = decl.is_object() ? find(decl, "value") : nullptr;
      names.insert(value && value->is_string() ? value->get<std::string>() : name);
    }
  return names;
}

}  // namespace

Mainloop schema::read_mainloop(const Json& v, const JsonPath& at) {
  Mainloop m;
  if (v.is_string()) {  // "gemm" alone means the defaults below
    m.kind = schema::read_mainloop_kind(v, at);
    return m;
  }
  if (!v.is_object())
    fail(at, "expected \"elementwise\" or an object {{\"kind\": \"gemm\", ...}}, got {}",
         schema::describe(v));
  m.kind = schema::read_mainloop_kind(schema::require(v, at, "kind"), at.key("kind"));
  if (m.kind == MainloopKind::elementwise) {
    schema::check_keys(v, at, {"kind"}, "an elementwise mainloop");
    return m;
  }
  schema::check_keys(v, at, {"kind", "a", "b", "a_layout", "b_layout", "math"},
                     fmt::format("a {} mainloop", to_string(m.kind)));
  if (const Json* a = find(v, "a")) m.a = schema::read_dtype(*a, at.key("a"));
  if (const Json* b = find(v, "b")) m.b = schema::read_dtype(*b, at.key("b"));
  if (const Json* l = find(v, "a_layout")) m.a_layout = schema::read_layout(*l, at.key("a_layout"));
  if (const Json* l = find(v, "b_layout")) m.b_layout = schema::read_layout(*l, at.key("b_layout"));
  if (const Json* x = find(v, "math")) {
    if (!x->is_string() || (*x != "exact" && *x != "tf32"))
      fail(at.key("math"), "expected \"exact\" or \"tf32\", got {}", schema::describe(*x));
    m.math = *x == "tf32" ? GemmMath::tf32 : GemmMath::exact;
    if (m.math == GemmMath::tf32 && (m.a != DType::f32 || m.b != DType::f32))
      fail(at.key("math"), "\"tf32\" needs f32 operands, got a={} b={}", to_string(m.a), to_string(m.b));
  }
  return m;
}

KernelSpec spec_from_json(const Json& doc) {
  const JsonPath root;
  if (!doc.is_object())
    fail(root, "a spec is a JSON object, got {}", schema::describe(doc));
  // The version first: a document of another version may have other keys.
  read_version(doc, root);
  schema::check_keys(doc, root,
                     {"epifuse", "name", "mainloop", "inputs", "ops", "outputs", "chain", "out",
                      "precision", "shape"},
                     "a spec");

  KernelSpec spec;
  if (const Json* v = find(doc, "name")) spec.name = read_chain_name(*v, root.key("name"));
  if (const Json* v = find(doc, "mainloop")) spec.mainloop = schema::read_mainloop(*v, root.key("mainloop"));
  if (const Json* v = find(doc, "precision"))
    spec.precision = schema::read_precision(*v, root.key("precision"));
  if (const Json* v = find(doc, "shape")) spec.default_shape = read_shape(spec, *v, root.key("shape"));

  const Json* chain = find(doc, "chain");
  const Json* ops = find(doc, "ops");
  const Json* outputs = find(doc, "outputs");
  const Json* out = find(doc, "out");
  if (chain && (ops || outputs))
    fail(root.key(ops ? "ops" : "outputs"),
         "'chain' replaces 'ops' and 'outputs': write one form, not both");
  if (!chain && out)
    fail(root.key("out"), "'out' belongs to the chain shorthand; with 'ops', give each output "
                          "its dtype in 'outputs'");
  if (!chain && !outputs)
    fail(root, "missing key 'outputs' (or write the chain shorthand: 'chain' and 'out')");

  schema::Scope scope(spec);
  const std::string chain_leaf(names::k_gemm_accumulators[0]);  // a chain starts from `acc`
  scope.make_accumulators(chain ? std::set<std::string, std::less<>>{chain_leaf}
                                : referenced_names(ops, outputs));
  if (const Json* v = find(doc, "inputs")) scope.declare_inputs(*v, root.key("inputs"));
  if (chain) {
    const DType dtype = out ? schema::read_dtype(*out, root.key("out")) : DType::f32;
    schema::read_chain(scope, *chain, root.key("chain"), dtype);
  } else {
    if (ops) schema::read_ops(scope, *ops, root.key("ops"));
    schema::read_outputs(scope, *outputs, root.key("outputs"));
  }
  scope.check_inputs_used();
  // Whatever the checks above did not place more precisely.
  schema::at_path(root, [&] { verify(spec); });
  return spec;
}

}  // namespace epifuse
