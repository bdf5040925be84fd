#pragma once
// Note [Overlapping bindings]. A launch writes its outputs while other threads
// still read its inputs: an output that shares memory with an input or with
// another output races, and the result depends on the order the GPU happens to
// run blocks in: wrong, and silently so. PyTorch refuses such an out=
// ("some elements of the input tensor and the written-to tensor refer to a
// single memory location"); so does the launch here, with both tensors named.
// What is allowed:
//   - inputs sharing memory with each other (they are only read);
//   - an output that is exactly a full [M,N] chain input (same start, ld and
//     element size): in place, as every family reads an element before
//     writing the one at its position and no other thread reads it;
//   - strided views with one row pitch whose columns do not meet (the column
//     blocks of one buffer, a fused QKV projection's output).
// Everything else that shares a byte is a UserError: an output over a GEMM
// operand (other tiles read it after this one writes), over a row, column or
// scalar input, over part of another tensor, or over another output.
#include <cstdint>
#include <string>
#include <vector>

#include "epifuse/jit.hpp"
#include "epifuse/spec.hpp"

namespace epifuse {

/// "" when a launch of `spec` at `shape` (not empty) with these bindings (in
/// the kernel's binding order: the GEMM operands, the graph's inputs, its
/// outputs) has no output sharing memory with an input or another output
/// except as allowed above; else the message, naming both tensors by
/// `input_names` and `output_names`.
std::string overlapping_bindings(const KernelSpec& spec, const Shape& shape, const DeviceBindings& b,
                                 const std::vector<std::string>& input_names,
                                 const std::vector<std::string>& output_names);

}  // namespace epifuse
