// The row family's shared-memory ring: its setup in emitted source, before
// the rows (emit_row_ring.hpp). The stages read it (emit_row.cpp).
#include "codegen/row/emit_row_ring.hpp"

#include <fmt/format.h>

#include "epifuse/dtype.hpp"

namespace epifuse {

std::size_t ring_offset(const KernelPlan& plan, std::size_t k) {
  std::size_t offset = 0;
  for (std::size_t i = 0; i < k; ++i)
    if (plan.inputs[i].broadcast == Broadcast::full) offset += size_of(plan.inputs[i].dtype);
  return offset;
}

namespace {

// Where row r of full input t starts, for the ring's bulk copies.
// Note [Strided rows]: a strided row's copy starts at r * p.ld_<field>. The
// bulk copy needs that on 16 bytes, and the tile says so: an ld that is not
// narrows VEC below a ring's 16-byte vectors, and RowFamily::resolve_tile
// takes the tile without the ring; an ld launched later that is not takes the
// general kernel, which streams.
std::string row_start(const TensorPlan& t) {
  return fmt::format("p.{} + r * {}", t.field, t.strided ? "p.ld_" + t.field : "p.n");
}

// Whole rows: stage s of the ring holds a block's part of one row; thread 0
// copies a row in RING - 1 rows ahead. The barriers are initialised before
// any thread waits: the row loop's first __syncthreads orders it.
std::string whole_rows_setup(const RowPlan& r) {
  const KernelPlan& plan = *r.plan;
  std::string copies;
  for (std::size_t k = 0; k < plan.inputs.size(); ++k) {
    const TensorPlan& t = plan.inputs[k];
    if (t.broadcast != Broadcast::full) continue;
    copies += fmt::format(
        "      ef_bulk_load(base_smem + {0} * ITEMS * THREADS * VEC, {1} + col0, (unsigned)chunk * {2}u, bar);\n",
        ring_offset(plan, k), row_start(t), size_of(t.dtype));
  }
  return fmt::format(
      "  // The shared-memory ring (docs/row-reductions.md): this block's columns of a row\n"
      "  // ({0} bytes each), RING rows deep; thread 0 copies a row in RING - 1 rows ahead.\n"
      "  constexpr int RING = {1}, RING_STAGE = {0} * ITEMS * THREADS * VEC;\n"
      "  extern __shared__ __align__(128) unsigned char ring[];\n"
      "  __shared__ __align__(8) unsigned long long ring_bars[RING];\n"
      "  const int chunk = (int)(p.n / CLUSTER), col0 = (CLUSTER > 1 ? (int)ef_row_cluster_rank() : 0) * chunk;\n"
      "  auto ring_bar = [&](int s) {{ return (unsigned)__cvta_generic_to_shared(ring_bars + s); }};\n"
      "  auto ring_issue = [&](long long r, int s) {{\n"
      "    const unsigned bar = ring_bar(s), base_smem = (unsigned)__cvta_generic_to_shared(ring + s * RING_STAGE);\n"
      "    ef_mbar_expect_tx(bar, (unsigned)chunk * {0}u);\n{2}"
      "  }};\n"
      "  if (threadIdx.x == 0) {{\n"
      "    for (int s = 0; s < RING; ++s) ef_mbar_init(ring_bar(s), 1);\n"
      "    ef_mbar_init_fence();\n"
      "    for (int s = 0; s < RING - 1; ++s)\n"
      "      if (red.unit() + s * red.units() < p.m) ring_issue(red.unit() + s * red.units(), s);\n"
      "  }}\n"
      "  long long ring_row = 0;  // rows this block has taken\n",
      ring_offset(plan, plan.inputs.size()), r.ring, copies);
}

// Note [Ring pieces] (docs/row-reductions.md, "Ring pieces"): a ring tile
// with pieces P copies a block's part of a row in P pieces, each into one of
// RING piece slots with its own barrier. Piece g of the block's rows belongs
// to row unit + (g / P) units. A stage waits for a piece as it reaches it;
// the row's last stage, having read a piece, passes a block barrier and thread
// 0 copies piece g + RING into the slot. So RING - P pieces of the next rows
// are in flight while this row is reduced, where a one-stage ring of whole
// rows started each row's copy only after the last one was read. Which thread
// reads which element, and the order of every sum, are a whole-row ring's:
// the bits are the same.
std::string pieces_setup(const RowPlan& r) {
  const KernelPlan& plan = *r.plan;
  const std::size_t bytes = ring_offset(plan, plan.inputs.size());  // a column of every [M,N] input
  std::string copies;
  for (std::size_t k = 0; k < plan.inputs.size(); ++k) {
    const TensorPlan& t = plan.inputs[k];
    if (t.broadcast != Broadcast::full) continue;
    copies += fmt::format(
        "    if (cols > 0) ef_bulk_load(base_smem + {0} * PIECE_COLS, {1} + col0 + first, (unsigned)cols * {2}u, bar);\n",
        ring_offset(plan, k), row_start(t), size_of(t.dtype));
  }
  return fmt::format(
      "  // The shared-memory ring in pieces (Note [Ring pieces] in src/codegen/row/emit_row_ring.cpp): this\n"
      "  // block's columns of a row ({0} bytes each) in PIECES pieces, RING piece slots.\n"
      "  constexpr int RING = {1}, PIECES = {2}, PIECE_ITEMS = ITEMS / PIECES;\n"
      "  constexpr int PIECE_COLS = PIECE_ITEMS * THREADS * VEC, PIECE_STAGE = {0} * PIECE_COLS;\n"
      "  extern __shared__ __align__(128) unsigned char ring[];\n"
      "  __shared__ __align__(8) unsigned long long ring_bars[RING];\n"
      "  const int chunk = (int)(p.n / CLUSTER), col0 = (CLUSTER > 1 ? (int)ef_row_cluster_rank() : 0) * chunk;\n"
      "  auto ring_bar = [&](int s) {{ return (unsigned)__cvta_generic_to_shared(ring_bars + s); }};\n"
      "  // Piece g of this block's rows: row unit + (g / PIECES) units, from column (g % PIECES) PIECE_COLS.\n"
      "  auto piece_issue = [&](long long g) {{\n"
      "    const long long r = red.unit() + g / PIECES * red.units();\n"
      "    if (r >= p.m) return;\n"
      "    const int s = (int)(g % RING), first = (int)(g % PIECES) * PIECE_COLS;\n"
      "    const int cols = min(PIECE_COLS, max(chunk - first, 0));\n"
      "    const unsigned bar = ring_bar(s), base_smem = (unsigned)__cvta_generic_to_shared(ring + s * PIECE_STAGE);\n"
      "    ef_mbar_expect_tx(bar, (unsigned)cols * {0}u);\n{3}"
      "  }};\n"
      "  auto piece_wait = [&](long long g) {{ ef_mbar_wait(ring_bar((int)(g % RING)), (unsigned)(g / RING) & 1u); }};\n"
      "  // Every thread has read piece g: its slot takes piece g + RING.\n"
      "  auto piece_read = [&](long long g) {{\n"
      "    __syncthreads();\n"
      "    if (threadIdx.x == 0) piece_issue(g + RING);\n"
      "  }};\n"
      "  if (threadIdx.x == 0) {{\n"
      "    for (int s = 0; s < RING; ++s) ef_mbar_init(ring_bar(s), 1);\n"
      "    ef_mbar_init_fence();\n"
      "    for (int g = 0; g < RING; ++g) piece_issue(g);\n"
      "  }}\n"
      "  __syncthreads();  // the barriers are initialised before any thread waits\n"
      "  long long ring_row = 0;  // rows this block has taken\n",
      bytes, r.tile.ring, r.tile.pieces, copies);
}

}  // namespace

std::string emit_ring_setup(const RowPlan& r) { return r.tile.pieces > 0 ? pieces_setup(r) : whole_rows_setup(r); }

}  // namespace epifuse
