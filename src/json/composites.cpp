#include "json/composites.hpp"

#include <array>

namespace epifuse::schema {

namespace {
// The eps defaults are PyTorch's where it has one: torch.nn.LayerNorm's 1e-5.
// torch's RMSNorm defaults to eps=None, meaning finfo(dtype).eps of the input;
// a spec has no input dtype of its own here, so rmsnorm takes the common fixed
// 1e-6 (LLaMA's) and a chain that must match torch exactly writes its eps.
constexpr std::array<CompositeInfo, 4> k_composites = {{
    {"softmax", 1, "exp(x - row_max(x)) / row_sum(exp(x - row_max(x)))", std::nullopt,
     [](Graph& g, std::span<const Value> a, double) { return g.softmax(a[0]); }},
    {"log_softmax", 1, "(x - m) - log(row_sum(exp(x - m))), m = row_max(x)", std::nullopt,
     [](Graph& g, std::span<const Value> a, double) { return g.log_softmax(a[0]); }},
    {"rmsnorm", 2, "x * rsqrt(row_mean(x*x) + eps) * weight", 1e-6,
     [](Graph& g, std::span<const Value> a, double eps) { return g.rmsnorm(a[0], a[1], eps); }},
    {"layernorm", 3, "(x - m) * rsqrt(row_mean((x-m)*(x-m)) + eps) * weight + bias, m = row_mean(x)", 1e-5,
     [](Graph& g, std::span<const Value> a, double eps) { return g.layernorm(a[0], a[1], a[2], eps); }},
}};
}  // namespace

std::span<const CompositeInfo> composite_table() { return k_composites; }

const CompositeInfo* find_composite(std::string_view name) {
  for (const auto& c : k_composites)
    if (c.name == name) return &c;
  return nullptr;
}

}  // namespace epifuse::schema
