#include "epifuse/compare.hpp"

#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "epifuse/errors.hpp"

namespace epifuse {

Tolerance tolerance_for(DType output, Precision precision) {
  switch (output) {
    case DType::f32:
      return precision == Precision::fast ? Tolerance{1e-5, 2e-3} : Tolerance{1e-6, 1e-5};
    case DType::f16: return {std::ldexp(1.0, -14), std::ldexp(1.0, -10)};
    case DType::bf16: return {1e-5, std::ldexp(1.0, -7)};
  }
  return {};
}

Comparison compare(const HostTensor& got, const HostTensor& want, const Tolerance& tol) {
  return compare_within(got, {&want}, tol);
}

Comparison compare_within(const HostTensor& got, const std::vector<const HostTensor*>& wants, const Tolerance& tol) {
  EPIFUSE_ASSERT(!wants.empty(), "compare_within with no reference");
  const HostTensor& want = *wants.front();
  for (const HostTensor* w : wants)
    EPIFUSE_ASSERT(w->dtype == want.dtype && w->shape == want.shape, "compare_within: references of different shapes");
  Comparison c;
  if (got.dtype != want.dtype || got.shape != want.shape) {
    c.ok = false;
    c.message = fmt::format("expected {} [{}], got {} [{}]", to_string(want.dtype),
                            fmt::join(want.shape, ","), to_string(got.dtype), fmt::join(got.shape, ","));
    return c;
  }
  const std::int64_t n = want.numel();
  const std::int64_t cols = want.shape.empty() ? 1 : want.shape.back();
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = got.get(i), w = want.get(i);
    bool good;
    if (std::isnan(w) || std::isnan(g)) {
      good = std::isnan(w) && std::isnan(g);
    } else if (std::isinf(w) || std::isinf(g)) {
      good = g == w;
    } else {
      const double err = std::fabs(g - w);
      c.max_abs_error = std::max(c.max_abs_error, err);
      good = err <= tol.atol + tol.rtol * std::fabs(w);
      for (std::size_t k = 1; k < wants.size() && !good; ++k) {  // between w and another reference, or near it
        const double v = wants[k]->get(i);
        good = (g - w) * (g - v) <= 0 || std::fabs(g - v) <= tol.atol + tol.rtol * std::fabs(v);
      }
    }
    ++c.checked;
    if (!good) {
      if (c.mismatches == 0) {
        c.first_bad = i;
        c.message = fmt::format("element {} (row {}, column {}): got {}, expected {} (atol {}, rtol {})", i,
                                i / cols, i % cols, g, w, tol.atol, tol.rtol);
      }
      ++c.mismatches;
      c.ok = false;
    }
  }
  if (!c.ok) c.message += fmt::format("; {} of {} elements differ", c.mismatches, c.checked);
  return c;
}

}  // namespace epifuse
