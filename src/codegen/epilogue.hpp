#pragma once
// Note [One epilogue contract]
// The emitted chain is one device function, `<kernel>_epilogue(p, args...)`,
// the same text for every kernel family. Its arguments are the values the
// chain reads at one output element: leaves (graph inputs, mainloop
// accumulators), the element's dropout draws, and references to its outputs.
// EpilogueContract is the single ordered list of those arguments: the
// function's signature and every call site are generated from it, so they
// cannot disagree. A family says only where each value comes from at the
// element it is emitting, through a ValueProvider keyed by the argument (a
// loaded vector element, an mma.sync or wgmma fragment register, an MFMA/WMMA
// register, a Philox word): the chain itself never changes.
#include <functional>
#include <string>
#include <vector>

#include "codegen/kernel_plan.hpp"

namespace epifuse {

struct EpilogueArg {
  enum class Kind : std::uint8_t {
    accumulator,  ///< mainloop accumulator `index` (0: acc/acc0, 1: acc1), fp32
    input,        ///< plan.inputs[index], converted to fp32
    draw,         ///< the Philox draw of plan.dropouts[index] at this element (uint32)
    output,       ///< plan.outputs[index], written by the epilogue (float&)
  };
  Kind kind;
  std::uint32_t index;
  std::string param;  ///< the parameter's name inside the epilogue function
};

struct EpilogueContract {
  std::vector<EpilogueArg> args;  ///< accumulators, inputs, draws, outputs
};

EpilogueContract epilogue_contract(const KernelPlan& plan);

/// The parameter list after `const <kernel>_params& p`, from the contract.
std::string epilogue_signature(const KernelPlan& plan, const EpilogueContract& contract);
/// The body: straight-line SSA (`v<node>`), one line per op node, spelled
/// from the op table, then one assignment per output (a col_sum output gets
/// its operand: the term the kernel sums over the rows).
std::string epilogue_body(const KernelPlan& plan);

/// The expression of op node `id` over its operands `v<arg>`, as the body
/// spells it (the row family builds its stage functions from it).
std::string spell_op(const KernelPlan& plan, std::size_t id);

/// The expression a family passes for one argument at the element it emits.
using ValueProvider = std::function<std::string(const EpilogueArg&)>;
/// `<kernel>_epilogue(p, <provide(arg)>...)`, in the contract's order (no semicolon).
std::string epilogue_call(const KernelPlan& plan, const EpilogueContract& contract, const ValueProvider& provide);

}  // namespace epifuse
