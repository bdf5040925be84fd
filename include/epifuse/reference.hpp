#pragma once
/// The reference evaluator: the executable spec (DESIGN §1). GEMM mainloops
/// accumulate in double; the epilogue runs in fp32 semantics; outputs are
/// rounded to their dtype once; dropout follows DESIGN §4 bit for bit.
#include <cstdint>
#include <map>
#include <string>

#include "epifuse/launch.hpp"
#include "epifuse/spec.hpp"
#include "epifuse/tensor.hpp"

namespace epifuse {

/// GEMM operands are bound under these names: gemm `a` [M,K], `b` [K,N];
/// dual_gemm `a`, `b0`, `b1`. Elementwise kernels have none.
std::vector<std::string> mainloop_operand_names(MainloopKind kind);

/// The bytes a device buffer of operand `name` holds: host tensors are logical
/// row-major arrays (a [M,K], b [K,N]); a column-major GEMM operand is stored
/// transposed on the device. Every other tensor is returned as it is.
HostTensor to_device_layout(const KernelSpec& spec, const std::string& name, const HostTensor& t);

/// Every tensor a launch needs, name -> (dtype, logical shape): mainloop
/// operands first, then graph inputs in declaration order.
struct OperandDesc {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
};
std::vector<OperandDesc> required_inputs(const KernelSpec& spec, const Shape& shape);

/// Checks that `inputs` holds exactly the required tensors with the right dtype
/// and shape (UserError naming the first that does not). evaluate() and
/// run_on_device() both call it, so every device rejects bad inputs alike.
void check_inputs(const KernelSpec& spec, const Shape& shape, const TensorMap& inputs);

struct EvalOptions {
  /// Visit elements in reverse order (tests that no result depends on traversal).
  bool reverse_traversal = false;
};

/// Runs the spec; checks that every required input is present with the right
/// dtype and shape (UserError naming it otherwise); returns the outputs by name.
TensorMap evaluate(const KernelSpec& spec, const Shape& shape, const TensorMap& inputs,
                   const LaunchArgs& args, const EvalOptions& options = {});

/// Draws missing inputs from `data_seed` (random_tensor, one sub-seed per name).
TensorMap make_inputs(const KernelSpec& spec, const Shape& shape, std::uint64_t data_seed,
                      TensorMap given = {});

}  // namespace epifuse
