#pragma once
// The row family's reductions in emitted source: a stage's block reductions
// (Note [Reductions of a stage]) and the [N] outputs' column sums
// (Note [Column sums]). Pieces of emit_row (emit_row.cpp), defined in emit_row_sums.cpp.
#include <string>

#include "codegen/row/row.hpp"

namespace epifuse {

/// The reducer calls that end stage `st`, one a kind (sums, maxima), and the
/// per-row values v<id> they give the later stages.
std::string emit_stage_reductions(const RowPlan& r, const RowStage& st);
/// The most values one reducer call combines in this kernel (RED_VALUES).
int reduced_together(const RowPlan& r);
/// The column sums' per-thread accumulators, zeroed before the rows ("" without [N] outputs).
std::string emit_col_setup(const RowPlan& r);
/// After the rows: the block's column sums, then the grid's tree and the stores ("" without [N] outputs).
std::string emit_col_finish(const RowPlan& r);

}  // namespace epifuse
