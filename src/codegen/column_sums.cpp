// The col_sum outputs of a spec, for every family that writes them (column_sums.hpp).
#include "codegen/column_sums.hpp"

#include "epifuse/errors.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

namespace {

std::string node_label(const Node& n) { return n.name.empty() ? std::string() : fmt::format(" '{}'", n.name); }

}  // namespace

bool is_column_sum(const Node& n) { return n.kind == NodeKind::op && is_col_reduction(n.op); }

const Node* first_column_sum(const KernelSpec& spec) {
  const Graph& g = spec.graph;
  for (const Output& o : g.outputs())
    if (is_column_sum(g.node(o.value))) return &g.node(o.value);
  return nullptr;
}

bool has_column_sums(const KernelSpec& spec) { return first_column_sum(spec) != nullptr; }

int column_sum_count(const KernelSpec& spec) {
  const Graph& g = spec.graph;
  int n = 0;
  for (const Output& o : g.outputs()) n += is_column_sum(g.node(o.value)) ? 1 : 0;
  return n;
}

std::vector<bool> column_sum_outputs(const KernelSpec& spec, std::string_view family) {
  const Graph& g = spec.graph;
  for (const Node& n : g.nodes())
    for (Value a : n.args)
      EPIFUSE_CHECK(!is_column_sum(g.node(a)),
                    "col_sum{}: the {} family writes a col_sum as an [N] output only, and {} reads it; "
                    "the CPU reference runs this (epifuse run --device cpu)",
                    node_label(g.node(a)), family, n.kind == NodeKind::op ? op_info(n.op).name : "a leaf");
  std::vector<bool> sums;
  for (const Output& o : g.outputs()) {
    const Node& n = g.node(o.value);
    const bool sum = is_column_sum(n);
    EPIFUSE_CHECK(sum || n.broadcast == Broadcast::full,
                  "output '{}' is a {} value ({}) that is not a col_sum: the {} family writes [M,N] outputs "
                  "and col_sums; the CPU reference writes this (epifuse run --device cpu)",
                  o.name, to_string(n.broadcast), n.broadcast == Broadcast::row ? "[N]" : "[M]", family);
    sums.push_back(sum);
  }
  return sums;
}

}  // namespace epifuse
