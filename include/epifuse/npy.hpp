#pragma once
/// .npy files (format 1.0-3.0, little-endian, C order).
///
/// f32 is `<f4`, f16 `<f2`. bf16 has no numpy dtype: it is stored as `<u2`
/// holding the raw bfloat16 bits (the upper half of the float32), which is
/// what `ml_dtypes.bfloat16` arrays `.view(np.uint16)` give. Reading a `<u2`
/// file for a bf16 operand takes the bits as they are.
#include <filesystem>

#include "epifuse/tensor.hpp"

namespace epifuse {

/// Reads an .npy file; `want` converts f32/f16 data to the dtype an operand
/// needs (bf16 from `<u2` is taken as raw bits). UserError on bad files.
HostTensor read_npy(const std::filesystem::path& path);
void write_npy(const std::filesystem::path& path, const HostTensor& t);

}  // namespace epifuse
