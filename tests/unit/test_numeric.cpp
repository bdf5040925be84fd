// fp16 / bf16 conversion (round-to-nearest-even, inf, NaN, subnormals) and the
// deterministic random operands.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "epifuse/tensor.hpp"

using namespace epifuse;

namespace {
float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
const float inf = std::numeric_limits<float>::infinity();
}  // namespace

TEST_CASE("f16: round to nearest even at ties") {
  CHECK(float_to_half_bits(1.0f) == 0x3C00);
  CHECK(float_to_half_bits(1.0f + 0x1p-11f) == 0x3C00);             // tie, down to even
  CHECK(float_to_half_bits(1.0f + 3 * 0x1p-11f) == 0x3C02);         // tie, up to even
  CHECK(float_to_half_bits(1.0f + 0x1p-11f + 0x1p-20f) == 0x3C01);  // above the tie
  CHECK(float_to_half_bits(1.0f + 0x1p-11f - 0x1p-23f) == 0x3C00);  // below the tie
  CHECK(float_to_half_bits(-(1.0f + 3 * 0x1p-11f)) == 0xBC02);
  CHECK(float_to_half_bits(2047.5f) == 0x6800);  // 2047.5 ties between 2047 and 2048: even is 2048
  CHECK(float_to_half_bits(0.1f) == 0x2E66);
  CHECK(float_to_half_bits(1.0f / 3.0f) == 0x3555);
}

TEST_CASE("f16: overflow, infinities and NaN") {
  CHECK(float_to_half_bits(65504.0f) == 0x7BFF);
  CHECK(float_to_half_bits(65519.99f) == 0x7BFF);  // below the midpoint to 65536
  CHECK(float_to_half_bits(65520.0f) == 0x7C00);   // the midpoint rounds to even: inf
  CHECK(float_to_half_bits(-65520.0f) == 0xFC00);
  CHECK(float_to_half_bits(1e10f) == 0x7C00);
  CHECK(float_to_half_bits(inf) == 0x7C00);
  CHECK(float_to_half_bits(-inf) == 0xFC00);
  CHECK(float_to_half_bits(std::numeric_limits<float>::max()) == 0x7C00);
  // NaN stays NaN and becomes quiet, including a signalling NaN whose payload is
  // only in the low bits (a plain shift would turn it into inf).
  for (std::uint32_t nan : {0x7FC00000u, 0x7F800001u, 0xFFC00000u, 0x7FBFFFFFu}) {
    const std::uint16_t h = float_to_half_bits(from_bits(nan));
    CHECK((h & 0x7E00) == 0x7E00);
    CHECK(std::isnan(half_bits_to_float(h)));
    CHECK((h >> 15) == (nan >> 31));
  }
  CHECK(half_bits_to_float(0x7C00) == inf);
  CHECK(half_bits_to_float(0xFC00) == -inf);
  CHECK(std::isnan(half_bits_to_float(0x7E00)));
  CHECK(std::isnan(half_bits_to_float(0x7C01)));
}

TEST_CASE("f16: subnormals and zeros") {
  CHECK(float_to_half_bits(0x1p-14f) == 0x0400);            // smallest normal
  CHECK(float_to_half_bits(0x1p-24f) == 0x0001);            // smallest subnormal
  CHECK(float_to_half_bits(0x1p-25f) == 0x0000);            // tie with 0: even is 0
  CHECK(float_to_half_bits(0x1p-25f + 0x1p-40f) == 0x0001);  // above the tie
  CHECK(float_to_half_bits(3 * 0x1p-25f) == 0x0002);        // 1.5 ulp: tie, up to even 2
  CHECK(float_to_half_bits(5 * 0x1p-25f) == 0x0002);        // 2.5 ulp: tie, down to even 2
  CHECK(float_to_half_bits(0x1p-14f - 0x1p-25f) == 0x0400);  // tie 0x3FF/0x400: carries to normal
  CHECK(float_to_half_bits(-0x1p-24f) == 0x8001);
  CHECK(float_to_half_bits(0x1p-26f) == 0x0000);
  CHECK(float_to_half_bits(from_bits(0x00000001u)) == 0x0000);  // fp32 subnormal
  CHECK(float_to_half_bits(-0.0f) == 0x8000);
  CHECK(half_bits_to_float(0x0001) == 0x1p-24f);
  CHECK(half_bits_to_float(0x03FF) == 1023 * 0x1p-24f);
  CHECK(half_bits_to_float(0x7BFF) == 65504.0f);
  CHECK(bits_of(half_bits_to_float(0x8000)) == 0x80000000u);
}

TEST_CASE("f16 and bf16: every bit pattern round-trips") {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const float hf = half_bits_to_float(h);
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) {
      CHECK(std::isnan(hf));
      CHECK(float_to_half_bits(hf) == (h | 0x0200));  // quieted, payload kept
    } else if (float_to_half_bits(hf) != h) {
      FAIL_CHECK("f16 round trip of " << b);
    }
    const float bf = bf16_bits_to_float(h);
    if ((h & 0x7F80) == 0x7F80 && (h & 0x7F)) {
      CHECK(float_to_bf16_bits(bf) == (h | 0x0040));
    } else if (float_to_bf16_bits(bf) != h) {
      FAIL_CHECK("bf16 round trip of " << b);
    }
  }
}

