// Elementwise pass 1: elements per thread. Default: 16 bytes of the narrowest
// full tensor (4 for f32, 8 for 16-bit), so every full tensor moves in 16-byte
// (or wider) accesses. Philox serves four consecutive elements per call
// (docs/design.md §4), so with dropout draws the width is at least 4. The pass also
// decides whether the kernel can leave out its scalar path (KernelPath,
// docs/decisions.md).
#include <algorithm>
#include <atomic>

#include "codegen/elementwise/elementwise.hpp"
#include "epifuse/errors.hpp"
#include "ir/limits.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

void check_threads_and_vec(std::string_view what, int threads, int vec) {
  EPIFUSE_CHECK(threads >= limits::k_min_threads && threads <= limits::k_max_threads && threads % 32 == 0,
                "{}: threads per block must be a multiple of 32 in [{}, {}], got {}", what, limits::k_min_threads,
                limits::k_max_threads, threads);
  EPIFUSE_CHECK(vec == 0 || std::find(limits::k_vec_widths.begin(), limits::k_vec_widths.end(), vec) !=
                                limits::k_vec_widths.end(),
                "{}: vec must be 0 (auto), 1, 2, 4, 8 or 16, got {}", what, vec);
}

int natural_vector_width(const KernelSpec& spec) {
  std::size_t narrowest = 4;
  for (const Node& n : spec.graph.nodes())
    if (n.kind == NodeKind::input && n.broadcast == Broadcast::full)
      narrowest = std::min(narrowest, size_of(n.dtype));
  for (const Output& o : spec.graph.outputs()) narrowest = std::min(narrowest, size_of(o.dtype));
  return static_cast<int>(16 / narrowest);
}

bool draws_dropout(const KernelSpec& spec) {
  return std::any_of(spec.graph.nodes().begin(), spec.graph.nodes().end(), [](const Node& n) {
    return n.kind == NodeKind::op && n.op == OpKind::dropout && n.p > 0.0 && n.p < 1.0;
  });
}

ElementwiseTile resolve_elementwise_tile(const KernelSpec& spec, ElementwiseTile tile) {
  int vec = tile.vec ? tile.vec : natural_vector_width(spec);
  if (draws_dropout(spec)) vec = std::max(vec, 4);
  tile.vec = vec;
  return tile;
}

bool feeds_16_bytes_an_sm_clock(std::string_view target, const DeviceInfo& device) {
  return !target.starts_with("gfx") && dram_bytes_per_sm_clock(device) >= 16.0;
}

ElementwiseTile default_elementwise_tile(const KernelSpec& spec, const Shape& shape, std::string_view target,
                                         const DeviceInfo& device) {
  const ElementwiseTile plain = resolve_elementwise_tile(spec, ElementwiseTile{});
  // Note [Two vectors a thread]: 16-bit chains with dropout draws.
  if (plain.vec != 8 || !feeds_16_bytes_an_sm_clock(target, device) || !draws_dropout(spec)) return plain;
  ElementwiseTile wide = plain;
  wide.vec = 16;
  constexpr std::int64_t k_blocks_an_sm = 4;
  const std::int64_t blocks = shape.m * shape.n / (std::int64_t{wide.threads} * wide.vec);
  if (shape.n % wide.vec != 0 || blocks < k_blocks_an_sm * std::max(device.multiprocessors, 1)) return plain;
  return wide;
}

namespace {
std::atomic<bool> g_force_index64{false};
// 32-bit indexing holds while every index the loop forms stays below 2^31:
// elements, plus one step of the grid-stride loop past the end.
// Every element's offset below 2^30: M*N, and M*ld for a strided tensor (the flat
// kernel forms r0 * ld + c0 in 32 bits; Note [Strided rows]).
bool fits_index32(const Shape& s) {
  std::int64_t row = s.n;
  for (std::int64_t ld : s.ld_inputs) row = std::max(row, ld);
  for (std::int64_t ld : s.ld_outputs) row = std::max(row, ld);
  return !g_force_index64 && s.m * row < (std::int64_t{1} << 30);
}
}  // namespace

void force_index64_for_tests(bool on) { g_force_index64 = on; }

bool ragged(const ElementwiseTile& resolved, const Shape& shape) { return (shape.m * shape.n) % resolved.vec != 0; }

namespace {
std::string_view dense_shape_class(const ElementwiseTile& resolved, const Shape& shape) {
  // One of six literals: no formatting, since launches check it too.
  const bool narrow = fits_index32(shape);
  if (shape.n % resolved.vec == 0) return narrow ? "row_aligned/i32" : "row_aligned/i64";
  if (ragged(resolved, shape)) return narrow ? "row_unaligned/i32/ragged" : "row_unaligned/i64/ragged";
  return narrow ? "row_unaligned/i32" : "row_unaligned/i64";
}
}  // namespace

std::string_view elementwise_shape_class(const ElementwiseTile& resolved, const Shape& shape) {
  const std::string_view dense = dense_shape_class(resolved, shape);
  if (!epilogue_strided(shape)) return dense;
  // Note [Strided rows]: the strided tensors' flags, built once per process.
  return interned_shape_class(std::string(dense) + tensor_ld_flags(shape));
}

bool row_starts_take(const KernelSpec& spec, const Shape& shape, int vec) {
  // Row r's vector at column c0 (a multiple of VEC) starts r * ld + c0 elements in.
  const auto takes = [&](std::int64_t ld, DType dtype) {
    const auto size = static_cast<std::int64_t>(size_of(dtype));
    return ld * size % std::min<std::int64_t>(16, vec * size) == 0;
  };
  const Graph& g = spec.graph;
  for (std::size_t i = 0; i < g.inputs().size(); ++i) {
    const Node& n = g.node(g.inputs()[i]);
    if (n.broadcast == Broadcast::full && !takes(input_ld(shape, i), n.dtype)) return false;
  }
  for (std::size_t j = 0; j < g.outputs().size(); ++j) {
    const Output& o = g.outputs()[j];
    if (g.node(o.value).broadcast == Broadcast::full && !takes(output_ld(shape, j), o.dtype)) return false;
  }
  return true;
}

int strided_rows_vector_width(const KernelSpec& spec, const Shape& shape, int vec) {
  const int least = draws_dropout(spec) ? 4 : 1;
  // N % VEC: a lane's vector never straddles a row's end.
  while (vec > least && (shape.n % vec != 0 || !row_starts_take(spec, shape, vec))) vec /= 2;
  return vec;
}

ElementwisePlan choose_vector_width(const KernelPlan& plan) {
  ElementwisePlan e;
  e.plan = &plan;
  e.tile = std::get<ElementwiseTile>(plan.tile);  // resolved by the family
  for (const TensorPlan& t : plan.inputs) {
    e.needs_row_index |= t.broadcast == Broadcast::col;
    e.needs_col_index |= t.broadcast == Broadcast::row;
  }
  e.row_vectors_aligned = plan.shape.n % e.tile.vec == 0;
  e.index32 = fits_index32(plan.shape);
  e.vector_only = plan.path == KernelPath::fastest && !ragged(e.tile, plan.shape);
  e.strided_rows = epilogue_strided(plan.shape);
  e.walks_rows = e.strided_rows && !e.row_vectors_aligned;
  return e;
}

}  // namespace epifuse
