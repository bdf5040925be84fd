// The dropout RNG contract (docs/design.md §4): Philox known answers, golden masks in
// both modes, and the mask's independence of traversal order.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/philox.cuh"
#include "epifuse/errors.hpp"
#include "epifuse/reference.hpp"
#include "reference/philox.hpp"

using namespace epifuse;

namespace {

std::uint32_t f32_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// x (f32, [M,N]) -> dropout(p) -> y. With `stream1`, a p = 0 dropout (stream 0,
// keeps all, scale 1) comes first, so the tested dropout has stream 1.
KernelSpec dropout_spec(double p, RngMode rng, bool stream1 = false) {
  KernelSpec s;
  Value v = s.graph.input("x", DType::f32);
  if (stream1) v = s.graph.dropout(v, 0.0, rng);
  s.graph.output("y", s.graph.dropout(v, p, rng), DType::f32);
  return s;
}

HostTensor filled(std::int64_t m, std::int64_t n, float v) {
  HostTensor t = HostTensor::zeros(DType::f32, {m, n});
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, v);
  return t;
}

// Keep pattern of y (1 = kept) as a bit string, row-major.
std::string keep_bits(const HostTensor& y) {
  std::string s;
  for (std::int64_t i = 0; i < y.numel(); ++i) s += y.get(i) != 0.0f ? '1' : '0';
  return s;
}

}  // namespace

TEST_CASE("philox4x32-10 known answers (Random123, docs/design.md §4)") {
  struct Kat {
    ef_u32x4 ctr;
    ef_u32x2 key;
    ef_u32x4 out;
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const auto& k : kats) {
    const ef_u32x4 r = ef_philox4x32_10(k.ctr, k.key);
    CHECK(r.x == k.out.x);
    CHECK(r.y == k.out.y);
    CHECK(r.z == k.out.z);
    CHECK(r.w == k.out.w);
  }
}

TEST_CASE("philox4 counter layout and word selection") {
  const ef_u32x4 c = ef_philox4_counter(0x0001234500000007ull, 3, 0xAABBCCDD11223344ull);
  CHECK(c.x == 0x00000007u);
  CHECK(c.y == ((0x2345u) | (3u << 16)));  // q_hi & 0xFFFF: bit 48 and up are dropped
  CHECK(c.z == 0x11223344u);
  CHECK(c.w == 0xAABBCCDDu);
  const ef_u32x2 k = ef_philox_key(0x0123456789ABCDEFull);
  CHECK(k.x == 0x89ABCDEFu);
  CHECK(k.y == 0x01234567u);
  // Element i uses word i & 3 of the call for q = i >> 2.
  const ef_u32x4 r = ef_philox4_draws(5, 6, 2, 10);
  CHECK(philox4_draw(5, 6, 2, 40) == r.x);
  CHECK(philox4_draw(5, 6, 2, 41) == r.y);
  CHECK(philox4_draw(5, 6, 2, 42) == r.z);
  CHECK(philox4_draw(5, 6, 2, 43) == r.w);
}

TEST_CASE("threshold and scale are computed on the host in double") {
  CHECK(dropout_threshold(0.0) == 0u);
  CHECK(dropout_threshold(1.0) == (1u << 24));
  CHECK(dropout_threshold(0.5) == (1u << 23));
  CHECK(dropout_threshold(0.1) == 1677722u);  // 1677721.6 rounds up
  CHECK(dropout_scale(0.0) == 1.0f);
  CHECK(dropout_scale(1.0) == 0.0f);
  CHECK(dropout_scale(0.5) == 2.0f);
  CHECK(dropout_scale(0.1) == static_cast<float>(1.0 / 0.9));
  CHECK(ef_dropout_keep(0x000000FFu, 1u) == false);  // draw >> 8 == 0 < 1
  CHECK(ef_dropout_keep(0x00000100u, 1u) == true);
  CHECK(ef_dropout_keep(0xFFFFFFFFu, 1u << 24) == false);  // p = 1 drops all
  CHECK(ef_dropout_keep(0u, 0u) == true);                  // p = 0 keeps all
}

