// fp32 <-> binary16 / bfloat16, round-to-nearest-even, in integer arithmetic so
// the result does not depend on the host's FPU or compiler flags. NaN stays a
// (quiet) NaN with its sign and top payload bits; overflow rounds to inf.
#include <bit>
#include <cstdint>

#include "epifuse/tensor.hpp"

namespace epifuse {

namespace {
// Rounds m >> s to nearest, ties to even (s in 1..31).
std::uint32_t shift_rne(std::uint32_t m, unsigned s) {
  const std::uint32_t q = m >> s;
  const std::uint32_t rem = m & ((1u << s) - 1u);
  const std::uint32_t half = 1u << (s - 1u);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}
}  // namespace

// half = sign | rne(|x| in units of the half's ulp); |x| >= 65520 (0x477FF000) is inf.
std::uint16_t float_to_half_bits(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u)  // NaN: set the quiet bit, keep the top payload bits
    return static_cast<std::uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
  if (ax >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // inf or overflow
  if (ax >= 0x38800000u) {  // normal half: rebias exponent 127 -> 15, drop 13 bits
    return static_cast<std::uint16_t>(sign | shift_rne(ax - 0x38000000u, 13));
  }
  // Subnormal half (k * 2^-24): |x| = mant * 2^(e-150), so k = rne(mant >> (126 - e)).
  const unsigned e = ax >> 23;
  if (e < 102) return static_cast<std::uint16_t>(sign);  // |x| < 2^-25: rounds to 0
  const std::uint32_t mant = (ax & 0x7FFFFFu) | 0x800000u;
  return static_cast<std::uint16_t>(sign | shift_rne(mant, 126 - e));  // may carry to 0x400
}

float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1Fu;
  const std::uint32_t m = h & 0x3FFu;
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in fp32
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (e == 31) return std::bit_cast<float>(sign | 0x7F800000u | (m << 13));  // inf / NaN
  return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

// bf16 = rne(x >> 16); the carry out of the mantissa rounds the largest values to inf.
std::uint16_t float_to_bf16_bits(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

float bf16_bits_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

float round_to(DType dtype, float v) {
  switch (dtype) {
    case DType::f32: return v;
    case DType::f16: return half_bits_to_float(float_to_half_bits(v));
    case DType::bf16: return bf16_bits_to_float(float_to_bf16_bits(v));
  }
  return v;
}

}  // namespace epifuse
