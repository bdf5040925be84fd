#pragma once
// The kernel's parameter struct, laid out once: the same list of fields gives
// the struct's text in the generated source and the byte offsets the launch
// packs by role (KernelSource::params), so the two cannot disagree.
#include <string>
#include <vector>

#include "codegen/kernel_plan.hpp"
#include "epifuse/codegen.hpp"

namespace epifuse {

class ParamLayout {
 public:
  /// Appends a field `decl` (C declaration naming `name`) of `size` bytes at
  /// the next multiple of `align`.
  void add(ParamRole role, std::uint32_t index, std::string name, std::string decl, std::uint32_t size,
           std::uint32_t align);
  /// Pointer fields for every input and output of a plan's tensors, roles input/output.
  void add_pointer(ParamRole role, std::uint32_t index, const std::string& field, std::string_view type);
  /// Pointers to the graph's inputs (DeviceBindings::inputs from `first_input`
  /// on, after any mainloop operands) and outputs, in binding order.
  void add_graph_tensors(const KernelPlan& plan, std::uint32_t first_input);
  /// Note [Strided epilogue tensors]: `long long ld_<field>` for each strided
  /// full input (ParamRole::ld, index its binding: `first_input` + i) and
  /// output (ParamRole::output_ld); nothing for a dense tensor, whose rows lie N apart.
  void add_tensor_lds(const KernelPlan& plan, std::uint32_t first_input);
  /// The dropout seed and offset, then one float per scale node (alpha<k>).
  void add_rng_and_scalars(const KernelPlan& plan);
  /// The struct's fields, one per line, indented two spaces (no trailing newline).
  const std::string& fields_text() const { return text_; }
  /// Moves the fields and the struct's size (rounded up to its alignment) into `ks`.
  void finish(KernelSource& ks);

 private:
  std::vector<ParamField> fields_;
  std::string text_;
  std::uint32_t size_ = 0, align_ = 1;
};

}  // namespace epifuse
