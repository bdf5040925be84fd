#include "epifuse/dtype.hpp"

namespace epifuse {

std::string_view to_string(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  if (s == "f32") return DType::f32;
  if (s == "f16") return DType::f16;
  if (s == "bf16") return DType::bf16;
  return std::nullopt;
}

std::size_t size_of(DType t) { return t == DType::f32 ? 4 : 2; }

std::string_view to_string(Broadcast b) {
  switch (b) {
    case Broadcast::full: return "full";
    case Broadcast::row: return "row";
    case Broadcast::col: return "col";
    case Broadcast::scalar: return "scalar";
  }
  return "?";
}

std::optional<Broadcast> parse_broadcast(std::string_view s) {
  if (s == "full") return Broadcast::full;
  if (s == "row") return Broadcast::row;
  if (s == "col") return Broadcast::col;
  if (s == "scalar") return Broadcast::scalar;
  return std::nullopt;
}

Broadcast join(Broadcast a, Broadcast b) {
  if (a == b) return a;
  if (a == Broadcast::scalar) return b;
  if (b == Broadcast::scalar) return a;
  return Broadcast::full;  // full with anything, or row with col
}

std::string_view to_string(Layout l) { return l == Layout::row ? "row" : "col"; }

std::optional<Layout> parse_layout(std::string_view s) {
  if (s == "row") return Layout::row;
  if (s == "col") return Layout::col;
  return std::nullopt;
}

}  // namespace epifuse
