#pragma once
/// Storage dtypes and broadcast kinds shared by the IR, the evaluator and codegen.
#include <cstddef>
#include <optional>
#include <string_view>

namespace epifuse {

/// Storage dtype of a tensor. Every op computes in fp32; values are rounded to
/// their storage dtype (round-to-nearest-even) once, at the store.
enum class DType { f32, f16, bf16 };

std::string_view to_string(DType);
std::optional<DType> parse_dtype(std::string_view);
std::size_t size_of(DType);

/// Shape class of a value in an [M,N] epilogue.
enum class Broadcast {
  full,    ///< [M,N]
  row,     ///< [N]: one value per column ("bias")
  col,     ///< [M]: one value per row
  scalar,  ///< one value
};

std::string_view to_string(Broadcast);
std::optional<Broadcast> parse_broadcast(std::string_view);

/// The shape class of the result of an elementwise op on values of classes a, b:
/// full if either is full or they are row and col, else the wider of the two.
Broadcast join(Broadcast a, Broadcast b);

enum class Layout { row, col };
std::string_view to_string(Layout);
std::optional<Layout> parse_layout(std::string_view);

}  // namespace epifuse
