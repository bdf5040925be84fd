#include "codegen/param_layout.hpp"

#include <fmt/format.h>

#include "epifuse/errors.hpp"
#include "ir/limits.hpp"

namespace epifuse {

void ParamLayout::add(ParamRole role, std::uint32_t index, std::string name, std::string decl, std::uint32_t size,
                      std::uint32_t align) {
  EPIFUSE_ASSERT(align && (align & (align - 1)) == 0, "alignment {} is not a power of two", align);
  const std::uint32_t offset = (size_ + align - 1) / align * align;
  fields_.push_back({role, index, offset, size, align, std::move(name)});
  size_ = offset + size;
  align_ = std::max(align_, align);
  if (!text_.empty()) text_ += '\n';
  text_ += align > 8 ? fmt::format("  alignas({}) {};", align, decl) : fmt::format("  {};", decl);
}

void ParamLayout::add_pointer(ParamRole role, std::uint32_t index, const std::string& field, std::string_view type) {
  const bool in = role == ParamRole::input;
  add(role, index, field, fmt::format("{}{}* {}", in ? "const " : "", type, field), 8, 8);
}

void ParamLayout::add_graph_tensors(const KernelPlan& plan, std::uint32_t first_input) {
  for (std::size_t k = 0; k < plan.inputs.size(); ++k)
    add_pointer(ParamRole::input, first_input + k, plan.inputs[k].field, storage_type_name(plan.inputs[k].dtype));
  for (std::size_t k = 0; k < plan.outputs.size(); ++k)
    add_pointer(ParamRole::output, k, plan.outputs[k].field, storage_type_name(plan.outputs[k].dtype));
}

void ParamLayout::add_tensor_lds(const KernelPlan& plan, std::uint32_t first_input) {
  for (std::size_t i = 0; i < plan.inputs.size(); ++i)
    if (plan.inputs[i].strided)
      add(ParamRole::ld, first_input + static_cast<std::uint32_t>(i), "ld_" + plan.inputs[i].field,
          fmt::format("long long ld_{}", plan.inputs[i].field), 8, 8);
  for (std::size_t j = 0; j < plan.outputs.size(); ++j)
    if (plan.outputs[j].strided)
      add(ParamRole::output_ld, static_cast<std::uint32_t>(j), "ld_" + plan.outputs[j].field,
          fmt::format("long long ld_{}", plan.outputs[j].field), 8, 8);
}

void ParamLayout::add_rng_and_scalars(const KernelPlan& plan) {
  add(ParamRole::seed, 0, "seed", "unsigned long long seed", 8, 8);
  add(ParamRole::offset, 0, "offset", "unsigned long long offset", 8, 8);
  // Note [Seeds on the device]: kernels that draw read seed and offset through it.
  if (!plan.dropouts.empty())
    add(ParamRole::rng_state, 0, "rng_state", "const unsigned long long* rng_state", 8, 8);
  for (std::size_t k = 0; k < plan.scales.size(); ++k)
    add(ParamRole::scalar, k, fmt::format("alpha{}", k), fmt::format("float alpha{}", k), 4, 4);
}

void ParamLayout::finish(KernelSource& ks) {
  ks.params_size = (size_ + align_ - 1) / align_ * align_;
  // The graph limits keep every kernel far inside the 4 KB parameter space of
  // older toolkits (ir/limits.hpp); this is the invariant they guarantee.
  EPIFUSE_ASSERT(ks.params_size <= limits::k_kernel_param_bytes, "parameter struct of {} bytes exceeds {}",
                 ks.params_size, limits::k_kernel_param_bytes);
  ks.params = std::move(fields_);
}

std::uint64_t n_magic(std::int64_t n) {
  EPIFUSE_ASSERT(n >= 1 && n < (std::int64_t{1} << 31), "n_magic: N = {} is outside [1, 2^31)", n);
  std::uint64_t l = 0;
  while ((std::int64_t{1} << l) < n) ++l;  // ceil(log2 n)
  const std::uint64_t d = static_cast<std::uint64_t>(n);
  const std::uint64_t m = ((std::uint64_t{1} << (31 + l)) + d - 1) / d;  // 2^(31+l) < 2^63
  return m | l << 32;
}

}  // namespace epifuse
