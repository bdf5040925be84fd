// The parts of a KernelSource that every kernel family fills the same way.
#include <fmt/format.h>

#include "codegen/kernel_plan.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

void bind_graph_tensors(const KernelPlan& plan, KernelSource& ks,
                        const std::function<int(const TensorPlan&)>& alignment) {
  ks.name = plan.kernel_name;
  ks.tile = plan.tile;
  ks.path = plan.path;
  for (const auto& t : plan.inputs) {
    ks.inputs.push_back(t.binding);
    ks.input_alignment.push_back(alignment(t));
  }
  for (const auto& t : plan.outputs) {
    ks.outputs.push_back(t.binding);
    ks.output_alignment.push_back(alignment(t));
  }
  for (Value v : plan.scales) ks.scalars.push_back(static_cast<float>(plan.spec->graph.node(v).alpha));
}

std::string rng_state_setup(const KernelPlan& plan, std::string_view pad) {
  if (plan.dropouts.empty()) return fmt::format("{}// no dropout draws: no seed to read", pad);
  return fmt::format("{}const ef_rng_state rng = ef_rng_read(p);  // read once (Note [Seeds on the device])", pad);
}

std::string describe_chain(const KernelPlan& plan) {
  std::string s;
  for (const Node& n : plan.spec->graph.nodes())
    if (n.kind == NodeKind::op) s += fmt::format("{}{}", s.empty() ? "" : " -> ", op_info(n.op).name);
  s += " | out";
  for (const auto& t : plan.outputs) s += fmt::format(" {}", to_string(t.dtype));
  return s;
}

}  // namespace epifuse
