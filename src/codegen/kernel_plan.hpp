#pragma once
// The state the lowering passes fill in, top to bottom (src/codegen/lower.cpp).
// Family-neutral: what every kernel family needs to know about the spec. A
// family keeps its own decisions (vector width, fragment layout) in its own
// plan type under src/codegen/<family>/.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "epifuse/codegen.hpp"
#include "epifuse/spec.hpp"

namespace epifuse {

struct TensorPlan {
  Value value;             // input node (inputs) or output value (outputs)
  std::string binding;     // the user's name: a binding, never emitted as code
  DType dtype;
  Broadcast broadcast;
  std::string field;       // "in0", "out0": the generated identifier
  bool strided = false;    // a full tensor whose rows lie p.ld_<field> apart (Note [Strided epilogue tensors])
};

struct KernelPlan {
  const KernelSpec* spec = nullptr;
  Shape shape;
  TileConfig tile;                  // resolved by the family
  KernelPath path = KernelPath::fastest;  // what the caller asked for
  std::vector<TensorPlan> inputs;   // graph inputs in declaration (binding) order
  std::vector<TensorPlan> outputs;
  std::vector<Value> accumulators;  // gemm kinds: acc (acc0), acc1, by index
  std::vector<Value> scales;        // scale nodes, in node order: runtime scalar k
  std::vector<Value> dropouts;      // dropout nodes that test draws (DropoutEffect::masked): draw k
  std::vector<bool> fast;           // per node: may use approximate instructions
  std::string_view shape_class;     // the family's, for the key and the kernel name
  std::string kernel_name;
};

// Generic passes, in order (each in its own file).
KernelPlan plan_operands(const KernelSpec& spec, const Shape& shape, KernelPath path);
void plan_precision(KernelPlan& plan);
// ef_<hash of signature, tile, shape class, path>: the source names no user text.
std::string kernel_name(const KernelPlan& plan);

// What every family's KernelSource starts with: name, tile, path, the graph's
// inputs and outputs as bindings (appended after any operands the family
// listed first), each with the alignment `alignment` says its fast path
// needs, and the values of the runtime scalars.
void bind_graph_tensors(const KernelPlan& plan, KernelSource& ks,
                        const std::function<int(const TensorPlan&)>& alignment);
// "op -> op -> ... | out dtype...": what a kernel computes, for its header comment
// (op-table names and dtypes only, no user text).
std::string describe_chain(const KernelPlan& plan);

// The line that reads a drawing kernel's seed and offset once, into `rng`
// (Note [Seeds on the device], templates/common/philox.cuh); every draw the
// families emit takes rng.seed and rng.offset. A comment where nothing draws.
std::string rng_state_setup(const KernelPlan& plan, std::string_view pad);

// Kernel spelling of a storage dtype: float, ef_half, ef_bf16 (common/numeric.cuh).
std::string_view storage_type_name(DType t);

// A float literal that reads back as exactly `v` (docs/style.md, rule 6).
std::string float_literal(float v);

}  // namespace epifuse
