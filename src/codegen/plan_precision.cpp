// Pass 3: the precision policy of docs/design.md §3, decided per node. A node may use
// its op's `_fast` form (the hardware's approximate instructions) when the spec
// asks for "fast", or when that form's error stays below half an ulp of every
// output the node reaches: bf16 (2^-9 relative) takes every fast form, f16
// (2^-12) those built on ex2.approx and rcp.approx, whose error is ~2^-20
// (OpInfo::fast_for; tanh.approx's 2^-11 is not enough there). A node that
// reaches an f32 output stays accurate.
#include "codegen/kernel_plan.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

namespace {
// How fine the node's outputs are: 0 only bf16, 1 f16 among them (none f32), 2 f32 among them.
int fineness(DType d) { return d == DType::bf16 ? 0 : d == DType::f16 ? 1 : 2; }
}  // namespace

void plan_precision(KernelPlan& plan) {
  const Graph& g = plan.spec->graph;
  const std::size_t n = g.nodes().size();
  if (plan.spec->precision == Precision::fast) {
    plan.fast.assign(n, true);
    return;
  }
  // reaches[i]: node i feeds at least one output; finest[i]: the finest of them.
  std::vector<bool> reaches(n, false);
  std::vector<int> finest(n, 0);
  for (const Output& o : g.outputs()) {
    reaches[o.value.id] = true;
    finest[o.value.id] = std::max(finest[o.value.id], fineness(o.dtype));
  }
  for (std::size_t i = n; i-- > 0;) {
    if (!reaches[i]) continue;
    for (Value a : g.nodes()[i].args) {
      reaches[a.id] = true;
      finest[a.id] = std::max(finest[a.id], finest[i]);
    }
  }
  plan.fast.assign(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    const Node& node = g.nodes()[i];
    if (!reaches[i] || node.kind != NodeKind::op) continue;
    const FastFor f = op_info(node.op).fast_for;
    plan.fast[i] = finest[i] == 0 ? f != FastFor::none : finest[i] == 1 && f == FastFor::f16;
  }
}

}  // namespace epifuse
