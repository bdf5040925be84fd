#pragma once
// Random chains for tests/fuzz/gpu_fuzz.cpp (docs/fuzzing.md, "On a GPU"): a
// chain, its shape and its strides drawn from a seed, and the predicates the
// checker asks of them.
#include <cstdint>
#include <vector>

#include "epifuse/spec.hpp"
#include "epifuse/tensor.hpp"

namespace epifuse::fuzz {

// splitmix64: a case is a pure function of its seed.
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::int64_t below(std::int64_t n) { return static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(n)); }
  std::int64_t in(std::int64_t lo, std::int64_t hi) { return lo + below(hi - lo + 1); }
  bool chance(double p) { return static_cast<double>(next() >> 11) * 0x1p-53 < p; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * (static_cast<double>(next() >> 11) * 0x1p-53); }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<std::size_t>(below(static_cast<std::int64_t>(v.size())))];
  }
};


/// A chain drawn from the op table: elementwise, row, GEMM or dual GEMM, named
/// fuzz<id>. It may not verify (a UserError the caller counts as rejected).
KernelSpec random_spec(Rng& rng, std::uint64_t id);
/// M, N (and K): ragged and round, few rows and many, long rows for row chains;
/// small enough for the CPU reference (M*N*K under 2^26, M*N under 2^22).
Shape random_shape(Rng& rng, const KernelSpec& spec);
/// Each full input and output, and a GEMM's operands, strided or not, each with
/// a pad of its own (unbatched shapes only).
void random_strides(Rng& rng, const KernelSpec& spec, Shape& s);

/// The tensors of `given` that `spec` binds as inputs.
TensorMap inputs_of(const KernelSpec& spec, TensorMap given);
/// An op whose value jumps where its argument crosses a point (step, relu_deriv).
bool has_branches(const KernelSpec& spec);
bool has_row_reduction(const KernelSpec& spec);
bool has_col_sum(const KernelSpec& spec);
bool strided(const Shape& s);
/// The shape with every ld cleared.
Shape dense_of(Shape s);

}  // namespace epifuse::fuzz
