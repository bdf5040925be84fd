#pragma once
// What the GEMM GPU tests (mma.sync and wgmma) share: the error bound of fp32
// accumulation, and a run on the device checked output by output against the
// reference evaluator on random non-zero data.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <optional>

#include "epifuse/compare.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/reference.hpp"

namespace epifuse::testing {

// y = relu(acc + bias) [+ dropout]; bias a row vector (or a column vector).
inline KernelSpec gemm_spec(DType dt, Layout a, Layout b, double p = 0.0, RngMode rng = RngMode::philox4,
                     Broadcast bias = Broadcast::row, GemmMath math = GemmMath::exact) {
  KernelSpec s;
  s.mainloop = {MainloopKind::gemm, dt, dt, a, b, math};
  Graph& g = s.graph;
  const Value z = g.add(g.accumulator(0), g.input("bias", dt, bias));
  Value y = g.relu(z);
  if (p > 0) y = g.dropout(y, p, rng);
  g.output("y", y, dt);
  return s;
}

// The accumulator's error bound for fp32 accumulation of exact products, as
// docs/gemm.md writes it down: K * 2^-21 * max|a| * max|b| (inputs in [-2, 2]).
inline Tolerance gemm_tolerance(DType out, const Shape& shape) {
  Tolerance t = tolerance_for(out, Precision::accurate);
  t.atol += static_cast<double>(shape.k) * std::ldexp(1.0, -21) * 4.0;
  return t;
}

inline void check(Jit& jit, const KernelSpec& spec, const Shape& shape, std::uint64_t seed,
                  std::optional<TileConfig> tile = std::nullopt, std::size_t misalign = 0, LaunchArgs args = {}) {
  const TensorMap inputs = make_inputs(spec, shape, seed);
  const TensorMap want = evaluate(spec, shape, inputs, args);
  const TensorMap got = run_on_device(jit, spec, shape, inputs, args, tile, misalign);
  for (const Output& o : spec.graph.outputs()) {
    INFO("output " << o.name << " shape " << shape.m << "x" << shape.n << "x" << shape.k << " a "
                   << to_string(spec.mainloop.a_layout) << " b " << to_string(spec.mainloop.b_layout) << " "
                   << to_string(spec.mainloop.a) << " tile " << (tile ? to_string(*tile) : "default") << " misalign "
                   << misalign);
    const Comparison c = compare(got.at(o.name), want.at(o.name), gemm_tolerance(o.dtype, shape));
    CHECK_MESSAGE(c.ok, c.message);
  }
}

// Dropout multiplies by its mask, as PyTorch's x * mask * scale: where the bias
// makes relu(acc + bias) NaN or inf, a dropped element is NaN on the device as in
// the reference, never 0. The bias has NaN, inf and -inf in every fifth column.
inline void check_dropout_specials(Jit& jit, DType dt, const Shape& shape, std::optional<TileConfig> tile,
                                   RngMode rng = RngMode::philox4) {
  const KernelSpec spec = gemm_spec(dt, Layout::row, Layout::col, 0.5, rng);
  TensorMap inputs = make_inputs(spec, shape, 7700);
  HostTensor& bias = inputs.at("bias");
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY};
  for (std::int64_t i = 0; i < bias.numel(); i += 5) bias.set(i, specials[(i / 5) % 3]);
  const LaunchArgs args{0xBADC0FFEEull, 3};
  const HostTensor want = evaluate(spec, shape, inputs, args).at("y");
  const HostTensor got = run_on_device(jit, spec, shape, inputs, args, tile).at("y");
  std::int64_t differ = 0, dropped_inf = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const float w = want.get(i), g = got.get(i);
    differ += std::isnan(w) != std::isnan(g) || (std::isinf(w) && w != g);
    dropped_inf += std::isnan(w) && std::isinf(bias.get(i % shape.n));
  }
  INFO("tile " << (tile ? to_string(*tile) : "default") << " rng " << to_string(rng) << " shape " << shape.m << "x"
               << shape.n << "x" << shape.k);
  CHECK_MESSAGE(differ == 0, differ << " of " << want.numel() << " NaN or inf positions differ");
  CHECK(dropped_inf > 0);
  const Comparison c = compare(got, want, gemm_tolerance(dt, shape));
  CHECK_MESSAGE(c.ok, c.message);
}

// ---- dual GEMM (tests/gpu/test_dual_gemm.cpp, test_gemm_wave.cpp) ----

enum class Chain { gating, swiglu, geglu };

