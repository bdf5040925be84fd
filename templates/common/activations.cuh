// Elementwise math in fp32 (docs/design.md §3). Each op has an accurate form (libm-
// grade: tanhf, expf, erff) and, where it pays, a fast form built on the
// hardware's tanh.approx.f32 / ex2.approx, used only where the emitter's
// precision policy allows it (16-bit outputs or "precision": "fast").
// Infinities and NaN follow the reference evaluator (src/reference).
#pragma once
#include "common/platform.cuh"


// tanh.approx.f32: max relative error about 2^-11, one MUFU instruction.
__device__ __forceinline__ float ef_tanh_approx(float x) {
#if EF_HIP
  return tanhf(x);  // AMD has no tanh instruction
#else
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

// The hardware's approximate reciprocal and 2^x (one MUFU op each on NVIDIA,
// v_rcp_f32 and v_exp_f32 on AMD), subnormal results flushed to 0.
__device__ __forceinline__ float ef_rcp_approx(float x) {
#if EF_HIP
  return __builtin_amdgcn_rcpf(x);
#else
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#endif
}
__device__ __forceinline__ float ef_ex2_approx(float x) {
#if EF_HIP
  return exp2f(x);
#else
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#endif
}

// 1/d for d in [1, 2]: rcp.approx and one Newton step (within 1 ulp), with no
// branch. An IEEE division (or __frcp_rn) checks its operands and branches to
// a slow path; in an unrolled epilogue each such branch is a basic block the
// compiler cannot schedule across, and the accurate sigmoid ran 1.18x the
// dual GEMM's time against 1.03x for the chain without it (docs/perf/dual-gemm.md).
__device__ __forceinline__ float ef_rcp_1_2(float d) {
  const float r = ef_rcp_approx(d);
  return fmaf(fmaf(-d, r, 1.0f), r, r);
}

// sigmoid(x) = 1/(1+exp(-x)), as t = exp(-|x|) in (0, 1]: 1/(1+t) for x >= 0,
// t/(1+t) below, so the reciprocal's argument stays in [1, 2]. Relative error
// a few ulp everywhere (also where 1/(1+exp(-x)) would divide by infinity or
// give a result below FLT_MIN); NaN stays NaN.
__device__ __forceinline__ float ef_sigmoid(float x) {
  const float t = expf(-fabsf(x)), r = ef_rcp_1_2(1.0f + t);
  return x >= 0.0f ? r : t * r;
}

// gelu_tanh(x) = 0.5*x*(1+tanh(0.7978845608028654*(x+0.044715*x^3))), computed
// as x*sigmoid(2u) (1 + tanh(u) = 2 sigmoid(2u)): no cancellation where
// tanh(u) nears -1, and no branch (tanhf has them). gelu(-inf) = 0 (the
// formula alone gives -inf*0).
__device__ __forceinline__ float ef_gelu_tanh(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  const float y = x * ef_sigmoid(2.0f * u);
  return x == __int_as_float(0xff800000) /* -inf */ ? 0.0f : y;
}
// max.NaN: like fmaxf, but NaN in gives NaN out (sm_80+).
__device__ __forceinline__ float ef_max_nan(float a, float b) {
#if EF_HIP
  return (a != a || b != b) ? a + b : fmaxf(a, b);
#else
  float y;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
#endif
}
// min.NaN: like fminf, but NaN in gives NaN out (sm_80+).
__device__ __forceinline__ float ef_min_nan(float a, float b) {
#if EF_HIP
  return (a != a || b != b) ? a + b : fminf(a, b);
#else
  float y;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
#endif
}

// max/min propagate NaN (fmaxf/fminf would drop it): one max.NaN/min.NaN on
// NVIDIA, where the test and select took two instructions an element.
__device__ __forceinline__ float ef_max(float a, float b) { return ef_max_nan(a, b); }
__device__ __forceinline__ float ef_min(float a, float b) { return ef_min_nan(a, b); }
// relu(x) = max(x, 0), NaN propagates.
__device__ __forceinline__ float ef_relu(float x) { return ef_max_nan(x, 0.0f); }

// Fast sigmoid: rcp.approx(1 + ex2.approx(-x log2 e)), two MUFU ops and no
// branch. Its relative error stays near 2^-20 in both tails. The form
// 0.5 + 0.5 tanh.approx(x/2) used before cancelled for negative x (tanh.approx's
// 2^-11 error against a result near 0). It was exactly 0 below x = -17, and
// bf16 SwiGLU/GEGLU dual GEMMs failed `epifuse run --verify` by up to 1%.
// x = -inf gives 0, +inf gives 1, NaN stays NaN.
__device__ __forceinline__ float ef_sigmoid_fast(float x) {
  return ef_rcp_approx(1.0f + ef_ex2_approx(-1.4426950408889634f * x));
}

// Fast form: x*sigmoid_fast(2u), with 2u log2(e) folded into the polynomial
// x*(c0 + c1*x^2), one FMUL, one FFMA, one FMUL before the two MUFU ops. -inf
// is clamped to -FLT_MAX first (one max.NaN, NaN still propagates). There the
// sigmoid is 0, and fma(x, 0, +0) gives +0, as the reference does.
__device__ __forceinline__ float ef_gelu_tanh_fast(float x) {
  x = ef_max_nan(x, -3.4028234663852886e38f);
  constexpr float c0 = -2.0f * 0.7978845608028654f * 1.4426950408889634f, c1 = c0 * 0.044715f;
  const float a = x * fmaf(c1, x * x, c0);  // -2u log2(e)
  return fmaf(x, ef_rcp_approx(1.0f + ef_ex2_approx(a)), 0.0f);
}

// gelu_erf(x) = 0.5*x*(1+erf(x/sqrt(2))).
__device__ __forceinline__ float ef_gelu_erf(float x) {
  const float y = 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
  return x == __int_as_float(0xff800000) /* -inf */ ? 0.0f : y;
}

// silu(x) = x*sigmoid(x) (the sigmoid above: no division); silu(-inf) = 0.
__device__ __forceinline__ float ef_silu(float x) {
  const float y = x * ef_sigmoid(x);
  return x == __int_as_float(0xff800000) /* -inf */ ? 0.0f : y;
}
__device__ __forceinline__ float ef_silu_fast(float x) {
  const float y = x * ef_sigmoid_fast(x);
  return x == __int_as_float(0xff800000) /* -inf */ ? 0.0f : y;
}

__device__ __forceinline__ float ef_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ float ef_tanh_fast(float x) { return ef_tanh_approx(x); }

// exp, log, 1/sqrt: the accurate forms are libm's (expf, logf: 1-2 ulp) and a
// correctly rounded sqrt and division; the fast forms are the hardware's
// ex2.approx / lg2.approx (__expf, __logf) and rsqrt.approx.
__device__ __forceinline__ float ef_exp(float x) { return expf(x); }
__device__ __forceinline__ float ef_exp_fast(float x) { return __expf(x); }
__device__ __forceinline__ float ef_log(float x) { return logf(x); }
__device__ __forceinline__ float ef_log_fast(float x) { return __logf(x); }
__device__ __forceinline__ float ef_rsqrt(float x) { return 1.0f / sqrtf(x); }
__device__ __forceinline__ float ef_rsqrt_fast(float x) { return rsqrtf(x); }

// The derivatives a backward spec uses (docs/autodiff.md), with the
// reference's limits (src/reference/ops.hpp): 1 or 0 at +-inf, where the
// formulas would give inf * 0, and NaN propagating except through relu_deriv.
// sigmoid(x)*sigmoid(-x) = t/(1+t)^2, t = exp(-|x|): no cancellation in either tail.
__device__ __forceinline__ float ef_sigmoid_deriv(float x) {
  const float t = expf(-fabsf(x)), r = ef_rcp_1_2(1.0f + t);
  return t * r * r;
}
__device__ __forceinline__ float ef_step(float x) {
  return x > 0.0f ? 1.0f : (x < 0.0f ? 0.0f : (x == 0.0f ? 0.5f : x));
}
// 0 where x <= 0, else 1: a NaN passes its gradient, as PyTorch's threshold_backward.
__device__ __forceinline__ float ef_relu_deriv(float x) { return x <= 0.0f ? 0.0f : 1.0f; }
__device__ __forceinline__ float ef_tanh_deriv(float x) { return 4.0f * ef_sigmoid_deriv(2.0f * x); }
// sigmoid(x) + x sigmoid'(x); the infinities give their limits, 1 and 0.
__device__ __forceinline__ float ef_silu_deriv(float x) {
  const float y = ef_sigmoid(x) + x * ef_sigmoid_deriv(x);
  return fabsf(x) == __int_as_float(0x7f800000) ? (x > 0.0f ? 1.0f : 0.0f) : y;
}
// s + x s'(2u) 2u', s = sigmoid(2u). x is clamped to +-1e4 first (NaN stays
// NaN): beyond it s is exactly 0 or 1 and s' exactly 0 in fp32, and x^3 or
// u' would overflow to inf * 0.
__device__ __forceinline__ float ef_gelu_tanh_deriv(float x) {
  const float xc = ef_min_nan(ef_max_nan(x, -1.0e4f), 1.0e4f);
  constexpr float k = 0.7978845608028654f, c = 0.044715f;
  const float two_u = 2.0f * k * (xc + c * xc * xc * xc);
  const float du = k * (1.0f + 3.0f * c * xc * xc);
  return ef_sigmoid(two_u) + xc * ef_sigmoid_deriv(two_u) * 2.0f * du;
}
// Fast forms of the derivatives (16-bit outputs, OpInfo::fast_for): the
// same formulas from t = exp(-|x|) = ex2.approx(-|x| log2(e)) and
// r = rcp.approx(1 + t), two MUFU ops where the accurate forms take expf's
// range reduction and a Newton step. Error up to ~2^-16 of the terms' size
// (the rounded ex2 argument, |a| 2^-24 ln 2, is largest where t is smallest;
// gelu_tanh_deriv's worst near x = -9, from a float32 model of the formula),
// against half an ulp of f16's 2^-12; t flushed to 0 below 2^-126. In the
// GEMM's epilogue the accurate gelu_tanh_deriv cost 15% of a bf16
// 8192x8192x2048 dgrad on an H100 (docs/perf/backward.md, "GEMM backward").
// t = exp(-|x|) and r = 1/(1+t): sigmoid(x) is r for x >= 0, else t r; sigmoid'(x) = t r^2.
__device__ __forceinline__ void ef_sigmoid_terms_fast(float x, float& t, float& r) {
  t = ef_ex2_approx(-1.4426950408889634f * fabsf(x));
  r = ef_rcp_approx(1.0f + t);
}
__device__ __forceinline__ float ef_sigmoid_deriv_fast(float x) {
  float t, r;
  ef_sigmoid_terms_fast(x, t, r);
  return t * r * r;
}
__device__ __forceinline__ float ef_tanh_deriv_fast(float x) { return 4.0f * ef_sigmoid_deriv_fast(2.0f * x); }
__device__ __forceinline__ float ef_silu_deriv_fast(float x) {
  float t, r;
  ef_sigmoid_terms_fast(x, t, r);
  const float s = x >= 0.0f ? r : t * r;
  const float y = fmaf(x, t * r * r, s);
  return fabsf(x) == __int_as_float(0x7f800000) ? (x > 0.0f ? 1.0f : 0.0f) : y;
}
// 2u and 2u' from x^2 in two FFMAs; the sign of 2u is x's.
__device__ __forceinline__ float ef_gelu_tanh_deriv_fast(float x) {
  const float xc = ef_min_nan(ef_max_nan(x, -1.0e4f), 1.0e4f), x2 = xc * xc;
  constexpr float k2 = 2.0f * 0.7978845608028654f, k2c = k2 * 0.044715f;
  const float two_u = xc * fmaf(k2c, x2, k2), two_du = fmaf(3.0f * k2c, x2, k2);
  float t, r;
  ef_sigmoid_terms_fast(two_u, t, r);
  const float s = xc >= 0.0f ? r : t * r;
  return fmaf(xc * two_du, t * r * r, s);
}
// Phi(x) + x phi(x).
__device__ __forceinline__ float ef_gelu_erf_deriv(float x) {
  const float xc = ef_min_nan(ef_max_nan(x, -1.0e4f), 1.0e4f);
  return 0.5f * erfcf(-xc * 0.7071067811865476f) + xc * 0.3989422804014327f * expf(-0.5f * xc * xc);
}
// expand: a vector's value at this element (the broadcast is the load's).
__device__ __forceinline__ float ef_expand(float x) { return x; }
