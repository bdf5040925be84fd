// HostTensor storage and deterministic random operands.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "epifuse/errors.hpp"
#include "epifuse/tensor.hpp"

namespace epifuse {

std::vector<std::byte> strided_rows(const HostTensor& dense, std::int64_t row, std::int64_t ld) {
  if (ld == row || row <= 0) return dense.bytes;
  const std::size_t es = size_of(dense.dtype), width = static_cast<std::size_t>(row) * es,
                    pitch = static_cast<std::size_t>(ld) * es, rows = dense.bytes.size() / width;
  std::vector<std::byte> out(rows * pitch, std::byte{0xFF});
  for (std::size_t r = 0; r < rows; ++r)
    std::copy_n(dense.bytes.begin() + static_cast<std::ptrdiff_t>(r * width), width,
                out.begin() + static_cast<std::ptrdiff_t>(r * pitch));
  return out;
}

std::vector<std::byte> spaced_batches(const std::vector<std::byte>& packed, std::int64_t batches,
                                      std::size_t stride_bytes) {
  const std::size_t part = batches > 0 ? packed.size() / static_cast<std::size_t>(batches) : 0;
  if (batches <= 1 || stride_bytes == part) return packed;
  std::vector<std::byte> out(static_cast<std::size_t>(batches - 1) * stride_bytes + part, std::byte{0xFF});
  for (std::size_t b = 0; b < static_cast<std::size_t>(batches); ++b)
    std::copy_n(packed.begin() + static_cast<std::ptrdiff_t>(b * part), part,
                out.begin() + static_cast<std::ptrdiff_t>(b * stride_bytes));
  return out;
}

std::vector<std::byte> dense_rows(const std::vector<std::byte>& rows, DType dtype, std::int64_t row, std::int64_t ld,
                                  std::string_view name) {
  const std::size_t es = size_of(dtype), width = static_cast<std::size_t>(row) * es,
                    pitch = static_cast<std::size_t>(ld) * es, count = pitch == 0 ? 0 : rows.size() / pitch;
  EPIFUSE_ASSERT(ld >= row && count * pitch == rows.size(), "dense_rows: {} bytes are not whole rows of ld {}",
                 rows.size(), ld);
  std::vector<std::byte> out(count * width);
  for (std::size_t r = 0; r < count; ++r) {
    const auto begin = rows.begin() + static_cast<std::ptrdiff_t>(r * pitch);
    std::copy_n(begin, width, out.begin() + static_cast<std::ptrdiff_t>(r * width));
    const auto gap = begin + static_cast<std::ptrdiff_t>(width), end = begin + static_cast<std::ptrdiff_t>(pitch);
    const auto written = std::find_if(gap, end, [](std::byte b) { return b != std::byte{0xFF}; });
    EPIFUSE_ASSERT(written == end, "output '{}': the kernel wrote byte {} of the gap after row {} (ld {}, N {})", name,
                   written - gap, r, ld, row);
  }
  return out;
}

HostTensor HostTensor::zeros(DType dtype, std::vector<std::int64_t> shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  for (auto d : t.shape) EPIFUSE_CHECK(d >= 0, "tensor dimension must be >= 0, got {}", d);
  t.bytes.assign(static_cast<std::size_t>(t.numel()) * size_of(dtype), std::byte{0});
  return t;
}

std::int64_t HostTensor::numel() const {
  std::int64_t n = 1;  // a 0-d tensor (scalar) holds one value
  for (auto d : shape) n *= d;
  return n;
}

float HostTensor::get(std::int64_t i) const {
  const std::byte* p = bytes.data() + static_cast<std::size_t>(i) * size_of(dtype);
  if (dtype == DType::f32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return dtype == DType::f16 ? half_bits_to_float(h) : bf16_bits_to_float(h);
}

void HostTensor::set(std::int64_t i, float v) {
  std::byte* p = bytes.data() + static_cast<std::size_t>(i) * size_of(dtype);
  if (dtype == DType::f32) {
    std::memcpy(p, &v, 4);
    return;
  }
  const std::uint16_t h = dtype == DType::f16 ? float_to_half_bits(v) : float_to_bf16_bits(v);
  std::memcpy(p, &h, 2);
}

std::vector<std::int64_t> operand_shape(Broadcast b, const Shape& shape) {
  switch (b) {
    case Broadcast::full:  // a batched GEMM's are [B, M, N] (Note [Batched GEMM])
      return shape.batch > 1 ? std::vector<std::int64_t>{shape.batch, shape.m, shape.n}
                             : std::vector<std::int64_t>{shape.m, shape.n};
    case Broadcast::row: return {shape.n};
    case Broadcast::col: return {shape.m};
    case Broadcast::scalar: return {};
  }
  return {};
}

namespace {
// splitmix64 (Steele, Lea, Flood 2014): integer-only, so identical everywhere.
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

// |v| = lo + u * (range - lo), lo = range/64, u = 24 random bits / 2^24; random sign.
// All arithmetic is exact or correctly rounded IEEE, so values match on every platform.
HostTensor random_tensor(DType dtype, std::vector<std::int64_t> shape, std::uint64_t seed,
                         float range) {
  EPIFUSE_CHECK(std::isfinite(range) && range > 0.0f, "random_tensor: range must be > 0, got {}",
                range);
  HostTensor t = HostTensor::zeros(dtype, std::move(shape));
  const double hi = range, lo = hi / 64.0;
  std::uint64_t state = seed;
  const std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t r = splitmix64(state);
    const double u = static_cast<double>(r >> 40) * 0x1p-24;
    float v = static_cast<float>(lo + u * (hi - lo));
    v = round_to(dtype, v);
    if (v == 0.0f) v = round_to(dtype, static_cast<float>(lo));  // only for absurdly small ranges
    t.set(i, (r & 1u) ? -v : v);
  }
  return t;
}

}  // namespace epifuse
