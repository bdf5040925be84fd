#pragma once
// The elementwise kernel family (Note [Kernel families]): a grid-stride loop
// in which each thread loads VEC consecutive elements of every full tensor with
// 16-byte accesses, runs the epilogue on each, and stores. Its passes, in
// order: choose_vector_width, then emit_elementwise (templates/elementwise.cu.in).
#include <string_view>

#include "codegen/kernel_plan.hpp"

namespace epifuse {

/// The family's own decisions, on top of the generic plan.
struct ElementwisePlan {
  const KernelPlan* plan = nullptr;
  ElementwiseTile tile;               // vec resolved
  bool needs_row_index = false;       // some input is a col vector
  bool needs_col_index = false;       // some input is a row vector
  bool row_vectors_aligned = false;   // N % vec == 0: row vectors load as vectors too
  bool index32 = false;               // M*N (+ a grid's overshoot) fits int: 32-bit indexing
  bool vector_only = false;           // no scalar path: M*N % vec == 0 and the host checks alignment
};

/// The block-size and vector-width ranges every tile of threads over vectors
/// obeys (elementwise and row tiles): UserError "<what>: ..." otherwise.
void check_threads_and_vec(std::string_view what, int threads, int vec);
/// 16 bytes of the narrowest full tensor, in elements.
int natural_vector_width(const KernelSpec& spec);
/// The tile with vec decided: `tile.vec`, else 16 bytes of the narrowest full
/// tensor; at least 4 (one Philox call) when the graph tests dropout draws.
ElementwiseTile resolve_elementwise_tile(const KernelSpec& spec, ElementwiseTile tile);
/// What the code is specialised for besides the spec and tile: "row_aligned" or
/// "row_unaligned" (N % vec), then "/i32" or "/i64" (index width), then
/// "/ragged" when M*N % vec != 0 (row_aligned shapes never are).
std::string_view elementwise_shape_class(const ElementwiseTile& resolved, const Shape& shape);
/// M*N % vec != 0: the last vector is partial, so the kernel needs its scalar path.
bool ragged(const ElementwiseTile& resolved, const Shape& shape);
/// Tests only: generate 64-bit indexing for every shape, so the GPU suite
/// covers that path without tensors of 2^30 elements.
void force_index64_for_tests(bool on);

// The family's passes.
ElementwisePlan choose_vector_width(const KernelPlan& plan);
KernelSource emit_elementwise(const ElementwisePlan& plan);

}  // namespace epifuse