TEST_CASE("bf16: ties, overflow, NaN, subnormals") {
  CHECK(float_to_bf16_bits(1.0f) == 0x3F80);
  CHECK(float_to_bf16_bits(1.0f + 0x1p-8f) == 0x3F80);             // tie, down to even
  CHECK(float_to_bf16_bits(1.0f + 3 * 0x1p-8f) == 0x3F82);         // tie, up to even
  CHECK(float_to_bf16_bits(1.0f + 0x1p-8f + 0x1p-20f) == 0x3F81);  // above the tie
  CHECK(float_to_bf16_bits(-(1.0f + 3 * 0x1p-8f)) == 0xBF82);
  CHECK(float_to_bf16_bits(from_bits(0x7F7F7FFFu)) == 0x7F7F);  // just below the midpoint
  CHECK(float_to_bf16_bits(from_bits(0x7F7F8000u)) == 0x7F80);  // midpoint to max: even is inf
  CHECK(float_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(float_to_bf16_bits(inf) == 0x7F80);
  CHECK(float_to_bf16_bits(-inf) == 0xFF80);
  for (std::uint32_t nan : {0x7FC00000u, 0x7F800001u, 0xFF800001u}) {
    const std::uint16_t b = float_to_bf16_bits(from_bits(nan));
    CHECK(std::isnan(bf16_bits_to_float(b)));
    CHECK((b & 0x0040) == 0x0040);
  }
  CHECK(float_to_bf16_bits(from_bits(0x00018000u)) == 0x0002);  // subnormal tie, up to even
  CHECK(float_to_bf16_bits(from_bits(0x00008000u)) == 0x0000);  // subnormal tie, down to even
  CHECK(bf16_bits_to_float(0x3F81) == 1.0f + 0x1p-7f);
}

TEST_CASE("round_to is the store's rounding point") {
  CHECK(round_to(DType::f32, 1.0f + 0x1p-23f) == 1.0f + 0x1p-23f);
  CHECK(round_to(DType::f16, 1.0f + 3 * 0x1p-11f) == 1.0f + 0x1p-9f);
  CHECK(round_to(DType::f16, 70000.0f) == inf);
  CHECK(round_to(DType::bf16, 1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);
  CHECK(std::isnan(round_to(DType::bf16, std::nanf(""))));
}

TEST_CASE("HostTensor stores in its dtype and random_tensor is deterministic") {
  HostTensor t = HostTensor::zeros(DType::f16, {2, 3});
  CHECK(t.numel() == 6);
  CHECK(t.bytes.size() == 12);
  t.set(4, 1.0f + 3 * 0x1p-11f);
  CHECK(t.get(4) == 1.0f + 0x1p-9f);
  CHECK(HostTensor::zeros(DType::f32, {}).numel() == 1);  // 0-d scalar

  CHECK(operand_shape(Broadcast::full, {3, 5, 7}) == std::vector<std::int64_t>{3, 5});
  CHECK(operand_shape(Broadcast::row, {3, 5, 7}) == std::vector<std::int64_t>{5});
  CHECK(operand_shape(Broadcast::col, {3, 5, 7}) == std::vector<std::int64_t>{3});
  CHECK(operand_shape(Broadcast::scalar, {3, 5, 7}).empty());

  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const HostTensor a = random_tensor(dt, {64, 33}, 1234, 2.0f);
    CHECK(a.bytes == random_tensor(dt, {64, 33}, 1234, 2.0f).bytes);
    CHECK(a.bytes != random_tensor(dt, {64, 33}, 1235, 2.0f).bytes);
    int negative = 0;
    bool ok = true;
    for (std::int64_t i = 0; i < a.numel(); ++i) {
      const float v = a.get(i);
      ok = ok && std::abs(v) >= 2.0f / 64 && std::abs(v) <= 2.0f && round_to(dt, v) == v;
      negative += v < 0;
    }
    CHECK(ok);
    CHECK(negative > a.numel() / 4);
    CHECK(negative < 3 * a.numel() / 4);
  }
  // Pinned: the values are a pure function of the seed on every platform.
  // Expected values from a few lines of Python implementing the documented rule
  // (splitmix64; |v| = range/64 + u*(range - range/64), u = (r >> 40) * 2^-24,
  // rounded to fp32; negative when r is odd).
  const HostTensor p = random_tensor(DType::f32, {4}, 0);
  CHECK(p.get(0) == -0x1.c5304ap+0f);
  CHECK(p.get(1) == 0x1.c2faeep-1f);
  CHECK(p.get(2) == -0x1.552972p-4f);
  CHECK(p.get(3) == 0x1.f15312p+0f);
}
