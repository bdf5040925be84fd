#pragma once
// Device tensors of a benchmark, shared by bench.cpp (every chain) and
// bench_gemm.cpp (the GEMM baselines). Internal to the bench.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cuda_driver.hpp"
#include "bench/bench.hpp"
#include "epifuse/jit.hpp"

namespace epifuse::bench_detail {

/// Buffers bound to one kernel's inputs and outputs.
struct DeviceTensors {
  std::vector<backend::DeviceBuffer> buffers;
  DeviceBindings bindings;
};

/// Uploads `inputs` in the order `ks` binds them (the bytes as they are: for
/// random data a column-major operand needs no transposition) and makes one
/// poisoned [M,N] buffer per output of `spec`.
DeviceTensors upload(const KernelSource& ks, const TensorMap& inputs, const KernelSpec& spec, const Shape& shape);

/// One poisoned (all bits set) [M,N] buffer per output of `spec`, appended to `t`.
void add_outputs(DeviceTensors& t, const KernelSpec& spec, const Shape& shape);

/// The device pointer `bindings` give input `name` of `ks`; InternalError when it has none.
std::uint64_t input_pointer(const KernelSource& ks, const DeviceBindings& bindings, std::string_view name);

/// Binds a kernel to buffers that already exist, each input by name through
/// `pointer_of(name)`, and to new output buffers.
template <class PointerOf>
DeviceTensors bind_inputs(const KernelSource& ks, const KernelSpec& spec, const Shape& shape, PointerOf pointer_of) {
  DeviceTensors t;
  for (const std::string& name : ks.inputs) t.bindings.inputs.push_back(pointer_of(name));
  add_outputs(t, spec, shape);
  return t;
}

/// How far two results of one chain on the same inputs are apart, element by
/// element: NaN in one and not in the other is an infinite difference, NaN in
/// both is no difference.
struct Difference {
  double max_abs_diff = 0;
  double max_abs = 0;  ///< the largest finite |value| of the first result
};
/// Adds tensors `a` and `b` (the same element count) to `d`.
void add_difference(Difference& d, const HostTensor& a, const HostTensor& b);

/// The GEMM rows of `report` (bench_gemm.cpp): the fused kernel, already timed
/// on `fused_tensors`, against cuBLASLt alone and the baselines built around it.
/// Sets report.unfused_* when it times cuBLAS followed by one kernel per op.
GemmBenchReport bench_gemm(BenchReport& report, Jit& jit, const KernelSpec& spec, const Shape& shape,
                           const CompiledKernel& fused, const DeviceTensors& fused_tensors, const BenchOptions& options);

}  // namespace epifuse::bench_detail
