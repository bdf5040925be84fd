#pragma once
// The epilogue ops of docs/design.md §3 on fp32 arguments: each computes its math in
// double and rounds to float once, so the reference is the most accurate fp32
// result. Special values (these are the reference's definition, mirrored by
// templates/common/activations.cuh):
//   - NaN propagates through every op, including max/min/relu.
//   - gelu_tanh(-inf) = gelu_erf(-inf) = silu(-inf) = +0 (the limit; the
//     literal formulas give -inf * 0 = NaN); at +inf they are +inf.
//   - sigmoid(-inf) = 0, sigmoid(+inf) = 1; tanh(+-inf) = +-1.
//   - max(-0, +0) = +0 and min(-0, +0) = -0; relu(-0) = +0.
#include <cmath>

namespace epifuse::ref_ops {

inline float nan_of(float a, float b) { return std::isnan(a) ? a : b; }

// max(a, b), NaN propagates; +0 beats -0.
inline float max(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return nan_of(a, b);
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
// min(a, b), NaN propagates; -0 beats +0.
inline float min(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return nan_of(a, b);
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}
// relu(x) = max(x, 0).
inline float relu(float x) { return max(x, 0.0f); }

// sigmoid(t) = 1/(1+exp(-t)), in the form that never cancels or overflows.
inline double sigmoid_d(double t) {
  if (t >= 0.0) return 1.0 / (1.0 + std::exp(-t));
  const double e = std::exp(t);  // t < 0 or NaN
  return e / (1.0 + e);
}
inline float sigmoid(float x) { return static_cast<float>(sigmoid_d(x)); }

// sigmoid(t)*sigmoid(-t) = e/(1+e)^2 with e = exp(-|t|): sigmoid's derivative,
// with no cancellation in either tail.
inline double sigmoid_deriv_d(double t) {
  const double e = std::exp(-std::fabs(t));
  return e / ((1.0 + e) * (1.0 + e));
}

// gelu_tanh(x) = 0.5*x*(1+tanh(u)), u = 0.7978845608028654*(x+0.044715*x^3),
// computed as x*sigmoid(2u) (the same function: 0.5*(1+tanh(u)) = sigmoid(2u))
// so that 1+tanh(u) does not cancel for negative x. x^3 cannot overflow in
// double for any finite float, so large |x| reach the right limits.
inline float gelu_tanh(float x) {
  if (std::isinf(x)) return x > 0 ? x : 0.0f;
  const double d = x;
  const double u = 0.7978845608028654 * (d + 0.044715 * d * d * d);
  return static_cast<float>(d * sigmoid_d(2.0 * u));
}

// gelu_erf(x) = 0.5*x*(1+erf(x/sqrt(2))) = 0.5*x*erfc(-x/sqrt(2)) (no cancellation).
inline float gelu_erf(float x) {
  if (std::isinf(x)) return x > 0 ? x : 0.0f;
  const double d = x;
  return static_cast<float>(0.5 * d * std::erfc(-d * 0.70710678118654752440));
}

// silu(x) = x*sigmoid(x).
inline float silu(float x) {
  if (std::isinf(x)) return x > 0 ? x : 0.0f;
  return static_cast<float>(static_cast<double>(x) * sigmoid_d(x));
}

inline float tanh(float x) { return static_cast<float>(std::tanh(static_cast<double>(x))); }

// The activations in double, for the double-precision evaluation gradient
// checks use (evaluate_double): the same definitions and limits.
inline double gelu_tanh_d(double x) {
  if (std::isinf(x)) return x > 0 ? x : 0.0;
  return x * sigmoid_d(2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x));
}
inline double gelu_erf_d(double x) {
  if (std::isinf(x)) return x > 0 ? x : 0.0;
  return 0.5 * x * std::erfc(-x * 0.70710678118654752440);
}
inline double silu_d(double x) {
  if (std::isinf(x)) return x > 0 ? x : 0.0;
  return x * sigmoid_d(x);
}

// The derivatives (docs/autodiff.md). Each is its limit at +-inf (1 or 0)
// where the formula would give inf * 0; NaN propagates except through
// relu_deriv, which passes a NaN's gradient as PyTorch's threshold_backward does.
inline double step_d(double x) {
  if (std::isnan(x)) return x;
  return x > 0 ? 1.0 : (x < 0 ? 0.0 : 0.5);
}
inline double relu_deriv_d(double x) { return x <= 0 ? 0.0 : 1.0; }
inline double gelu_tanh_deriv_d(double x) {
  if (std::isinf(x)) return x > 0 ? 1.0 : 0.0;
  constexpr double k = 0.7978845608028654, c = 0.044715;
  const double two_u = 2.0 * k * (x + c * x * x * x);
  const double du = k * (1.0 + 3.0 * c * x * x);
  return sigmoid_d(two_u) + x * sigmoid_deriv_d(two_u) * 2.0 * du;
}
inline double gelu_erf_deriv_d(double x) {
  if (std::isinf(x)) return x > 0 ? 1.0 : 0.0;
  return 0.5 * std::erfc(-x * 0.70710678118654752440) + x * 0.39894228040143267794 * std::exp(-0.5 * x * x);
}
inline double silu_deriv_d(double x) {
  if (std::isinf(x)) return x > 0 ? 1.0 : 0.0;
  return sigmoid_d(x) + x * sigmoid_deriv_d(x);
}
inline double tanh_deriv_d(double x) { return 4.0 * sigmoid_deriv_d(2.0 * x); }

inline float step(float x) { return static_cast<float>(step_d(x)); }
inline float relu_deriv(float x) { return static_cast<float>(relu_deriv_d(x)); }
inline float gelu_tanh_deriv(float x) { return static_cast<float>(gelu_tanh_deriv_d(x)); }
inline float gelu_erf_deriv(float x) { return static_cast<float>(gelu_erf_deriv_d(x)); }
inline float sigmoid_deriv(float x) { return static_cast<float>(sigmoid_deriv_d(x)); }
inline float silu_deriv(float x) { return static_cast<float>(silu_deriv_d(x)); }
inline float tanh_deriv(float x) { return static_cast<float>(tanh_deriv_d(x)); }

// a + b, a - b, a * b in double, rounded once: equal to the IEEE fp32 result
// (double has more than 2*24+2 bits, so the double rounding is innocuous).
inline float add(float a, float b) { return static_cast<float>(double{a} + double{b}); }
inline float sub(float a, float b) { return static_cast<float>(double{a} - double{b}); }
inline float mul(float a, float b) { return static_cast<float>(double{a} * double{b}); }
// a / b likewise (53 >= 2*24 + 2 bits: rounding the double quotient to float is
// the IEEE fp32 quotient).
inline float div(float a, float b) { return static_cast<float>(double{a} / double{b}); }

// exp, log, 1/sqrt in double, rounded once; IEEE special values (log(0) = -inf,
// log of a negative and rsqrt of a negative are NaN, rsqrt(-0) = -inf).
inline float exp(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }
inline float log(float x) { return static_cast<float>(std::log(static_cast<double>(x))); }
inline float rsqrt(float x) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(x))); }

}  // namespace epifuse::ref_ops
