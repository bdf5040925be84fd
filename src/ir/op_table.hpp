#pragma once
// The one table of ops (STYLE rule 5). Op-name strings stop at the JSON layer
// and the printer; everything else switches on OpKind.
#include <span>
#include <string_view>

#include "epifuse/graph.hpp"

namespace epifuse {

struct OpInfo {
  OpKind kind;
  std::string_view name;   ///< JSON spelling and printed name
  int arity;               ///< number of value operands
  std::string_view math;   ///< one-line definition, fp32 semantics
};

std::span<const OpInfo> op_table();
const OpInfo& op_info(OpKind op);
/// Looks an op up by its JSON spelling; nullptr when unknown.
const OpInfo* find_op(std::string_view name);

}  // namespace epifuse
