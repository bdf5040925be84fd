#include "ir/op_table.hpp"

#include <array>

#include "epifuse/errors.hpp"

namespace epifuse {

namespace {
// Order follows OpKind so that op_info() is an index.
constexpr std::array<OpInfo, 32> k_ops = {{
    {OpKind::add, "add", 2, "a + b", Spelling::infix, "+", FastFor::none},
    {OpKind::sub, "sub", 2, "a - b", Spelling::infix, "-", FastFor::none},
    {OpKind::mul, "mul", 2, "a * b", Spelling::infix, "*", FastFor::none},
    {OpKind::max, "max", 2, "fmaxf(a, b), NaN propagates", Spelling::call, "ef_max", FastFor::none},
    {OpKind::min, "min", 2, "fminf(a, b), NaN propagates", Spelling::call, "ef_min", FastFor::none},
    {OpKind::scale, "scale", 1, "alpha * a", Spelling::special, "", FastFor::none},
    {OpKind::relu, "relu", 1, "max(a, 0), NaN propagates", Spelling::call, "ef_relu", FastFor::none},
    {OpKind::gelu_tanh, "gelu_tanh", 1, "0.5*a*(1+tanh(0.7978845608028654*(a+0.044715*a^3)))", Spelling::call,
     "ef_gelu_tanh", FastFor::f16},
    {OpKind::gelu_erf, "gelu_erf", 1, "0.5*a*(1+erf(a/sqrt(2)))", Spelling::call, "ef_gelu_erf", FastFor::none},
    {OpKind::sigmoid, "sigmoid", 1, "1/(1+exp(-a))", Spelling::call, "ef_sigmoid", FastFor::f16},
    {OpKind::silu, "silu", 1, "a/(1+exp(-a))", Spelling::call, "ef_silu", FastFor::f16},
    {OpKind::tanh, "tanh", 1, "tanh(a)", Spelling::call, "ef_tanh", FastFor::bf16},
    {OpKind::dropout, "dropout", 1,
     "a * (keep(seed, offset, stream, i) ? scale : 0), scale = float(1/(1-p)) (docs/design.md §4)",
     Spelling::special, "", FastFor::none},
    {OpKind::cast, "cast", 1, "round a to dtype (nearest even), back to fp32", Spelling::special, "", FastFor::none},
    {OpKind::div, "div", 2, "a / b (IEEE: x/0 = +-inf, 0/0 = NaN)", Spelling::infix, "/", FastFor::none},
    {OpKind::exp, "exp", 1, "e^a", Spelling::call, "ef_exp", FastFor::f16},
    {OpKind::log, "log", 1, "natural log; log(0) = -inf, log(a < 0) = NaN", Spelling::call, "ef_log", FastFor::bf16},
    {OpKind::rsqrt, "rsqrt", 1, "1/sqrt(a); rsqrt(+0) = +inf, rsqrt(-0) = -inf, rsqrt(a < 0) = NaN", Spelling::call,
     "ef_rsqrt", FastFor::f16},
    {OpKind::row_max, "row_max", 1, "max of a's row, NaN propagates; one value per row", Spelling::special, "",
     FastFor::none},
    {OpKind::row_sum, "row_sum", 1, "sum of a's row (fp32; association unspecified); one value per row",
     Spelling::special, "", FastFor::none},
    {OpKind::row_mean, "row_mean", 1, "row_sum(a) / N; one value per row", Spelling::special, "", FastFor::none},
    {OpKind::add_scalar, "add_scalar", 1, "a + c, c a constant of the code (a norm's eps)", Spelling::special, "",
     FastFor::none},
    {OpKind::col_sum, "col_sum", 1,
     "sum of a's column over the M rows (fp32, in a fixed order: the same bits every run); one value per column",
     Spelling::special, "", FastFor::none},
    {OpKind::step, "step", 1, "1 if a > 0, 0.5 if a == 0, 0 if a < 0, NaN propagates (max and min's derivative)",
     Spelling::call, "ef_step", FastFor::none},
    {OpKind::relu_deriv, "relu_deriv", 1, "0 if a <= 0 else 1 (NaN gives 1, as PyTorch passes a NaN's gradient)",
     Spelling::call, "ef_relu_deriv", FastFor::none},
    {OpKind::gelu_tanh_deriv, "gelu_tanh_deriv", 1,
     "d/da gelu_tanh(a) = s + a*s*(1-s)*2u', s = sigmoid(2u), u = 0.7978845608028654*(a+0.044715*a^3)",
     Spelling::call, "ef_gelu_tanh_deriv", FastFor::f16},
    {OpKind::gelu_erf_deriv, "gelu_erf_deriv", 1, "d/da gelu_erf(a) = Phi(a) + a*phi(a)", Spelling::call,
     "ef_gelu_erf_deriv", FastFor::none},
    {OpKind::sigmoid_deriv, "sigmoid_deriv", 1, "d/da sigmoid(a) = sigmoid(a)*sigmoid(-a)", Spelling::call,
     "ef_sigmoid_deriv", FastFor::f16},
    {OpKind::silu_deriv, "silu_deriv", 1, "d/da silu(a) = sigmoid(a) + a*sigmoid(a)*sigmoid(-a)", Spelling::call,
     "ef_silu_deriv", FastFor::f16},
    {OpKind::tanh_deriv, "tanh_deriv", 1, "d/da tanh(a) = 1 - tanh(a)^2 = 4*sigmoid(2a)*sigmoid(-2a)",
     Spelling::call, "ef_tanh_deriv", FastFor::f16},
    {OpKind::expand, "expand", 1, "a, broadcast to a full [M,N] value", Spelling::call, "ef_expand", FastFor::none},
    {OpKind::div_n, "div_n", 1, "a / N, N the row length (row_mean's derivative)", Spelling::special, "",
     FastFor::none},
}};
}  // namespace

std::span<const OpInfo> op_table() { return k_ops; }

const OpInfo& op_info(OpKind op) {
  const auto& info = k_ops[static_cast<std::size_t>(op)];
  EPIFUSE_ASSERT(info.kind == op, "op table out of order");
  return info;
}

const OpInfo* find_op(std::string_view name) {
  for (const auto& info : k_ops)
    if (info.name == name) return &info;
  return nullptr;
}

}  // namespace epifuse
