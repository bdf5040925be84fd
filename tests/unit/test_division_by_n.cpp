// Note [Division by N] in include/epifuse/codegen.hpp: the flat elementwise kernel's
// exact 32-bit division of an index by N, checked here as the kernel computes it
// (__umulhi(2e, m) >> l) against integer division: every divisor up to 4,096 with
// every index to 2^17, then divisors of every size (powers of two and their
// neighbours, primes near them, random ones) at the indices where a quotient steps
// (k n - 1, k n) and at the top of the range. No GPU.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "epifuse/codegen.hpp"

using namespace epifuse;

namespace {

// The kernel's arithmetic: __umulhi((unsigned)e << 1, m) >> l.
std::uint32_t quotient(std::uint32_t e, std::uint64_t magic) {
  const auto m = static_cast<std::uint32_t>(magic);
  const auto l = static_cast<std::uint32_t>(magic >> 32);
  const auto hi = static_cast<std::uint32_t>((static_cast<std::uint64_t>(e << 1) * m) >> 32);
  return hi >> l;
}

// The first index where the quotient is wrong (or -1), over `indices`.
std::int64_t first_wrong(std::int64_t n, const std::vector<std::uint32_t>& indices) {
  const std::uint64_t magic = n_magic(n);
  for (std::uint32_t e : indices)
    if (quotient(e, magic) != e / static_cast<std::uint32_t>(n)) return e;
  return -1;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("division by N: every divisor to 4,096, every index to 2^17") {
    std::vector<std::uint32_t> all(1 << 17);
    for (std::uint32_t e = 0; e < all.size(); ++e) all[e] = e;
    for (std::int64_t n = 1; n <= 4096; ++n) {
      CAPTURE(n);
      CHECK(first_wrong(n, all) == -1);
    }
  }

  TEST_CASE("division by N: divisors of every size at the quotient's steps and the top of the range") {
    std::vector<std::int64_t> divisors;
    for (int b = 0; b <= 30; ++b) {
      const std::int64_t p = std::int64_t{1} << b;
      for (std::int64_t d : {p - 1, p, p + 1, 3 * p / 2, 3 * p / 2 + 1}) divisors.push_back(d);
    }
    for (std::int64_t d : {6151, 12289, 24593, 49157, 98317, 786433, 1572869, 50331653, 805306457, 2147483647})
      divisors.push_back(d);
    std::mt19937_64 rng(2026);
    for (int i = 0; i < 2000; ++i) divisors.push_back(1 + static_cast<std::int64_t>(rng() % 0x7fffffff));
    std::uniform_int_distribution<std::uint32_t> any(0, 0x7fffffffu);
    for (std::int64_t n : divisors) {
      if (n < 1 || n >= (std::int64_t{1} << 31)) continue;
      CAPTURE(n);
      const std::uint64_t magic = n_magic(n);
      CHECK(static_cast<std::uint32_t>(magic >> 32) <= 31);  // l = ceil(log2 n)
      std::vector<std::uint32_t> e = {0, 1, 0x3fffffffu, 0x40000000u, 0x7ffffffeu, 0x7fffffffu};
      const std::int64_t steps = 0x7fffffff / n;
      for (std::int64_t k : {std::int64_t{1}, std::int64_t{2}, std::int64_t{3}, steps / 2, steps - 1, steps}) {
        if (k < 1 || k * n > 0x7fffffff) continue;
        e.push_back(static_cast<std::uint32_t>(k * n - 1));
        e.push_back(static_cast<std::uint32_t>(k * n));
      }
      for (int i = 0; i < 64; ++i) e.push_back(any(rng));
      CHECK(first_wrong(n, e) == -1);
    }
  }

  TEST_CASE("division by N: the multiplier is ceil(2^(31 + l) / n) in 32 bits") {
    CHECK(n_magic(1) == (std::uint64_t{1} << 31));                        // l = 0, m = 2^31
    CHECK(n_magic(8192) == ((std::uint64_t{13} << 32) | (1u << 31)));     // a power of two: m = 2^31
    CHECK(n_magic(3) == ((std::uint64_t{2} << 32) | 0xAAAAAAABu));         // ceil(2^33 / 3)
    CHECK(n_magic(1000) == ((std::uint64_t{10} << 32) | 2199023256u));     // ceil(2^41 / 1000)
    CHECK(static_cast<std::uint32_t>(n_magic(0x7fffffff) >> 32) == 31);
  }
}
