#pragma once
// What the families that write col_sum outputs share (Note [Column sums] in
// elementwise/elementwise.hpp, Note [GEMM column sums] in gemm/gemm.hpp):
// which outputs are sums, and the checks on what a kernel can write.
#include <string_view>
#include <vector>

#include "epifuse/spec.hpp"

namespace epifuse {

/// Whether `n` is a col_sum: an [N] value summed over the rows.
bool is_column_sum(const Node& n);
/// Whether `spec` has a col_sum output (a col_sum no output names is dead).
bool has_column_sums(const KernelSpec& spec);
/// How many outputs are col_sums.
int column_sum_count(const KernelSpec& spec);
/// The first col_sum output's node (nullptr when there is none).
const Node* first_column_sum(const KernelSpec& spec);
/// What a column-sum kernel's outputs are: `column_sum[k]` is true where
/// output k is a col_sum's [N] result (the kernel sums its operand), false
/// where it is a full [M,N] value. UserError, naming `family`, for what such a
/// kernel does not write: an output of another [N] or [M] value, or a col_sum
/// that an op reads.
std::vector<bool> column_sum_outputs(const KernelSpec& spec, std::string_view family = "elementwise");

}  // namespace epifuse
