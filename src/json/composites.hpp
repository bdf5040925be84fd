#pragma once
// Composite ops: names JSON accepts beside the op table's, each desugared by
// its Graph builder method into primitive ops. The graph keeps no composite
// node, so the signature, the reference and codegen see only primitives, and
// spec_to_json writes them back as those primitives (docs/row-reductions.md).
#include <optional>
#include <span>
#include <string_view>

#include "epifuse/graph.hpp"

namespace epifuse::schema {

struct CompositeInfo {
  std::string_view name;              ///< JSON spelling
  int arity;                          ///< value operands: x, then weight (and bias)
  std::string_view math;              ///< one-line definition
  std::optional<double> default_eps;  ///< takes the attribute `eps`, with this default; nullopt: no attribute
  /// The builder call; eps is the attribute or its default (ignored without one).
  Value (*build)(Graph& g, std::span<const Value> args, double eps);
};

std::span<const CompositeInfo> composite_table();
/// Looks a composite up by its JSON spelling; nullptr when unknown.
const CompositeInfo* find_composite(std::string_view name);

}  // namespace epifuse::schema
