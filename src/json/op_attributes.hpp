#pragma once
// Ops in JSON: a row of the op table or a composite (composites.hpp), and the
// scalar attributes written beside an op (dropout `p` and `rng`, scale
// `alpha`, cast `to`, add_scalar `c`, a norm's `eps`). Shared by the full form
// (`ops`) and the chain shorthand.
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "epifuse/graph.hpp"
#include "ir/op_table.hpp"
#include "json/composites.hpp"
#include "json/read.hpp"

namespace epifuse::schema {

/// An op as JSON names it: exactly one of a primitive (an op-table row) or a
/// composite the builder desugars.
struct JsonOp {
  const OpInfo* primitive = nullptr;
  const CompositeInfo* composite = nullptr;
  std::string_view name() const { return primitive ? primitive->name : composite->name; }
  int arity() const { return primitive ? primitive->arity : composite->arity; }
};

/// The op JSON spells `name`; nullopt when there is none.
std::optional<JsonOp> find_json_op(std::string_view name);
/// Reads a string naming an op (its JSON spelling); fails listing the known ops.
JsonOp read_op(const Json& v, const JsonPath& at);

/// The attribute keys `op` takes in JSON; empty for ops without attributes.
std::vector<std::string_view> attribute_keys(const JsonOp& op);
/// The attribute a one-key chain element sets (`{"dropout": 0.1}` sets `p`);
/// empty when the op has none or its operands come first (rmsnorm's weight).
std::string_view primary_attribute(const JsonOp& op);
/// Whether the op cannot be built without an attribute (dropout's `p`, scale's
/// `alpha`, cast's `to`, add_scalar's `c`; a norm's `eps` has a default).
bool needs_attribute(const JsonOp& op);

/// The attributes of one op as read, each with the path it was read at.
class OpAttributes {
 public:
  /// Reads attribute `key` (one of attribute_keys(op)) from `value`, located at `at`.
  void read(const JsonOp& op, std::string_view key, const Json& value, const JsonPath& at);
  /// Reads every attribute key present in op object `obj` (located at `at`).
  void read_all(const JsonOp& op, const Json& obj, const JsonPath& at);
  /// Builds the op's nodes on `args`. A missing required attribute fails at
  /// `where`; a value the builder rejects fails at the attribute's own path.
  Value apply(Graph& g, const JsonOp& op, std::span<const Value> args, const JsonPath& where) const;

 private:
  Value apply_primitive(Graph& g, OpKind op, std::span<const Value> args, const JsonPath& where) const;

  std::optional<double> p_, alpha_, c_, eps_;
  std::optional<RngMode> rng_;
  std::optional<std::int64_t> stream_;
  std::optional<DType> to_;
  JsonPath p_at_, alpha_at_, c_at_, eps_at_, stream_at_;
};

}  // namespace epifuse::schema
