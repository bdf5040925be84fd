#pragma once
// The row family's shared-memory ring in emitted source: its setup before the
// rows, whole rows or pieces (Note [Ring pieces]). A piece of emit_row
// (emit_row.cpp), defined in emit_row_ring.cpp.
#include <cstddef>
#include <string>

#include "codegen/row/row.hpp"

namespace epifuse {

/// Input k's first byte in a ring stage or piece, in units of its columns: the
/// [M,N] inputs side by side, each column's bytes in input order.
std::size_t ring_offset(const KernelPlan& plan, std::size_t k);
/// A ring tile's declarations, barriers and first copies, before the rows.
std::string emit_ring_setup(const RowPlan& r);

}  // namespace epifuse
