#pragma once
#include <array>
/// The reference evaluator: the executable spec (docs/design.md §1). GEMM mainloops
/// accumulate in double; the epilogue runs in fp32 semantics; outputs are
/// rounded to their dtype once; dropout follows docs/design.md §4 bit for bit.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

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
  /// Added to every element of accumulator 0 (acc, acc0) and 1 (acc1) after the
  /// exact product is rounded to fp32: the chain evaluated at the edge of a
  /// device's accumulation-order error (accumulation_bound), for --verify.
  std::array<float, 2> accumulator_shift{0.0f, 0.0f};
};

/// A bound on |device fp32 accumulator - exact product| for a GEMM chain's
/// inputs: K * 2^-21 * max|A| * max|B| (docs/gemm.md; 0 for elementwise specs).
double accumulation_bound(const KernelSpec& spec, const Shape& shape, const TensorMap& inputs);

/// Runs the spec; checks that every required input is present with the right
/// dtype and shape (UserError naming it otherwise); returns the outputs by name.
TensorMap evaluate(const KernelSpec& spec, const Shape& shape, const TensorMap& inputs,
                   const LaunchArgs& args, const EvalOptions& options = {});

/// Values in double by binding name, each a row-major array of its logical shape.
using DoubleTensors = std::map<std::string, std::vector<double>>;

/// The spec in double precision with no rounding point at all (a cast is the
/// identity, outputs keep every bit): the smooth function a gradient check
/// differentiates (docs/autodiff.md). Dropout keeps exactly the elements
/// evaluate() keeps; GEMM accumulators are exact-product sums in double.
/// Takes the inputs evaluate() takes (GEMM operands included), as doubles.
DoubleTensors evaluate_double(const KernelSpec& spec, const Shape& shape, const DoubleTensors& inputs,
                              const LaunchArgs& args);

/// a [M,K] times b [K,N] (row-major) in double: evaluate_double's
/// accumulators, and the point a gradient check perturbs them at.
std::vector<double> exact_product(const std::vector<double>& a, const std::vector<double>& b, const Shape& shape);

/// Draws missing inputs from `data_seed` (random_tensor, one sub-seed per name).
TensorMap make_inputs(const KernelSpec& spec, const Shape& shape, std::uint64_t data_seed,
                      TensorMap given = {});

}  // namespace epifuse
