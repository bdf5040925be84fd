#pragma once
/// The gradient check (docs/autodiff.md): grad(spec)'s backward, run by the
/// double-precision reference, against central differences of the forward in
/// double.
#include <cstdint>
#include <string>
#include <vector>

#include "epifuse/autodiff.hpp"
#include "epifuse/launch.hpp"
#include "epifuse/reference.hpp"

namespace epifuse {

struct GradCheckOptions {
  GradOptions grad;
  std::uint64_t data_seed = 1;
  LaunchArgs args{0x5eed, 0};
  /// Inputs given (as doubles); the rest are drawn (random_tensor, non-zero).
  DoubleTensors given;
  /// The central differences' step, relative to max(1, |x|).
  double step = 1e-3;
};

/// One differentiated input's comparison.
struct GradCheckEntry {
  std::string wrt;
  double max_abs_error = 0;   ///< max |analytic - numeric| over its elements
  double max_abs_numeric = 0; ///< max |numeric|
  /// max_abs_error / max(max_abs_numeric, 1e-300): the norm-wise relative error.
  double relative_error() const;
};

struct GradCheckReport {
  GradResult grad;
  std::vector<GradCheckEntry> entries;
  double max_relative_error() const;
};

/// The loss is sum_j <w_j, y_j> over the spec's outputs y_j with random
/// weights w_j (the backward's upstream gradients d<y_j>). Every element of
/// every differentiated input (a GEMM chain's accumulators are perturbed as
/// the product a.b computed in double) is moved by +-h and +-2h: the
/// five-point stencil, whose error is O(h^4). Meant for small shapes.
GradCheckReport gradient_check(const KernelSpec& spec, const Shape& shape, const GradCheckOptions& options = {});

}  // namespace epifuse
