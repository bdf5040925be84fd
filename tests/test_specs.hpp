#pragma once
// Specs shared by the compile tier and the GPU suite, built with the C++ API.
#include <string>
#include <utility>
#include <vector>

#include "epifuse/spec.hpp"

namespace test_specs {

using namespace epifuse;

// y = dropout(gelu_tanh(x + bias), p) + residual
inline KernelSpec bias_gelu_dropout_add(DType dt, double p = 0.1, RngMode rng = RngMode::philox4) {
  KernelSpec s;
  Graph& g = s.graph;
  Value x = g.input("x", dt);
  Value b = g.input("bias", dt, Broadcast::row);
  Value r = g.input("residual", dt);
  g.output("y", g.add(g.dropout(g.gelu_tanh(g.add(x, b)), p, rng), r), dt);
  return s;
}

// y = (x + y_in) * alpha
inline KernelSpec add_mul(DType dt, double alpha = 0.5) {
  KernelSpec s;
  Graph& g = s.graph;
  Value x = g.input("x", dt);
  Value y = g.input("y_in", dt);
  g.output("y", g.scale(g.add(x, y), alpha), dt);
  return s;
}

// One spec per unary op (the derivatives a backward uses included), binary op with each broadcast kind, cast, dropout
// mode, add_scalar, and a multi-output graph, over all three dtypes.
inline std::vector<std::pair<std::string, KernelSpec>> coverage() {
  std::vector<std::pair<std::string, KernelSpec>> out;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const std::string d(to_string(dt));
    for (OpKind op : {OpKind::relu, OpKind::gelu_tanh, OpKind::gelu_erf, OpKind::sigmoid, OpKind::silu,
                      OpKind::tanh, OpKind::exp, OpKind::log, OpKind::rsqrt, OpKind::step, OpKind::relu_deriv,
                      OpKind::gelu_tanh_deriv, OpKind::gelu_erf_deriv, OpKind::sigmoid_deriv, OpKind::silu_deriv,
                      OpKind::tanh_deriv}) {
      KernelSpec s;
      Value x = s.graph.input("x", dt);
      s.graph.output("y", s.graph.unary(op, x), dt);
      out.emplace_back("unary" + std::to_string(static_cast<int>(op)) + "_" + d, std::move(s));
    }
    for (OpKind op : {OpKind::add, OpKind::sub, OpKind::mul, OpKind::max, OpKind::min, OpKind::div})
      for (Broadcast b : {Broadcast::full, Broadcast::row, Broadcast::col, Broadcast::scalar}) {
        KernelSpec s;
        Value x = s.graph.input("x", dt);
        Value o = s.graph.input("o", dt, b);
        s.graph.output("y", s.graph.binary(op, x, o), dt);
        out.emplace_back("binary" + std::to_string(static_cast<int>(op)) + "_" +
                             std::string(to_string(b)) + "_" + d,
                         std::move(s));
      }
    {
      KernelSpec s;  // two dropouts in both modes, cast, scale, two outputs of other dtypes
      Graph& g = s.graph;
      Value x = g.input("x", dt);
      Value c = g.input("c", DType::f32, Broadcast::col);
      Value pre = g.mul(x, c);
      Value d0 = g.dropout(pre, 0.25);
      Value d1 = g.dropout(g.cast(g.scale(d0, -1.5), DType::bf16), 0.5, RngMode::triton);
      g.output("y", d1, dt);
      g.output("pre", pre, DType::f32);
      g.output("z", g.silu(d0), DType::f16);
      out.emplace_back("multi_" + d, std::move(s));
    }
    {
      KernelSpec s;  // add_scalar's c is a float literal of the code: small, negative, -0
      Graph& g = s.graph;
      Value x = g.input("x", dt);
      g.output("y", g.add_scalar(g.add_scalar(g.add_scalar(x, 1e-6), -2.5), -0.0), dt);
      out.emplace_back("add_scalar_" + d, std::move(s));
    }
    out.emplace_back("bias_gelu_dropout_add_" + d, bias_gelu_dropout_add(dt));
    out.emplace_back("bias_gelu_dropout_add_triton_" + d, bias_gelu_dropout_add(dt, 0.3, RngMode::triton));
    out.emplace_back("add_mul_" + d, add_mul(dt));
  }
  return out;
}

}  // namespace test_specs
