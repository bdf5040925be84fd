#include "json/scope.hpp"

#include "ir/names.hpp"

namespace epifuse::schema {

void Scope::make_accumulators(const std::set<std::string, std::less<>>& referenced) {
  const auto leaves = names::accumulator_names(kind());
  for (std::size_t i = 0; i < leaves.size(); ++i)
    if (referenced.contains(leaves[i])) graph().accumulator(static_cast<int>(i));
}

void Scope::declare_inputs(const Json& inputs, const JsonPath& at) {
  inputs_at_ = at;
  expect_object(inputs, at);
  const bool gemm = kind() != MainloopKind::elementwise;
  for (const auto& [name, decl] : inputs.items()) {
    const JsonPath here = at.key(name);
    expect_object(decl, here);
    check_keys(decl, here, {"dtype", "broadcast", "grad"}, "an input");
    const DType dtype = read_dtype(require(decl, here, "dtype"), here.key("dtype"));
    Broadcast broadcast = Broadcast::full;
    if (const Json* b = find(decl, "broadcast")) broadcast = read_broadcast(*b, here.key("broadcast"));
    // The same rule as verify(KernelSpec), checked here to name the input's path.
    if (gemm && names::is_gemm_operand_name(name))
      fail(here, "in a {} kernel the names {} are bound to the GEMM operands; rename the input",
           to_string(kind()), names::k_gemm_operand_list);
    // The builder checks the name (identifier, not an accumulator, not taken).
    // `&name = name`: clang before 16 cannot capture a structured binding.
    Value v = at_path(here, [&, &name = name] { return graph().input(name, dtype, broadcast); });
    if (const Json* g = find(decl, "grad")) {
      // false: grad() never differentiates it (an additive mask; docs/autodiff.md).
      if (!g->is_boolean()) fail(here.key("grad"), "'grad' is true or false, got {}", describe(*g));
      graph().set_differentiable(v, g->get<bool>());
    }
    values_.emplace(name, v);
    definer_.emplace(name, "an input");
  }
}

Value Scope::input(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end() || spec_.graph.node(it->second).kind != NodeKind::input) return {};
  return it->second;
}

Value Scope::lookup(std::string_view name, const JsonPath& at) {
  if (names::is_accumulator_name(name)) {
    const auto leaves = names::accumulator_names(kind());
    for (std::size_t i = 0; i < leaves.size(); ++i)
      if (leaves[i] == name) return graph().accumulator(static_cast<int>(i));
    switch (kind()) {
      case MainloopKind::elementwise:
        fail(at, "'{}' is a GEMM accumulator; an elementwise kernel has none "
                 "(it reads a declared input, conventionally 'x')", name);
      case MainloopKind::gemm:
        fail(at, "a gemm kernel has one accumulator, 'acc' ('{}' belongs to dual_gemm)", name);
      case MainloopKind::dual_gemm:
        fail(at, "a dual_gemm kernel has two accumulators, 'acc0' and 'acc1' (not '{}')", name);
    }
  }
  auto it = values_.find(name);
  return it == values_.end() ? Value{} : it->second;
}

void Scope::define(const std::string& name, Value v, const JsonPath& at, std::string definer) {
  if (names::is_accumulator_name(name))
    fail(at, "'{}' is reserved for the mainloop accumulators ({})", name, names::k_accumulator_list);
  if (auto it = definer_.find(name); it != definer_.end())
    fail(at, "duplicate value name '{}' (already defined by {})", names::excerpt(name), it->second);
  at_path(at, [&] { graph().set_name(v, name); });
  values_.emplace(name, v);
  definer_.emplace(name, std::move(definer));
}

void Scope::check_inputs_used() const {
  const auto& nodes = spec_.graph.nodes();
  std::vector<bool> used(nodes.size(), false);
  for (const auto& n : nodes)
    for (Value a : n.args) used[a.id] = true;
  for (const auto& o : spec_.graph.outputs()) used[o.value.id] = true;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].kind == NodeKind::input && !used[i])
      fail(inputs_at_.key(nodes[i].name),
           "input '{}' is never used (an input without a reader is almost always a typo)",
           nodes[i].name);
}

}  // namespace epifuse::schema
