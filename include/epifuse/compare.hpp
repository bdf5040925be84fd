#pragma once
/// Comparing a device's output with the reference evaluator's (docs/design.md §3:
/// the tolerance follows the precision policy of the output's dtype).
#include <cstdint>
#include <string>

#include "epifuse/spec.hpp"
#include "epifuse/tensor.hpp"

namespace epifuse {

struct Tolerance {
  double atol = 0, rtol = 0;
};

/// |got - want| <= atol + rtol * |want|. f32 accurate: 1e-6 + 1e-5 (a few ulp
/// through a chain of libm-grade functions); fp32 "fast": 1e-5 + 2e-3
/// (tanh.approx.f32); f16: one ulp (2^-10) + 2^-14; bf16: one ulp (2^-7) + 1e-5,
/// which covers a rounding flip after tanh.approx.f32.
Tolerance tolerance_for(DType output, Precision precision);

struct Comparison {
  bool ok = true;
  std::int64_t checked = 0, mismatches = 0;
  std::int64_t first_bad = -1;  ///< linear index of the first mismatch
  double max_abs_error = 0;     ///< over finite pairs
  std::string message;          ///< empty when ok; else the first mismatch, located
};

/// NaN matches only NaN; infinities must be equal; shapes and dtypes must agree.
Comparison compare(const HostTensor& got, const HostTensor& want, const Tolerance& tol);

/// As compare(), against an interval per element: `wants` are the reference
/// evaluated a few ways (wants[0] the plain one, the others with the GEMM
/// accumulators moved by their error bound), and an element passes when it is
/// within `tol` of [min, max] of them. NaN and infinities follow wants[0].
Comparison compare_within(const HostTensor& got, const std::vector<const HostTensor*>& wants, const Tolerance& tol);

}  // namespace epifuse
