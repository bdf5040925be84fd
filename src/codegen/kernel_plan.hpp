#pragma once
// The state the lowering passes fill in, top to bottom (src/codegen/lower.cpp).
#include <string>
#include <vector>

#include "epifuse/jit.hpp"
#include "epifuse/spec.hpp"

namespace epifuse {

struct TensorPlan {
  Value value;             // input node (inputs) or output value (outputs)
  std::string binding;     // the user's name: a binding, never emitted as code
  DType dtype;
  Broadcast broadcast;
  std::string field;       // "in0", "out0": the generated identifier
};

struct KernelPlan {
  const KernelSpec* spec = nullptr;
  Shape shape;
  TileConfig tile;
  KernelPath path = KernelPath::fastest;  // what the caller asked for
  std::vector<TensorPlan> inputs;
  std::vector<TensorPlan> outputs;
  std::vector<Value> accumulators;  // gemm kinds: acc / acc0, acc1
  std::vector<Value> scales;        // scale nodes, in node order: alpha<k>
  std::vector<Value> dropouts;      // dropout nodes with 0 < p < 1: draws d<k>
  bool needs_row_index = false;     // some input is a col vector
  bool needs_col_index = false;     // some input is a row vector
  bool row_vectors_aligned = false; // N % vec == 0: row vectors load as vectors too
  bool index32 = false;             // M*N (+ a grid's overshoot) fits int: 32-bit indexing
  bool vector_only = false;         // no scalar path: M*N % vec == 0 and the host checks alignment
  std::vector<bool> fast;           // per node: may use approximate instructions
  std::string kernel_name;
};

// The passes, in order (each in its own file).
KernelPlan plan_operands(const KernelSpec& spec, const Shape& shape, const TileConfig& tile, KernelPath path);
void choose_vector_width(KernelPlan& plan);
// The tile with vec decided: `tile.vec`, else 16 bytes of the narrowest full
// tensor; at least 4 (one Philox call) when the graph draws dropout masks.
TileConfig resolve_tile(const KernelSpec& spec, TileConfig tile);
// What the code is specialised for besides the spec and tile: "row_aligned" or
// "row_unaligned" (N % vec), then "/i32" or "/i64" (index width), then
// "/ragged" when M*N % vec != 0 (row_aligned shapes never are). Part of the
// cache key; a launch checks its shape is of the kernel's class.
std::string_view shape_class(const TileConfig& resolved, const Shape& shape);
// M*N % vec != 0: the last vector is partial, so the kernel needs its scalar path.
bool ragged(const TileConfig& resolved, const Shape& shape);
// Tests only: generate 64-bit indexing for every shape, so the GPU suite
// covers that path without tensors of 2^30 elements.
void force_index64_for_tests(bool on);
// 16 bytes of the narrowest full tensor, in elements.
int natural_vector_width(const KernelSpec& spec);
void plan_precision(KernelPlan& plan);
// Emits the body of <kernel>_epilogue: straight-line SSA, one line per node.
std::string emit_epilogue(const KernelPlan& plan, std::string& signature);
KernelSource emit_elementwise(const KernelPlan& plan);

// Kernel spelling of a storage dtype: float, ef_half, ef_bf16 (common/numeric.cuh).
std::string_view storage_type_name(DType t);

// A float literal that reads back as exactly `v` (STYLE rule 6).
std::string float_literal(float v);

}  // namespace epifuse
