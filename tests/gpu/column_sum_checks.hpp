#pragma once
// What the GPU tests of col_sum outputs share (tests/gpu/test_elementwise.cpp,
// test_gemm_col_sum.cpp): the graph of a col_sum's terms, and the bound a
// column sum is checked against.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "epifuse/compare.hpp"
#include "epifuse/reference.hpp"

namespace epifuse::testing {

inline bool is_column_sum(const Graph& g, Value v) {
  const Node& n = g.node(v);
  return n.kind == NodeKind::op && n.op == OpKind::col_sum;
}

// The same graph (and mainloop) with every col_sum output replaced by its
// operand as a full f32 output: the terms each column sum adds up.
inline KernelSpec column_terms(const KernelSpec& spec) {
  KernelSpec t;
  t.precision = spec.precision;
  t.mainloop = spec.mainloop;
  const Graph& g = spec.graph;
  std::vector<Value> map(g.nodes().size());
  for (std::size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.kind == NodeKind::input) {
      map[i] = t.graph.input(n.name, n.dtype, n.broadcast);
    } else if (n.kind == NodeKind::accumulator) {
      map[i] = t.graph.accumulator(n.accumulator);
    } else if (n.op != OpKind::col_sum) {
      std::vector<Value> args;
      for (Value a : n.args) args.push_back(map[a.id]);
      map[i] = t.graph.copy_op(n, args);
    }
  }
  for (const Output& o : g.outputs())
    if (is_column_sum(g, o.value)) t.graph.output(o.name, map[g.node(o.value).args[0].id], DType::f32);
  return t;
}

// An [N] column sum `got` against the reference's `want`: within 1e-5 of the
// sum of its terms' magnitudes plus M times `per_term` (the absolute error of
// one term: an f32 output's tolerance for an elementwise chain, the
// accumulator's bound for a GEMM's) (f32), or one ulp of the result and half
// an ulp of that sum (16-bit: its terms may use the approximate functions,
// design.md §3).
inline void check_column_sum(const HostTensor& got, const HostTensor& want, const HostTensor& terms, DType dtype,
                             const Shape& shape, double per_term) {
  REQUIRE(got.numel() == shape.n);
  const double ulp = dtype == DType::f32 ? 0x1p-23 : dtype == DType::f16 ? 0x1p-10 : 0x1p-7;
  const double of_terms = dtype == DType::f32 ? 1e-5 : ulp / 2;
  std::int64_t bad = 0, first_bad = -1;
  for (std::int64_t c = 0; c < shape.n; ++c) {
    double magnitude = 0;
    for (std::int64_t r = 0; r < shape.m; ++r) magnitude += std::fabs(terms.get(r * shape.n + c));
    const double gv = got.get(c), wv = want.get(c);
    const bool ok = std::isfinite(gv) &&
                    std::fabs(gv - wv) <= of_terms * magnitude + per_term * static_cast<double>(shape.m) + ulp * std::fabs(wv);
    if (!ok && first_bad < 0) first_bad = c;
    bad += !ok;
  }
  CHECK_MESSAGE(bad == 0, bad << " of " << shape.n << " column sums off; first at column " << first_bad << ": got "
                              << (first_bad >= 0 ? got.get(first_bad) : 0.0f) << ", want "
                              << (first_bad >= 0 ? want.get(first_bad) : 0.0f));
}

}  // namespace epifuse::testing
