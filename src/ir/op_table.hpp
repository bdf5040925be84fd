#pragma once
// The one table of ops (docs/style.md, rule 5). Op-name strings stop at the JSON layer
// and the printer; everything else switches on OpKind.
#include <cstdint>
#include <span>
#include <string_view>

#include "epifuse/graph.hpp"

namespace epifuse {

/// How the emitter spells an op in kernel source (every dialect; a dialect
/// overrides only the device functions' definitions, templates/common/*.cuh).
enum class Spelling : std::uint8_t {
  infix,    ///< `a <device> b`
  call,     ///< `<device>(a[, b])`, with `_fast` appended where it has one and the precision policy allows it
  special,  ///< spelled by the emitter from the node's attributes (scale, dropout, cast, add_scalar)
};

/// The finest output a `_fast` form is accurate enough for (docs/design.md §3: its
/// error below half an ulp of the output's dtype: 2^-9 relative for bf16,
/// 2^-12 for f16). f32 outputs take it only where the spec asks for "fast".
enum class FastFor : std::uint8_t {
  none,  ///< no `_fast` form
  bf16,  ///< tanh.approx (2^-11 relative); lg2.approx (2^-21.4 absolute near 1, so no relative bound there)
  f16,   ///< ex2.approx and rcp.approx forms (sigmoid, silu, gelu_tanh: ~2^-20 relative), __expf (2 + 1.173|x| ulp), rsqrt.approx
};

struct OpInfo {
  OpKind kind;
  std::string_view name;    ///< JSON spelling and printed name
  int arity;                ///< number of value operands
  std::string_view math;    ///< one-line definition, fp32 semantics
  Spelling spelling;
  std::string_view device;  ///< infix operator or device function (templates/common/*.cuh)
  FastFor fast_for;         ///< where its `_fast` form may replace it (docs/design.md §3 precision policy)
};

std::span<const OpInfo> op_table();
/// row_max, row_sum, row_mean: the result has one value per row.
constexpr bool is_row_reduction(OpKind op) {
  return op == OpKind::row_max || op == OpKind::row_sum || op == OpKind::row_mean;
}
/// col_sum: the result has one value per column, summed over every row.
constexpr bool is_col_reduction(OpKind op) { return op == OpKind::col_sum; }
const OpInfo& op_info(OpKind op);
/// Looks an op up by its JSON spelling; nullptr when unknown.
const OpInfo* find_op(std::string_view name);

}  // namespace epifuse
