// Pass 1: verify the spec and shape, then decide which generated identifier
// each tensor gets and which nodes become runtime parameters or draws. Binding
// names stay in the plan; only in<k>/out<k>/v<id>/d<k> reach the source
// (docs/design.md §6: no user text in generated code).
#include "codegen/kernel_plan.hpp"
#include "epifuse/errors.hpp"
#include "ir/dropout.hpp"

namespace epifuse {

KernelPlan plan_operands(const KernelSpec& spec, const Shape& shape, KernelPath path) {
  verify(spec);
  verify_shape(spec, shape);
  KernelPlan plan;
  plan.spec = &spec;
  plan.shape = shape;
  plan.path = path;
  const Graph& g = spec.graph;
  for (Value v : g.inputs()) {
    const Node& n = g.node(v);
    const std::size_t i = plan.inputs.size();
    plan.inputs.push_back({v, n.name, n.dtype, n.broadcast, fmt::format("in{}", i), input_strided(shape, i)});
  }
  for (const Output& o : g.outputs()) {
    const std::size_t j = plan.outputs.size();
    plan.outputs.push_back({o.value, o.name, o.dtype, Broadcast::full, fmt::format("out{}", j), output_strided(shape, j)});
  }
  for (std::size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    const Value v{static_cast<std::uint32_t>(i)};
    if (n.kind == NodeKind::accumulator) {
      if (plan.accumulators.size() <= static_cast<std::size_t>(n.accumulator))
        plan.accumulators.resize(static_cast<std::size_t>(n.accumulator) + 1);
      plan.accumulators[static_cast<std::size_t>(n.accumulator)] = v;
    }
    if (n.kind != NodeKind::op) continue;
    if (n.op == OpKind::scale) plan.scales.push_back(v);
    if (n.op == OpKind::dropout && dropout_effect(n.p, n.rng) == DropoutEffect::masked) plan.dropouts.push_back(v);
  }
  // A graph may read acc1 alone (dual_gemm): only leaves the graph has are
  // epilogue arguments (each carries its accumulator number in the contract).
  std::erase_if(plan.accumulators, [](Value v) { return !v.valid(); });
  return plan;
}

}  // namespace epifuse
