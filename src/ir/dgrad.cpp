// as_gemm_epilogue (include/epifuse/dgrad.hpp): the backward spec rebuilt
// through the builder, so every check of a hand-written GEMM chain applies,
// with the upstream gradient as the accumulator.
#include "epifuse/dgrad.hpp"

#include <fmt/format.h>

#include "epifuse/errors.hpp"
#include "ir/limits.hpp"

namespace epifuse {

KernelSpec as_gemm_epilogue(const KernelSpec& backward, std::string_view upstream, const Mainloop& gemm) {
  EPIFUSE_CHECK(backward.mainloop.kind == MainloopKind::elementwise,
                "as a GEMM epilogue: '{}' already has a {} mainloop; give an elementwise backward spec",
                backward.name, to_string(backward.mainloop.kind));
  EPIFUSE_CHECK(gemm.kind == MainloopKind::gemm,
                "as a GEMM epilogue: the mainloop must be a single GEMM (the dual GEMM's backward writes two "
                "accumulators' gradients: docs/gemm-backward.md §4), got {}",
                to_string(gemm.kind));
  const Graph& from = backward.graph;
  const Value up = from.find(std::string(upstream));
  EPIFUSE_CHECK(up.valid() && from.node(up).kind == NodeKind::input,
                "as a GEMM epilogue: '{}' is not an input of '{}' (the upstream gradient, e.g. dy, becomes the "
                "accumulator)",
                upstream, backward.name);
  EPIFUSE_CHECK(from.node(up).broadcast == Broadcast::full,
                "as a GEMM epilogue: input '{}' is a {} input; the accumulator is a full [M,N] value", upstream,
                to_string(from.node(up).broadcast));

  KernelSpec s;
  const std::string name = backward.name + "_dgrad";
  s.name = name.size() <= limits::k_max_name_length ? name : backward.name;
  s.mainloop = gemm;
  s.precision = backward.precision;
  Graph& to = s.graph;
  std::vector<Value> map(from.nodes().size());
  for (std::size_t i = 0; i < from.nodes().size(); ++i) {
    const Node& n = from.nodes()[i];
    if (i == up.id) {
      map[i] = to.accumulator(0);
      continue;
    }
    switch (n.kind) {
      case NodeKind::accumulator:
        EPIFUSE_ASSERT(false, "an elementwise spec with an accumulator");
        break;
      case NodeKind::input:
        map[i] = to.input(n.name, n.dtype, n.broadcast);
        if (!n.differentiable) to.set_differentiable(map[i], false);
        continue;
      case NodeKind::op: break;
    }
    std::vector<Value> args;
    for (Value a : n.args) args.push_back(map[a.id]);
    map[i] = to.copy_op(n, args);
    if (!n.name.empty()) to.set_name(map[i], n.name);
  }
  for (const Output& o : from.outputs()) to.output(o.name, map[o.value.id], o.dtype);
  return s;
}

}  // namespace epifuse
