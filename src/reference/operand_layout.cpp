// Host (logical row-major) to device operand layouts (docs/design.md §7: .npy files
// are logical row-major whatever the device layout).
#include <cstring>

#include "epifuse/errors.hpp"
#include "epifuse/reference.hpp"
#include "ir/names.hpp"

namespace epifuse {

HostTensor to_device_layout(const KernelSpec& spec, const std::string& name, const HostTensor& t) {
  const Mainloop& ml = spec.mainloop;
  if (ml.kind == MainloopKind::elementwise || !names::is_gemm_operand_name(name)) return t;
  const bool col = name == names::k_gemm_operands[0] ? ml.a_layout == Layout::col : ml.b_layout == Layout::col;
  if (!col) return t;
  EPIFUSE_ASSERT(t.shape.size() == 2 || t.shape.size() == 3, "operand {} is not 2-D or batched 3-D", name);
  // Column-major [R,C] is the row-major [C,R] transpose; a batched [B,R,C] operand, each batch's.
  const bool batched = t.shape.size() == 3;
  const std::int64_t batches = batched ? t.shape[0] : 1;
  const std::int64_t rows = t.shape[batched ? 1 : 0], cols = t.shape[batched ? 2 : 1];
  const std::size_t esize = size_of(t.dtype);
  HostTensor out = HostTensor::zeros(t.dtype, batched ? std::vector<std::int64_t>{batches, cols, rows}
                                                      : std::vector<std::int64_t>{cols, rows});
  for (std::int64_t b = 0; b < batches; ++b)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c)
        std::memcpy(out.bytes.data() + static_cast<std::size_t>((b * cols + c) * rows + r) * esize,
                    t.bytes.data() + static_cast<std::size_t>((b * rows + r) * cols + c) * esize, esize);
  return out;
}

}  // namespace epifuse