// Golden values below were produced by tests/unit/golden_dropout.py (an
// independent pure-Python Philox + docs/design.md §4 implementation):
//   python3 tests/unit/golden_dropout.py
// and pasted verbatim.
TEST_CASE("golden philox4 dropout masks through the evaluator") {
  struct Case {
    std::uint64_t seed, offset;
    int stream;
    double p;
    const char* bits;
  };
  const Case cases[] = {
      {0x0ull, 0x0ull, 0, 0.5, "0111101000001010111100101110101001111010110110111001010100101110"},
      {0x123456789ABCDEF0ull, 0x500000007ull, 0, 0.1,
       "1111111111111111111101111111111111111111011011111101111101111111"},
      {0x2Aull, 0x7ull, 1, 0.3, "1101101011100010001110010001111110011111111101101011001111011111"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.seed);
    CAPTURE(c.p);
    // [4,16] and [8,8] give the same linear indices i = r*N + c.
    using Dims = std::pair<std::int64_t, std::int64_t>;
    for (auto [m, n] : {Dims{4, 16}, Dims{8, 8}}) {
      const auto spec = dropout_spec(c.p, RngMode::philox4, c.stream == 1);
      const auto out = evaluate(spec, {m, n, 0}, {{"x", filled(m, n, 1.0f)}}, {c.seed, c.offset});
      CHECK(keep_bits(out.at("y")) == c.bits);
    }
  }
}

TEST_CASE("golden philox4 draws at 64-bit element indices") {
  struct Case {
    std::uint64_t seed, offset;
    std::uint32_t stream;
    std::uint64_t i;
    std::uint32_t draw;
  };
  const Case cases[] = {  // from tests/unit/golden_dropout.py
      {0x1ull, 0x2ull, 3, 0x10000000005ull, 0x98B07F70u},
      {0xFFFFFFFFFFFFFFFFull, 0xFFFFFFFFFFFFFFFFull, 32767, 0xFFFFFFFFFFFFull, 0xE9668B86u},
      {0x7ull, 0x0ull, 0, 0x400000002ull, 0xF681EC7Fu},
  };
  for (const auto& c : cases) CHECK(philox4_draw(c.seed, c.offset, c.stream, c.i) == c.draw);
}

TEST_CASE("golden triton-mode masks and uniforms") {
  struct Case {
    std::uint64_t seed, offset;
    double p;
    const char* bits;
  };
  const Case cases[] = {  // from tests/unit/golden_dropout.py
      {0x0ull, 0x0ull, 0.5, "1000011101011101110111110001101110101001000111011000001111111000"},
      {0x123456789ABCDEF0ull, 0x3E8ull, 0.1,
       "1111101111110111111111111111111111111111110111111110111111111111"},
      // Crosses off = 2^32 (the epifuse extension of Triton's 32-bit offsets).
      {0x2Aull, 0xFFFFFFF6ull, 0.3, "1001101111100110001011110100011111011101111011110111110001001011"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.seed);
    // The stream does not enter the triton counter: stream 1 gives the same mask.
    for (bool stream1 : {false, true}) {
      const auto spec = dropout_spec(c.p, RngMode::triton, stream1);
      const auto out = evaluate(spec, {4, 16, 0}, {{"x", filled(4, 16, 1.0f)}}, {c.seed, c.offset});
      CHECK(keep_bits(out.at("y")) == c.bits);
    }
  }
  // r = float(x < 0 ? -x - 1 : x) * 0x2FFFFFFF-as-float (Triton's 4.6566127342e-10), so r < 1.
  const std::pair<std::uint32_t, std::uint32_t> uniforms[] = {
      {0x00000000u, 0x00000000u}, {0x00000001u, 0x2FFFFFFFu}, {0x7FFFFFFFu, 0x3F7FFFFFu},
      {0x80000000u, 0x3F7FFFFFu}, {0xFFFFFFFFu, 0x00000000u}, {0x12345678u, 0x3E11A2B3u},
      {0xDEADBEEFu, 0x3E854903u}, {0x7FFFFFC0u, 0x3F7FFFFFu}, {0x7FFFFFBFu, 0x3F7FFFFEu},
  };
  for (auto [draw, bits] : uniforms) CHECK(f32_bits(ef_triton_uniform(draw)) == bits);
  // keep = r > p: r == p is dropped; the largest r (1 - 2^-24) is kept at p just below it.
  CHECK(ef_triton_keep(0x7FFFFFFFu, 1.0f) == false);
  CHECK(ef_triton_keep(0x7FFFFFFFu, 0.99f) == true);
  CHECK(ef_triton_keep(0x7FFFFFFFu, 0.99999994f) == false);  // r == 1 - 2^-24 == p
  CHECK(ef_triton_keep(0x00000001u, 4.6566126e-10f) == false);
  CHECK(ef_triton_keep(0u, 0.0f) == true);  // p = 0 keeps all (docs/design.md), even r == 0
}

