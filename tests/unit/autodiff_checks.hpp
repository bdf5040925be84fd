#pragma once
// What the grad() test files share (test_autodiff.cpp, test_autodiff_saved.cpp):
// the gradient check against central differences, and a one-op chain.
#include <doctest/doctest.h>

#include <functional>

#include "epifuse/gradient_check.hpp"
#include "epifuse/spec.hpp"

namespace epifuse::testing {

constexpr double k_bar = 1e-6;  // norm-wise relative error, in double

// `nonzero`: every gradient must have a non-zero element (one all zero would check nothing).
inline void check_gradients(const KernelSpec& spec, const Shape& shape, const GradCheckOptions& options = {},
                     bool nonzero = true) {
  const GradCheckReport rep = gradient_check(spec, shape, options);
  REQUIRE(!rep.entries.empty());
  for (const auto& e : rep.entries) {
    CAPTURE(e.wrt);
    CAPTURE(e.max_abs_error);
    CAPTURE(e.max_abs_numeric);
    if (nonzero) CHECK(e.max_abs_numeric > 0);
    CHECK((e.max_abs_numeric == 0 ? e.max_abs_error == 0 : e.relative_error() <= k_bar));
  }
}

// x (full f32), y (full f32), r ([N]), c ([M]) and the op under test.
inline KernelSpec one_op(const std::function<Value(Graph&, Value x, Value y, Value r, Value c)>& body) {
  KernelSpec s;
  Graph& g = s.graph;
  const Value x = g.input("x", DType::f32), y = g.input("y", DType::f32);
  const Value r = g.input("r", DType::f32, Broadcast::row), c = g.input("c", DType::f32, Broadcast::col);
  // Every input reaches the output, so each has a gradient to check.
  const Value v = body(g, x, y, r, c);
  g.output("out", g.add(g.add(v, g.mul(y, r)), g.mul(x, c)), DType::f32);
  return s;
}

inline Value positive(Graph& g, Value v) { return g.add_scalar(g.mul(v, v), 0.5); }

}  // namespace epifuse::testing
