// Host-tensor convenience over Jit: the path `epifuse run --device cuda|hip`,
// the examples and the GPU tests take. A layer above the runtime (src/runtime)
// and the reference (src/reference): it checks inputs and lays out operands as
// the reference does, so that both reject bad inputs alike, and the runtime
// itself stays free of the reference evaluator (docs/architecture.md).
#include <algorithm>

#include "backend/device_runtime.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/reference.hpp"

namespace epifuse {

TensorMap run_on_device(Jit& jit, const KernelSpec& spec, const Shape& shape,
                        const TensorMap& inputs, const LaunchArgs& args, const std::optional<TileConfig>& tile,
                        std::size_t misalign_elements) {
  verify(spec);
  verify_shape(spec, shape);
  check_inputs(spec, shape, inputs);  // the reference evaluator's checks: both fail alike
  if (shape.m == 0 || shape.n == 0) {  // an empty result: no kernel, no device memory
    TensorMap empty;
    for (const Output& o : spec.graph.outputs())
      empty.emplace(o.name, HostTensor::zeros(o.dtype, operand_shape(spec.graph.node(o.value).broadcast, shape)));
    return empty;
  }
  auto kernel = jit.compile(spec, shape, tile);
  const KernelSource& ks = kernel->source();

  // The runtime of the Jit's target, on the Jit's device for the whole run
  // (Note [Device scopes]).
  backend::DeviceRuntime& drv = backend::device_runtime(backend::vendor_of(jit.target()));
  const backend::DeviceScope scope(&drv, jit.device());
  std::vector<backend::DeviceMemory> buffers;
  DeviceBindings bindings;
  auto place = [&](std::size_t bytes, std::size_t elem) {
    const std::size_t shift = misalign_elements * elem;
    buffers.emplace_back(drv, bytes + shift + 16);
    return buffers.back().ptr() + shift;
  };
  const std::size_t operands = spec.mainloop.kind == MainloopKind::gemm        ? 2
                               : spec.mainloop.kind == MainloopKind::dual_gemm ? 3
                                                                               : 0;
  for (std::size_t i = 0; i < ks.inputs.size(); ++i) {
    const std::string& name = ks.inputs[i];
    HostTensor t = to_device_layout(spec, name, inputs.at(name));
    if (i < operands) {  // Note [Strided operands]: rows ld apart, the gaps poisoned so a read shows
      const auto op = static_cast<int>(i);
      t.bytes = strided_rows(t, gemm_operand_extent(spec.mainloop, shape, op), gemm_operand_ld(spec.mainloop, shape, op));
      // Note [Batched GEMM]: each batch its batch stride after the one before (a shared operand is one matrix).
      const std::int64_t stride = gemm_operand_batch_stride(spec.mainloop, shape, op);
      if (shape.batch > 1 && stride > 0)
        t.bytes = spaced_batches(t.bytes, shape.batch, static_cast<std::size_t>(stride) * size_of(t.dtype));
    } else if (input_strided(shape, i - operands)) {  // Note [Strided epilogue tensors]: as an operand's
      t.bytes = strided_rows(t, shape.n, input_ld(shape, i - operands));
    }
    const std::uint64_t ptr = place(t.bytes.size(), size_of(t.dtype));
    drv.copy_to_device(ptr, t.bytes.data(), t.bytes.size());
    bindings.inputs.push_back(ptr);
  }
  TensorMap outputs;
  const auto& outs = spec.graph.outputs();
  for (std::size_t k = 0; k < ks.outputs.size(); ++k) {
    // By name: an [M,N], [N] (a column sum) or [M] (a per-row statistic) output.
    const auto o = std::find_if(outs.begin(), outs.end(), [&](const Output& x) { return x.name == ks.outputs[k]; });
    EPIFUSE_ASSERT(o != outs.end(), "kernel output '{}' is not an output of the spec", ks.outputs[k]);
    HostTensor t = HostTensor::zeros(o->dtype, operand_shape(spec.graph.node(o->value).broadcast, shape));
    // Note [Strided epilogue tensors]: a strided output's rows ld apart, its gaps poisoned as the rest.
    const std::size_t bytes = output_strided(shape, k)
                                  ? static_cast<std::size_t>(shape.m * output_ld(shape, k)) * size_of(t.dtype)
                                  : t.bytes.size();
    const std::uint64_t ptr = place(bytes, size_of(t.dtype));
    drv.memset8(ptr, 0xFF, bytes);  // poison: every bit set is NaN in all dtypes
    bindings.outputs.push_back(ptr);
    outputs.emplace(ks.outputs[k], std::move(t));
  }
  jit.launch(*kernel, bindings, shape, args);
  drv.synchronize();
  for (std::size_t k = 0; k < ks.outputs.size(); ++k) {
    HostTensor& t = outputs.at(ks.outputs[k]);
    if (!output_strided(shape, k)) {
      drv.copy_to_host(t.bytes.data(), bindings.outputs[k], t.bytes.size());
      continue;
    }
    const std::int64_t ld = output_ld(shape, k);
    std::vector<std::byte> rows(static_cast<std::size_t>(shape.m * ld) * size_of(t.dtype));
    drv.copy_to_host(rows.data(), bindings.outputs[k], rows.size());
    t.bytes = dense_rows(rows, t.dtype, shape.n, ld, ks.outputs[k]);
  }
  return outputs;
}

}  // namespace epifuse
