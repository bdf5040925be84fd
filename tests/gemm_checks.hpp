#pragma once
// What the GEMM GPU tests (mma.sync and wgmma) share: the error bound of fp32
// accumulation, and a run on the device checked output by output against the
// reference evaluator on random non-zero data.
#include <doctest/doctest.h>

#include <cmath>
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

}  // namespace epifuse::testing
