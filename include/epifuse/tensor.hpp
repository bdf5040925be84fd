#pragma once
/// Host tensors: a dtype, a logical row-major shape and the stored bytes.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "epifuse/dtype.hpp"
#include "epifuse/spec.hpp"

namespace epifuse {

/// IEEE binary16 / bfloat16 conversions, round-to-nearest-even, NaN kept NaN.
std::uint16_t float_to_half_bits(float);
float half_bits_to_float(std::uint16_t);
std::uint16_t float_to_bf16_bits(float);
float bf16_bits_to_float(std::uint16_t);
/// Rounds an fp32 value to `dtype` and back (the store's rounding point).
float round_to(DType dtype, float v);

struct HostTensor {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;

  static HostTensor zeros(DType dtype, std::vector<std::int64_t> shape);
  std::int64_t numel() const;
  /// Element i (row-major linear index) converted to fp32.
  float get(std::int64_t i) const;
  /// Stores v rounded to nearest-even into the tensor's dtype.
  void set(std::int64_t i, float v);
};

/// Host tensors by binding name (inputs and outputs of a run).
using TensorMap = std::map<std::string, HostTensor>;

/// Logical shape of an operand of shape class `b` in an [M,N] epilogue:
/// full [M,N], row [N], col [M], scalar [] (numpy 0-d).
std::vector<std::int64_t> operand_shape(Broadcast b, const Shape& shape);

/// The bytes of `dense`, stored rows of `row` elements, laid out with rows `ld`
/// elements apart and every byte between them 0xFF (NaN in every dtype): a
/// strided GEMM operand's device buffer (Note [Strided operands]). `dense`
/// itself where ld == row.
std::vector<std::byte> strided_rows(const HostTensor& dense, std::int64_t row, std::int64_t ld);
/// The inverse for a strided output read back (Note [Strided epilogue tensors]):
/// `rows`, whole rows of `ld` elements of `dtype`, as the dense bytes of their
/// first `row` elements each. Every byte between them must still be 0xFF, the
/// poison laid before the launch: a kernel that wrote there broke output
/// `name`'s bounds (InternalError naming it, the row and the byte).
std::vector<std::byte> dense_rows(const std::vector<std::byte>& rows, DType dtype, std::int64_t row, std::int64_t ld,
                                  std::string_view name);

/// `packed`, `batches` equal parts back to back, laid out with the parts
/// `stride_bytes` apart (at least a part's size) and every byte between them
/// 0xFF: a batched GEMM operand's device buffer (Note [Batched GEMM]).
std::vector<std::byte> spaced_batches(const std::vector<std::byte>& packed, std::int64_t batches,
                                      std::size_t stride_bytes);

/// Random, non-zero values in [-range, range] (|v| >= range/64), already
/// representable in `dtype`; a pure function of `seed`.
HostTensor random_tensor(DType dtype, std::vector<std::int64_t> shape, std::uint64_t seed,
                         float range = 2.0f);

}  // namespace epifuse
