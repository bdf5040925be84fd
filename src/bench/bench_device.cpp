// Device tensors of a benchmark (bench_device.hpp).
#include "bench/bench_device.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "epifuse/errors.hpp"
#include "epifuse/tensor.hpp"

namespace epifuse::bench_detail {

DeviceTensors upload(const KernelSource& ks, const TensorMap& inputs, const KernelSpec& spec, const Shape& shape) {
  DeviceTensors t;
  const std::size_t operands = spec.mainloop.kind == MainloopKind::gemm        ? 2
                               : spec.mainloop.kind == MainloopKind::dual_gemm ? 3
                                                                               : 0;
  for (std::size_t i = 0; i < ks.inputs.size(); ++i) {
    const HostTensor& h = inputs.at(ks.inputs[i]);
    // A strided operand (`epifuse bench --ld`, Note [Strided operands]): its rows ld apart.
    const auto op = static_cast<int>(i);
    // A strided epilogue input (Note [Strided epilogue tensors]): its rows ld apart too.
    std::vector<std::byte> bytes =
        i < operands ? strided_rows(h, gemm_operand_extent(spec.mainloop, shape, op), gemm_operand_ld(spec.mainloop, shape, op))
        : input_strided(shape, i - operands) ? strided_rows(h, shape.n, input_ld(shape, i - operands))
                                             : h.bytes;
    // A batched operand (`epifuse bench --batch`, Note [Batched GEMM]): its batches a batch stride apart.
    const std::int64_t stride = i < operands ? gemm_operand_batch_stride(spec.mainloop, shape, op) : 0;
    if (shape.batch > 1 && stride > 0)
      bytes = spaced_batches(bytes, shape.batch, static_cast<std::size_t>(stride) * size_of(h.dtype));
    t.buffers.emplace_back(bytes.size());
    t.buffers.back().upload(bytes.data(), bytes.size());
    t.bindings.inputs.push_back(t.buffers.back().ptr());
  }
  add_outputs(t, spec, shape);
  return t;
}

void add_outputs(DeviceTensors& t, const KernelSpec& spec, const Shape& shape) {
  const auto& outputs = spec.graph.outputs();
  for (std::size_t j = 0; j < outputs.size(); ++j) {
    const Output& o = outputs[j];
    std::size_t elements = 1;  // [M,N], [N] (a col_sum) or [M] (a row reduction)
    for (std::int64_t d : operand_shape(spec.graph.node(o.value).broadcast, shape)) elements *= static_cast<std::size_t>(d);
    if (output_strided(shape, j)) elements = static_cast<std::size_t>(shape.m * output_ld(shape, j));  // rows ld apart
    t.buffers.emplace_back(elements * size_of(o.dtype));
    t.buffers.back().fill_bytes(0xFF);
    t.bindings.outputs.push_back(t.buffers.back().ptr());
  }
}

void add_difference(Difference& d, const HostTensor& a, const HostTensor& b) {
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double u = a.get(i), v = b.get(i);
    if (std::isnan(u) != std::isnan(v)) d.max_abs_diff = std::numeric_limits<double>::infinity();
    if (std::isnan(u) || std::isnan(v)) continue;
    if (std::isfinite(u)) d.max_abs = std::max(d.max_abs, std::abs(u));
    d.max_abs_diff = std::max(d.max_abs_diff, u == v ? 0.0 : std::abs(u - v));
  }
}

std::uint64_t input_pointer(const KernelSource& ks, const DeviceBindings& bindings, std::string_view name) {
  for (std::size_t i = 0; i < ks.inputs.size(); ++i)
    if (ks.inputs[i] == name) return bindings.inputs.at(i);
  EPIFUSE_ASSERT(false, "kernel {} has no input '{}'", ks.name, name);
  return 0;
}

}  // namespace epifuse::bench_detail
