#pragma once
// The rules for names, in one place: what an identifier is, and which names
// the mainloops reserve (their accumulator leaves and their GEMM operands).
// The IR builder, verify(KernelSpec), the JSON layer and the reference
// evaluator all ask here, so a rule cannot drift between them.
#include <array>
#include <cstddef>
#include <limits>
#include <span>
#include <optional>
#include <string>
#include <string_view>

#include "epifuse/spec.hpp"

namespace epifuse::names {

/// `[A-Za-z_][A-Za-z0-9_]*` of at most `max_length` characters. Names in a
/// graph use limits::k_max_name_length; JSON paths render any identifier key
/// bare (`inputs.bias`) whatever its length.
bool is_identifier(std::string_view s,
                   std::size_t max_length = std::numeric_limits<std::size_t>::max());

/// Whether `s` holds a control character: C0 (NUL included), DEL, or C1 as
/// UTF-8 (U+0080..U+009F). A terminal acts on these instead of showing them.
bool has_control(std::string_view s);
/// `s` with every control character (as has_control) written as `\xNN`, one
/// per byte, so that a user's string shown on a terminal cannot move the
/// cursor, recolour it or hide the rest of a line, and a NUL cannot cut a
/// message short (what() is a C string). Everything else is kept as it is.
std::string printable(std::string_view s);

/// What is wrong with a chain name, or nothing: a name is free text, but it is
/// printed, logged, passed on as a C string and written as JSON, so it holds no
/// control character (has_control) and is valid UTF-8. The message shows the
/// name (as excerpt does) only when it is UTF-8.
std::optional<std::string> chain_name_problem(std::string_view s);

/// Characters of a user's string shown in a message before it is cut.
inline constexpr std::size_t k_excerpt_length = 80;
/// `s` as a message shows it: whole up to k_excerpt_length characters, else
/// cut there with "..." appended, so that a 1 MB name never makes a 1 MB
/// message; control characters escaped as printable() does.
std::string excerpt(std::string_view s);

// Accumulator leaves: gemm has `acc`, dual_gemm `acc0` and `acc1` (index 0, 1).
inline constexpr std::array<std::string_view, 1> k_gemm_accumulators = {"acc"};
inline constexpr std::array<std::string_view, 2> k_dual_gemm_accumulators = {"acc0", "acc1"};
/// For messages.
inline constexpr std::string_view k_accumulator_list = "acc, acc0, acc1";

/// The accumulator leaves of a mainloop, by index; none for elementwise.
constexpr std::span<const std::string_view> accumulator_names(MainloopKind kind) {
  switch (kind) {
    case MainloopKind::elementwise: break;
    case MainloopKind::gemm: return k_gemm_accumulators;
    case MainloopKind::dual_gemm: return k_dual_gemm_accumulators;
  }
  return {};
}

/// The name of accumulator `index` (0 or 1) in a mainloop of `kind`: `acc`
/// in gemm, `acc0`/`acc1` in dual_gemm. An index the kind lacks (a spec that
/// verify() rejects, being printed) takes its dual_gemm name.
constexpr std::string_view accumulator_name(MainloopKind kind, int index) {
  const auto leaves = accumulator_names(kind);
  if (index >= 0 && static_cast<std::size_t>(index) < leaves.size()) return leaves[index];
  if (index == 0 && kind != MainloopKind::dual_gemm) return k_gemm_accumulators[0];
  return k_dual_gemm_accumulators[index == 0 ? 0 : 1];
}

/// `acc`, `acc0` or `acc1`: reserved in every mainloop kind (no input or op
/// value may take one), so a chain cannot change meaning with its mainloop.
constexpr bool is_accumulator_name(std::string_view name) {
  for (auto kind : {MainloopKind::gemm, MainloopKind::dual_gemm})
    for (std::string_view reserved : accumulator_names(kind))
      if (name == reserved) return true;
  return false;
}

// GEMM operands, bound by these names at launch in this order: gemm a [M,K],
// b [K,N]; dual_gemm a, b0, b1.
inline constexpr std::array<std::string_view, 2> k_gemm_operands = {"a", "b"};
inline constexpr std::array<std::string_view, 3> k_dual_gemm_operands = {"a", "b0", "b1"};
/// For messages.
inline constexpr std::string_view k_gemm_operand_list = "a, b, b0, b1";

/// The GEMM operands a mainloop binds, in binding order; none for elementwise.
constexpr std::span<const std::string_view> gemm_operand_names(MainloopKind kind) {
  switch (kind) {
    case MainloopKind::elementwise: break;
    case MainloopKind::gemm: return k_gemm_operands;
    case MainloopKind::dual_gemm: return k_dual_gemm_operands;
  }
  return {};
}

/// `a`, `b`, `b0` or `b1`: taken by the operands in both gemm kinds, so no
/// input of a gemm or dual_gemm kernel may have one of these names.
constexpr bool is_gemm_operand_name(std::string_view name) {
  for (auto kind : {MainloopKind::gemm, MainloopKind::dual_gemm})
    for (std::string_view taken : gemm_operand_names(kind))
      if (name == taken) return true;
  return false;
}

}  // namespace epifuse::names
