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

/// Reads an .npy file as it is stored (f32, f16, or bf16 from `<u2` raw bits);
/// UserError naming the file for anything malformed or unsupported.
HostTensor read_npy(const std::filesystem::path& path);
/// Writes a version 1.0 file (2.0 for a huge header) through a temporary file
/// renamed into place, so that `path` holds either the whole new file or what
/// it held before (Note [Atomic output files], src/io/atomic_file.hpp).
/// UserError naming the file when it cannot be created, RuntimeError when a
/// write, sync or the rename fails; either way no temporary is left.
void write_npy(const std::filesystem::path& path, const HostTensor& t);

}  // namespace epifuse
