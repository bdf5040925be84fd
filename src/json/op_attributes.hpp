#pragma once
// Op attributes in JSON: the scalar parameters written beside an op
// (dropout `p` and `rng`, scale `alpha`, cast `to`). Shared by the full form
// (`ops`) and the chain shorthand.
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "epifuse/graph.hpp"
#include "ir/op_table.hpp"
#include "json/read.hpp"

namespace epifuse::schema {

/// Reads a string naming an op (its JSON spelling); fails listing the known ops.
const OpInfo& read_op(const Json& v, const JsonPath& at);

/// The attribute keys `op` takes in JSON; empty for ops without attributes.
std::vector<std::string_view> attribute_keys(OpKind op);
/// The attribute a one-key chain element sets (`{"dropout": 0.1}` sets `p`);
/// empty when the op has none.
std::string_view primary_attribute(OpKind op);

/// The attributes of one op as read, each with the path it was read at.
class OpAttributes {
 public:
  /// Reads attribute `key` (one of attribute_keys(op)) from `value`, located at `at`.
  void read(OpKind op, std::string_view key, const Json& value, const JsonPath& at);
  /// Reads every attribute key present in op object `obj` (located at `at`).
  void read_all(OpKind op, const Json& obj, const JsonPath& at);
  /// Builds the op node on `args`. A missing required attribute fails at `where`;
  /// a value the builder rejects fails at the attribute's own path.
  Value apply(Graph& g, OpKind op, std::span<const Value> args, const JsonPath& where) const;

 private:
  std::optional<double> p_, alpha_;
  std::optional<RngMode> rng_;
  std::optional<DType> to_;
  JsonPath p_at_, alpha_at_;
};

}  // namespace epifuse::schema
