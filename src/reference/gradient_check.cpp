// The gradient check (docs/autodiff.md): analytic gradients from grad(spec)'s
// backward spec, evaluated in double, against a five-point central difference
// of the forward, also in double.
#include "epifuse/gradient_check.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "epifuse/errors.hpp"
#include "epifuse/tensor.hpp"
#include "ir/names.hpp"

namespace epifuse {

double GradCheckEntry::relative_error() const { return max_abs_error / std::max(max_abs_numeric, 1e-300); }

double GradCheckReport::max_relative_error() const {
  double e = 0;
  for (const auto& x : entries) e = std::max(e, x.relative_error());
  return e;
}

namespace {

std::vector<double> to_doubles(const HostTensor& t) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = t.get(static_cast<std::int64_t>(i));
  return v;
}

std::string acc_input_name(int index) { return fmt::format("grad_check_acc{}", index); }

// The spec with its accumulators as f32 inputs: an elementwise function of
// them, so they can be perturbed.
KernelSpec accumulators_as_inputs(const KernelSpec& spec) {
  KernelSpec out;
  out.name = spec.name;
  out.precision = spec.precision;
  const Graph& g = spec.graph;
  std::vector<Value> map(g.nodes().size());
  for (std::size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    switch (n.kind) {
      case NodeKind::accumulator: map[i] = out.graph.input(acc_input_name(n.accumulator), DType::f32); break;
      case NodeKind::input: map[i] = out.graph.input(n.name, n.dtype, n.broadcast); break;
      case NodeKind::op: {
        std::vector<Value> args;
        for (Value a : n.args) args.push_back(map[a.id]);
        map[i] = out.graph.copy_op(n, args);
        break;
      }
    }
  }
  for (const Output& o : g.outputs()) out.graph.output(o.name, map[o.value.id], o.dtype);
  return out;
}

}  // namespace

GradCheckReport gradient_check(const KernelSpec& spec, const Shape& shape, const GradCheckOptions& options) {
  GradCheckReport rep;
  rep.grad = grad(spec, options.grad);
  const GradResult& r = rep.grad;
  const bool gemm_chain = spec.mainloop.kind != MainloopKind::elementwise;

  // The forward's inputs (GEMM operands too), in double.
  DoubleTensors inputs = options.given;
  const TensorMap drawn = make_inputs(spec, shape, options.data_seed);
  for (const auto& d : required_inputs(spec, shape))
    if (!inputs.count(d.name)) inputs.emplace(d.name, to_doubles(drawn.at(d.name)));
  const DoubleTensors forward = evaluate_double(r.forward, shape, inputs, options.args);

  // The backward's inputs: upstream weights, saved tensors, forward inputs.
  const Shape rows{shape.m, shape.n, 0};
  DoubleTensors weights, back_in;
  std::uint64_t sub_seed = options.data_seed * 0x9E3779B97F4A7C15ull + 7;
  for (const Output& o : spec.graph.outputs()) {
    const HostTensor w = random_tensor(DType::f32, operand_shape(spec.graph.node(o.value).broadcast, shape), ++sub_seed,
                                       1.0f);
    weights.emplace(o.name, to_doubles(w));
  }
  for (Value v : r.backward.graph.inputs()) {
    const std::string& name = r.backward.graph.node(v).name;
    bool done = false;
    for (const Output& o : spec.graph.outputs())
      if (name == "d" + o.name) {
        back_in.emplace(name, weights.at(o.name));
        done = true;
      }
    if (done) continue;
    if (std::any_of(r.saved.begin(), r.saved.end(), [&](const SavedTensor& s) { return s.name == name; }))
      back_in.emplace(name, forward.at(name));
    else
      back_in.emplace(name, inputs.at(name));
  }
  const DoubleTensors analytic = evaluate_double(r.backward, rows, back_in, options.args);

  // The function the central differences perturb: the spec itself, or with
  // its accumulators as inputs (their values the exact products in double).
  const KernelSpec f = gemm_chain ? accumulators_as_inputs(spec) : spec;
  DoubleTensors point;
  for (Value v : f.graph.inputs()) {
    const std::string& name = f.graph.node(v).name;
    point.emplace(name, inputs.count(name) ? inputs.at(name) : std::vector<double>{});
  }
  if (gemm_chain) {
    const bool dual = spec.mainloop.kind == MainloopKind::dual_gemm;
    if (point.count(acc_input_name(0)))
      point[acc_input_name(0)] = exact_product(inputs.at("a"), inputs.at(dual ? "b0" : "b"), shape);
    if (point.count(acc_input_name(1))) point[acc_input_name(1)] = exact_product(inputs.at("a"), inputs.at("b1"), shape);
  }
  const Shape f_shape = gemm_chain ? rows : shape;
  auto loss = [&](const DoubleTensors& at) {
    const DoubleTensors y = evaluate_double(f, f_shape, at, options.args);
    double l = 0;
    for (const auto& [name, w] : weights) {
      const auto& v = y.at(name);
      for (std::size_t i = 0; i < v.size(); ++i) l += w[i] * v[i];
    }
    return l;
  };
  for (const std::string& wrt : r.wrt) {
    std::string key = wrt;
    if (gemm_chain && names::is_accumulator_name(wrt))
      key = acc_input_name(wrt == names::accumulator_name(spec.mainloop.kind, 1) ? 1 : 0);
    const std::vector<double>& an = analytic.at("d" + wrt);
    std::vector<double>& x = point.at(key);
    EPIFUSE_ASSERT(an.size() == x.size(), "gradient of '{}' has {} values for {} elements", wrt, an.size(), x.size());
    GradCheckEntry e{wrt};
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double x0 = x[i], h = options.step * std::max(1.0, std::fabs(x0));
      // An infinite input (softmax's masked -inf) cannot be moved: its
      // gradient must still be a number.
      if (!std::isfinite(x0)) {
        if (!std::isfinite(an[i])) e.max_abs_error = INFINITY;
        continue;
      }
      auto at = [&](double t) {
        x[i] = x0 + t * h;
        return loss(point);
      };
      const double num = (8.0 * (at(1) - at(-1)) - (at(2) - at(-2))) / (12.0 * h);
      x[i] = x0;
      e.max_abs_error = std::max(e.max_abs_error, std::fabs(an[i] - num));
      if (std::isnan(an[i]) != std::isnan(num)) e.max_abs_error = INFINITY;
      e.max_abs_numeric = std::max(e.max_abs_numeric, std::fabs(num));
    }
    rep.entries.push_back(e);
  }
  return rep;
}

}  // namespace epifuse
