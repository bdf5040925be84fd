// The reference's inputs (epifuse/reference.hpp): which tensors a spec needs at
// a shape, random ones for tests and the CLI, and the accumulation bound their
// values give a GEMM's comparison.
#include <algorithm>
#include <cmath>

#include "epifuse/reference.hpp"
#include "ir/names.hpp"

namespace epifuse {

std::vector<std::string> mainloop_operand_names(MainloopKind kind) {
  const auto names = names::gemm_operand_names(kind);
  return {names.begin(), names.end()};
}

std::vector<OperandDesc> required_inputs(const KernelSpec& spec, const Shape& shape) {
  std::vector<OperandDesc> out;
  const auto operands = mainloop_operand_names(spec.mainloop.kind);
  for (std::size_t i = 0; i < operands.size(); ++i) {
    const std::string& name = operands[i];
    std::vector<std::int64_t> dims = name == names::k_gemm_operands[0] ? std::vector<std::int64_t>{shape.m, shape.k}
                                                                       : std::vector<std::int64_t>{shape.k, shape.n};
    // Note [Batched GEMM]: a batched operand is [B, rows, cols]; a shared one (batch stride 0) is one matrix.
    if (shape.batch > 1 && gemm_operand_batch_stride(spec.mainloop, shape, static_cast<int>(i)) != 0)
      dims.insert(dims.begin(), shape.batch);
    out.push_back({name, name == names::k_gemm_operands[0] ? spec.mainloop.a : spec.mainloop.b, std::move(dims)});
  }
  for (Value v : spec.graph.inputs()) {
    const Node& n = spec.graph.node(v);
    out.push_back({n.name, n.dtype, operand_shape(n.broadcast, shape)});
  }
  return out;
}

double accumulation_bound(const KernelSpec& spec, const Shape& shape, const TensorMap& inputs) {
  if (spec.mainloop.kind == MainloopKind::elementwise || shape.k == 0) return 0.0;
  auto peak = [&](const std::string& name) {
    const HostTensor& t = inputs.at(name);
    double m = 0;
    for (std::int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(static_cast<double>(t.get(i))));
    return m;
  };
  double b = 0;
  for (const auto& name : mainloop_operand_names(spec.mainloop.kind))
    if (name != "a") b = std::max(b, peak(name));
  return static_cast<double>(shape.k) * std::ldexp(1.0, -21) * peak("a") * b;
}

TensorMap make_inputs(const KernelSpec& spec, const Shape& shape, std::uint64_t data_seed,
                      TensorMap given) {
  for (const auto& d : required_inputs(spec, shape)) {
    if (given.count(d.name)) continue;
    // One sub-seed per name (FNV-1a), so adding an input does not change the others.
    std::uint64_t h = 0xCBF29CE484222325ull;
    for (unsigned char ch : d.name) h = (h ^ ch) * 0x100000001B3ull;
    given.emplace(d.name, random_tensor(d.dtype, d.shape, data_seed ^ h));
  }
  return given;
}

}  // namespace epifuse
