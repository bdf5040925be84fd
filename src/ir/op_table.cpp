#include "ir/op_table.hpp"

#include <array>

#include "epifuse/errors.hpp"

namespace epifuse {

namespace {
// Order follows OpKind so that op_info() is an index.
constexpr std::array<OpInfo, 14> k_ops = {{
    {OpKind::add, "add", 2, "a + b"},
    {OpKind::sub, "sub", 2, "a - b"},
    {OpKind::mul, "mul", 2, "a * b"},
    {OpKind::max, "max", 2, "fmaxf(a, b), NaN propagates"},
    {OpKind::min, "min", 2, "fminf(a, b), NaN propagates"},
    {OpKind::scale, "scale", 1, "alpha * a"},
    {OpKind::relu, "relu", 1, "max(a, 0), NaN propagates"},
    {OpKind::gelu_tanh, "gelu_tanh", 1, "0.5*a*(1+tanh(0.7978845608028654*(a+0.044715*a^3)))"},
    {OpKind::gelu_erf, "gelu_erf", 1, "0.5*a*(1+erf(a/sqrt(2)))"},
    {OpKind::sigmoid, "sigmoid", 1, "1/(1+exp(-a))"},
    {OpKind::silu, "silu", 1, "a/(1+exp(-a))"},
    {OpKind::tanh, "tanh", 1, "tanh(a)"},
    {OpKind::dropout, "dropout", 1, "keep(seed, offset, stream, i) ? a*scale : 0, scale = float(1/(1-p)) (DESIGN §4)"},
    {OpKind::cast, "cast", 1, "round a to dtype (nearest even), back to fp32"},
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
