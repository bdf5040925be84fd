#include "ir/op_table.hpp"

#include <array>

#include "epifuse/errors.hpp"

namespace epifuse {

namespace {
// Order follows OpKind so that op_info() is an index.
constexpr std::array<OpInfo, 22> k_ops = {{
    {OpKind::add, "add", 2, "a + b", Spelling::infix, "+", false},
    {OpKind::sub, "sub", 2, "a - b", Spelling::infix, "-", false},
    {OpKind::mul, "mul", 2, "a * b", Spelling::infix, "*", false},
    {OpKind::max, "max", 2, "fmaxf(a, b), NaN propagates", Spelling::call, "ef_max", false},
    {OpKind::min, "min", 2, "fminf(a, b), NaN propagates", Spelling::call, "ef_min", false},
    {OpKind::scale, "scale", 1, "alpha * a", Spelling::special, "", false},
    {OpKind::relu, "relu", 1, "max(a, 0), NaN propagates", Spelling::call, "ef_relu", false},
    {OpKind::gelu_tanh, "gelu_tanh", 1, "0.5*a*(1+tanh(0.7978845608028654*(a+0.044715*a^3)))", Spelling::call,
     "ef_gelu_tanh", true},
    {OpKind::gelu_erf, "gelu_erf", 1, "0.5*a*(1+erf(a/sqrt(2)))", Spelling::call, "ef_gelu_erf", false},
    {OpKind::sigmoid, "sigmoid", 1, "1/(1+exp(-a))", Spelling::call, "ef_sigmoid", true},
    {OpKind::silu, "silu", 1, "a/(1+exp(-a))", Spelling::call, "ef_silu", true},
    {OpKind::tanh, "tanh", 1, "tanh(a)", Spelling::call, "ef_tanh", true},
    {OpKind::dropout, "dropout", 1,
     "keep(seed, offset, stream, i) ? a*scale : 0, scale = float(1/(1-p)) (DESIGN §4)", Spelling::special, "",
     false},
    {OpKind::cast, "cast", 1, "round a to dtype (nearest even), back to fp32", Spelling::special, "", false},
    {OpKind::div, "div", 2, "a / b (IEEE: x/0 = +-inf, 0/0 = NaN)", Spelling::infix, "/", false},
    {OpKind::exp, "exp", 1, "e^a", Spelling::call, "ef_exp", true},
    {OpKind::log, "log", 1, "natural log; log(0) = -inf, log(a < 0) = NaN", Spelling::call, "ef_log", true},
    {OpKind::rsqrt, "rsqrt", 1, "1/sqrt(a); rsqrt(+0) = +inf, rsqrt(-0) = -inf, rsqrt(a < 0) = NaN", Spelling::call,
     "ef_rsqrt", true},
    {OpKind::row_max, "row_max", 1, "max of a's row, NaN propagates; one value per row", Spelling::special, "", false},
    {OpKind::row_sum, "row_sum", 1, "sum of a's row (fp32; association unspecified); one value per row",
     Spelling::special, "", false},
    {OpKind::row_mean, "row_mean", 1, "row_sum(a) / N; one value per row", Spelling::special, "", false},
    {OpKind::add_scalar, "add_scalar", 1, "a + c, c a constant of the code (a norm's eps)", Spelling::special, "",
     false},
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
