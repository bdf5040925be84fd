// The registry of kernel families: one line per family (Note [Kernel families]).
#include <array>
#include <mutex>
#include <unordered_set>

#include <fmt/format.h>

#include "codegen/column_sums.hpp"
#include "codegen/family.hpp"
#include "epifuse/errors.hpp"
#include "ir/op_table.hpp"

namespace epifuse {

const KernelFamily& elementwise_family();
const KernelFamily& gemm_family();
const KernelFamily& dual_gemm_family();  // the GEMM family's code, two accumulators (docs/dual-gemm.md)
const KernelFamily& row_family();  // elementwise graphs with a row reduction (docs/row-reductions.md)

namespace {

// family_for(spec) asks each whether it generates the spec.
using FamilyGetter = const KernelFamily& (*)();
constexpr std::array<FamilyGetter, 4> k_families = {
    row_family,
    elementwise_family,
    gemm_family,
    dual_gemm_family,
};

}  // namespace

std::optional<TensorMap2d> KernelFamily::tensor_map(const ParamField& field, const OpaqueContext&) const {
  EPIFUSE_ASSERT(false, "the {} family declares opaque parameter '{}' but does not describe it", to_string(kind()),
                 field.name);
  return std::nullopt;
}

std::string tensor_ld_flags(const Shape& s) {
  std::string flags;
  for (std::size_t i = 0; i < s.ld_inputs.size(); ++i)
    if (input_strided(s, i)) flags += fmt::format("/ld_in{}", i);
  for (std::size_t j = 0; j < s.ld_outputs.size(); ++j)
    if (output_strided(s, j)) flags += fmt::format("/ld_out{}", j);
  return flags;
}

std::string_view interned_shape_class(std::string shape_class) {
  static std::mutex mutex;
  static std::unordered_set<std::string> classes;  // nodes: a view stays valid as the set grows
  const std::lock_guard lock(mutex);
  return *classes.insert(std::move(shape_class)).first;
}

const Node* row_reduction_of(const KernelSpec& spec) {
  for (const Node& n : spec.graph.nodes())
    if (n.kind == NodeKind::op && is_row_reduction(n.op)) return &n;
  return nullptr;
}

// Column sums and [N] or [M] outputs: the reference evaluator runs them
// anywhere; of the GPU families the elementwise and row families may (each
// checks what it generates), and a single GEMM's epilogue may sum columns on
// every GEMM mainloop (Note [GEMM column sums], gemm/gemm.hpp). A dual GEMM's
// epilogue does not.
static void check_family_shapes(const KernelSpec& spec) {
  if (spec.mainloop.kind == MainloopKind::elementwise) return;
  if (spec.mainloop.kind == MainloopKind::gemm && has_column_sums(spec)) {
    column_sum_outputs(spec, "gemm");
    return;
  }
  for (const Node& n : spec.graph.nodes())
    EPIFUSE_CHECK(!is_column_sum(n),
                  "col_sum{}: a {} epilogue does not sum columns (a single GEMM's does); the CPU "
                  "reference does (epifuse run --device cpu)",
                  n.name.empty() ? "" : fmt::format(" '{}'", n.name), to_string(spec.mainloop.kind));
  for (const Output& o : spec.graph.outputs()) {
    const Broadcast b = spec.graph.node(o.value).broadcast;
    EPIFUSE_CHECK(b == Broadcast::full, "output '{}' is a {} value ({}): a {} epilogue writes [M,N] outputs only; the "
                  "CPU reference writes those (epifuse run --device cpu)", o.name, to_string(b),
                  b == Broadcast::row ? "[N]" : "[M]", to_string(spec.mainloop.kind));
  }
}

const KernelFamily& family_for(const KernelSpec& spec) {
  check_family_shapes(spec);
  const Node* n = row_reduction_of(spec);
  // div_n reads the row family's 1/N; a chain without a row reduction has none.
  if (!n)
    for (const Node& d : spec.graph.nodes())
      EPIFUSE_CHECK(d.kind != NodeKind::op || d.op != OpKind::div_n,
                    "div_n{}: only a chain that reduces rows (the row family) divides by N on the GPU; the CPU "
                    "reference runs it anywhere", d.name.empty() ? "" : fmt::format(" '{}'", d.name));
  if (n)
    EPIFUSE_CHECK(spec.mainloop.kind == MainloopKind::elementwise,
                  "a {} mainloop cannot reduce rows ({}{}): a row reduction needs whole rows of the output in one "
                  "block; run the GEMM, then the reduction as an elementwise chain (docs/row-reductions.md)",
                  to_string(spec.mainloop.kind), op_info(n->op).name,
                  n->name.empty() ? "" : fmt::format(" '{}'", n->name));
  for (FamilyGetter get : k_families)
    if (get().generates(spec)) return get();
  return family_for(spec.mainloop.kind);  // UserError naming the families there are
}

const KernelFamily& family_for(MainloopKind kind) {
  std::string known;
  for (FamilyGetter get : k_families) {
    const KernelFamily& f = get();
    if (!f.by_kind()) continue;
    if (f.kind() == kind) return f;
    known += fmt::format("{}{}", known.empty() ? "" : ", ", to_string(f.kind()));
  }
  throw UserError(fmt::format("code generation for the {} mainloop is not implemented yet (kernel families: {})",
                              to_string(kind), known));
}

}  // namespace epifuse
