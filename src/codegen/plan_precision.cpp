// Pass 3: the precision policy of DESIGN §3, decided per node. A node may use
// the hardware's approximate instructions (tanh.approx.f32, max relative
// error about 2^-11) when the spec asks for "fast", or when every output it
// reaches is bf16, whose half ulp (2^-9 relative) is well above that error.
// f16 (half ulp 2^-12) and f32 outputs keep the accurate functions.
#include "codegen/kernel_plan.hpp"

namespace epifuse {

void plan_precision(KernelPlan& plan) {
  const Graph& g = plan.spec->graph;
  const std::size_t n = g.nodes().size();
  if (plan.spec->precision == Precision::fast) {
    plan.fast.assign(n, true);
    return;
  }
  // reaches[i]: node i feeds at least one output; all_bf16[i]: all of them bf16.
  std::vector<bool> reaches(n, false), all_bf16(n, true);
  for (const Output& o : g.outputs()) {
    reaches[o.value.id] = true;
    all_bf16[o.value.id] = all_bf16[o.value.id] && o.dtype == DType::bf16;
  }
  for (std::size_t i = n; i-- > 0;) {
    if (!reaches[i]) continue;
    for (Value a : g.nodes()[i].args) {
      reaches[a.id] = true;
      all_bf16[a.id] = all_bf16[a.id] && all_bf16[i];
    }
  }
  plan.fast.assign(n, false);
  for (std::size_t i = 0; i < n; ++i) plan.fast[i] = reaches[i] && all_bf16[i];
}

}  // namespace epifuse