TEST_CASE("dropout mask does not depend on traversal order or shape") {
  for (RngMode rng : {RngMode::philox4, RngMode::triton}) {
    const auto spec = dropout_spec(0.4, rng, true);
    const TensorMap in = {{"x", random_tensor(DType::f32, {37, 53}, 9)}};
    const LaunchArgs args{0xDEADBEEFCAFEull, 12345};
    const auto fwd = evaluate(spec, {37, 53, 0}, in, args);
    const auto rev = evaluate(spec, {37, 53, 0}, in, args, {.reverse_traversal = true});
    CHECK(fwd.at("y").bytes == rev.at("y").bytes);
    // The same linear index under another [M,N] split keeps the same elements.
    TensorMap in2 = in;
    in2.at("x").shape = {53, 37};
    const auto other = evaluate(spec, {53, 37, 0}, in2, args);
    CHECK(other.at("y").bytes == fwd.at("y").bytes);
    // A different seed, offset or stream changes the mask.
    const auto seed2 = evaluate(spec, {37, 53, 0}, in, {args.seed + 1, args.offset});
    const auto off2 = evaluate(spec, {37, 53, 0}, in, {args.seed, args.offset + 4});
    CHECK(seed2.at("y").bytes != fwd.at("y").bytes);
    CHECK(off2.at("y").bytes != fwd.at("y").bytes);
  }
  const TensorMap in = {{"x", filled(16, 16, 1.0f)}};
  CHECK(keep_bits(evaluate(dropout_spec(0.5, RngMode::philox4, false), {16, 16, 0}, in, {1, 2}).at("y")) !=
        keep_bits(evaluate(dropout_spec(0.5, RngMode::philox4, true), {16, 16, 0}, in, {1, 2}).at("y")));
}

TEST_CASE("dropout statistics, p = 0, p = 1 and exact kept values") {
  const std::int64_t m = 1024, n = 1024;
  const HostTensor x = random_tensor(DType::f32, {m, n}, 77);
  const TensorMap in = {{"x", x}};
  for (RngMode rng : {RngMode::philox4, RngMode::triton}) {
    for (double p : {0.1, 0.5, 0.9}) {
      CAPTURE(p);
      const auto y = evaluate(dropout_spec(p, rng), {m, n, 0}, in, {2024, 99}).at("y");
      const float scale = static_cast<float>(1.0 / (1.0 - p));  // docs/design.md §4, independently
      std::int64_t kept = 0;
      bool exact = true;
      for (std::int64_t i = 0; i < y.numel(); ++i) {
        const float v = y.get(i);
        if (v == 0.0f) continue;
        ++kept;
        exact = exact && v == x.get(i) * scale;
      }
      CHECK(exact);
      const double total = static_cast<double>(m * n);
      const double sigma = std::sqrt(p * (1 - p) / total);
      CHECK(std::abs(kept / total - (1 - p)) < 4 * sigma);
    }
    const auto all = evaluate(dropout_spec(0.0, rng), {m, n, 0}, in, {5, 6}).at("y");
    CHECK(all.bytes == x.bytes);  // p = 0: identity
    const auto none = evaluate(dropout_spec(1.0, rng), {m, n, 0}, in, {5, 6}).at("y");
    // p = 1: x * 0, as PyTorch's x * mask * scale: a zero of x's sign.
    bool signed_zeros = true;
    for (std::int64_t i = 0; i < none.numel(); ++i)
      signed_zeros = signed_zeros && none.get(i) == 0.0f && std::signbit(none.get(i)) == std::signbit(x.get(i));
    CHECK(signed_zeros);
  }
}

// Dropout is x * mask * scale, as PyTorch computes it: a dropped finite value is
// a zero of x's sign, and a dropped NaN or inf is NaN; p = 1 drops every value
// that way.
TEST_CASE("dropout multiplies by its mask: dropped NaN and inf give NaN, as in PyTorch") {
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY, -2.5f};
  const std::int64_t n = 64;
  HostTensor x = HostTensor::zeros(DType::f32, {1, n});
  for (std::int64_t i = 0; i < n; ++i) x.set(i, specials[i % 4]);
  for (const RngMode rng : {RngMode::philox4, RngMode::triton})
    for (const double p : {0.5, 1.0}) {
      const HostTensor y = evaluate(dropout_spec(p, rng), {1, n, 0}, {{"x", x}}, {7, 9}).at("y");
      const float scale = dropout_scale(p);
      int dropped = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const bool keep = dropout_keep(rng, p, 7, 9, 0, static_cast<std::uint64_t>(i));
        const float want = x.get(i) * (keep ? scale : 0.0f);
        dropped += !keep;
        INFO("p " << p << " x " << x.get(i) << " keep " << keep << " y " << y.get(i));
        CHECK((std::isnan(want) ? std::isnan(y.get(i)) : f32_bits(y.get(i)) == f32_bits(want)));
        if (!keep) CHECK((std::isnan(y.get(i)) || std::signbit(y.get(i))));  // never a +0 for these x
      }
      CHECK(dropped > (p == 1.0 ? n - 1 : n / 4));  // the drops under test happened
    }
}
