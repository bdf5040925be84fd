#include "json/op_attributes.hpp"

#include "epifuse/errors.hpp"
#include "ir/names.hpp"
#include "ir/op_table.hpp"

namespace epifuse::schema {

const OpInfo& read_op(const Json& v, const JsonPath& at) {
  const std::string name = read_string(v, at);
  if (const OpInfo* info = find_op(name)) return *info;
  std::string known;
  for (const auto& info : op_table()) known += fmt::format("{}{}", known.empty() ? "" : ", ", info.name);
  fail(at, "unknown op '{}' (known ops: {})", names::excerpt(name), known);
}

std::vector<std::string_view> attribute_keys(OpKind op) {
  switch (op) {
    case OpKind::dropout: return {"p", "rng"};
    case OpKind::scale: return {"alpha"};
    case OpKind::cast: return {"to"};
    default: return {};
  }
}

std::string_view primary_attribute(OpKind op) {
  auto keys = attribute_keys(op);
  return keys.empty() ? std::string_view{} : keys.front();
}

void OpAttributes::read(OpKind op, std::string_view key, const Json& value, const JsonPath& at) {
  EPIFUSE_ASSERT(attribute_keys(op).size() > 0, "{} has no attributes", op_info(op).name);
  if (key == "p") {
    p_ = read_number(value, at);
    p_at_ = at;
  } else if (key == "rng") {
    rng_ = read_rng(value, at);
  } else if (key == "alpha") {
    alpha_ = read_number(value, at);
    alpha_at_ = at;
  } else if (key == "to") {
    to_ = read_dtype(value, at);
  } else {
    EPIFUSE_ASSERT(false, "unexpected attribute key '{}'", key);
  }
}

void OpAttributes::read_all(OpKind op, const Json& obj, const JsonPath& at) {
  for (auto key : attribute_keys(op))
    if (const Json* v = find(obj, key)) read(op, key, *v, at.key(key));
}

Value OpAttributes::apply(Graph& g, OpKind op, std::span<const Value> args,
                          const JsonPath& where) const {
  const auto& info = op_info(op);
  EPIFUSE_ASSERT(args.size() == static_cast<std::size_t>(info.arity), "arity of {}", info.name);
  switch (op) {
    // The builder's own check of an attribute, reported where it was written;
    // then the builder call, whose other failures (a limit) belong to the op.
    case OpKind::dropout:
      if (!p_) fail(where, "dropout needs the probability 'p' (a number in [0, 1])");
      at_path(p_at_, [&] { Graph::check_probability(*p_); });
      return at_path(where, [&] { return g.dropout(args[0], *p_, rng_.value_or(RngMode::philox4)); });
    case OpKind::scale:
      if (!alpha_) fail(where, "scale needs the factor 'alpha' (a finite number)");
      at_path(alpha_at_, [&] { Graph::check_alpha(*alpha_); });
      return at_path(where, [&] { return g.scale(args[0], *alpha_); });
    case OpKind::cast:
      if (!to_) fail(where, "cast needs the target dtype 'to'");
      return at_path(where, [&] { return g.cast(args[0], *to_); });
    default:
      if (info.arity == 2) return at_path(where, [&] { return g.binary(op, args[0], args[1]); });
      return at_path(where, [&] { return g.unary(op, args[0]); });
  }
}

}  // namespace epifuse::schema