// The gating layer and its relatives over acc0 and acc1, with three outputs:
// `g0` = acc0 + bias0 and `g1` = acc1 in f32 (each accumulator alone), and
// the chain's `y`.
inline KernelSpec dual_spec(DType dt, Layout a, Layout b, Chain chain = Chain::gating, double p = 0.0,
                     RngMode rng = RngMode::philox4, GemmMath math = GemmMath::exact) {
  KernelSpec s;
  s.mainloop = {MainloopKind::dual_gemm, dt, dt, a, b, math};
  Graph& g = s.graph;
  const Value g0 = g.add(g.accumulator(0), g.input("bias0", dt, Broadcast::row));
  Value y;
  switch (chain) {
    case Chain::gating: {
      const Value h1 = g.add(g.accumulator(1), g.input("bias1", dt, Broadcast::row));
      y = g.mul(g.sigmoid(g0), h1);
      break;
    }
    case Chain::swiglu: y = g.mul(g.silu(g0), g.accumulator(1)); break;
    case Chain::geglu: y = g.mul(g.gelu_tanh(g0), g.accumulator(1)); break;
  }
  if (p > 0) y = g.dropout(y, p, rng);
  g.output("g0", g0, DType::f32);
  g.output("g1", g.accumulator(1), DType::f32);
  g.output("y", y, dt);
  return s;
}

// y = f(h0) * h1, f one of sigmoid, silu, gelu_tanh (|f'| < 1.13): an error e
// in each accumulator reaches y as at most |f(h0)| e + |f'(h0)| |h1| e, so y's
// bound adds e (1 + 1.13 max|h1|) to y's dtype's, with max|h1| <= max|acc1| + 2
// (a bias in [-2, 2]).
inline Tolerance dual_tolerance(const std::string& output, DType dtype, const Shape& shape, const TensorMap& want) {
  Tolerance t = gemm_tolerance(dtype, shape);
  if (output == "y") {
    const HostTensor& acc1 = want.at("g1");
    double peak = 0;
    for (std::int64_t i = 0; i < acc1.numel(); ++i) peak = std::max(peak, std::abs(static_cast<double>(acc1.get(i))));
    t.atol += static_cast<double>(shape.k) * std::ldexp(1.0, -21) * 4.0 * (1.0 + 1.13 * (peak + 2.0));
  }
  return t;
}

inline void check_dual(Jit& jit, const KernelSpec& spec, const Shape& shape, std::uint64_t seed,
                std::optional<TileConfig> tile = std::nullopt, std::size_t misalign = 0, LaunchArgs args = {}) {
  const TensorMap inputs = make_inputs(spec, shape, seed);
  const TensorMap want = evaluate(spec, shape, inputs, args);
  const TensorMap got = run_on_device(jit, spec, shape, inputs, args, tile, misalign);
  for (const Output& o : spec.graph.outputs()) {
    const HostTensor& w = want.at(o.name);
    const Tolerance t = dual_tolerance(o.name, o.dtype, shape, want);
    INFO("output " << o.name << " shape " << shape.m << "x" << shape.n << "x" << shape.k << " a "
                   << to_string(spec.mainloop.a_layout) << " b " << to_string(spec.mainloop.b_layout) << " "
                   << to_string(spec.mainloop.a) << (spec.mainloop.math == GemmMath::tf32 ? " tf32" : "") << " tile "
                   << (tile ? to_string(*tile) : "default") << " misalign " << misalign);
    const Comparison c = compare(got.at(o.name), w, t);
    CHECK_MESSAGE(c.ok, c.message);
  }
}

// The dropout mask: every position the reference drops (exactly 0) is 0 on the
// device, and every kept one the reference can tell from 0 (above the
// tolerance's atol: a bf16 chain's fast sigmoid is 0 below -17, where the
// reference has ~1e-8) is not.
inline void check_mask(Jit& jit, const KernelSpec& spec, const Shape& shape, std::uint64_t seed, const TileConfig& tile) {
  const LaunchArgs args{0x0123456789abcdefULL, 77};
  const TensorMap inputs = make_inputs(spec, shape, seed);
  const HostTensor want = evaluate(spec, shape, inputs, args).at("y");
  const HostTensor got = run_on_device(jit, spec, shape, inputs, args, tile).at("y");
  const double tiny = gemm_tolerance(want.dtype, shape).atol;
  std::int64_t differ = 0, dropped = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const float w = want.get(i), g = got.get(i);
    differ += w == 0.0f ? g != 0.0f : (std::abs(w) > tiny && g == 0.0f);
    dropped += w == 0.0f;
  }
  INFO("tile " << to_string(tile) << " shape " << shape.m << "x" << shape.n << "x" << shape.k);
  CHECK_MESSAGE(differ == 0, differ << " of " << want.numel() << " zero positions differ");
  CHECK(dropped > 0);
}

}  // namespace epifuse::testing
