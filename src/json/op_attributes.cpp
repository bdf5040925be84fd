#include "json/op_attributes.hpp"

#include "epifuse/errors.hpp"
#include "ir/limits.hpp"
#include "ir/names.hpp"
#include "ir/op_table.hpp"

namespace epifuse::schema {

std::optional<JsonOp> find_json_op(std::string_view name) {
  if (const OpInfo* info = find_op(name)) return JsonOp{info, nullptr};
  if (const CompositeInfo* c = find_composite(name)) return JsonOp{nullptr, c};
  return std::nullopt;
}

JsonOp read_op(const Json& v, const JsonPath& at) {
  const std::string name = read_string(v, at);
  if (auto op = find_json_op(name)) return *op;
  std::string known;
  for (const auto& info : op_table()) known += fmt::format("{}{}", known.empty() ? "" : ", ", info.name);
  for (const auto& c : composite_table()) known += fmt::format(", {}", c.name);
  fail(at, "unknown op '{}' (known ops: {})", names::excerpt(name), known);
}

std::vector<std::string_view> attribute_keys(const JsonOp& op) {
  if (op.composite) return op.composite->default_eps ? std::vector<std::string_view>{"eps"}
                                                     : std::vector<std::string_view>{};
  switch (op.primitive->kind) {
    case OpKind::dropout: return {"p", "rng", "stream"};
    case OpKind::scale: return {"alpha"};
    case OpKind::cast: return {"to"};
    case OpKind::add_scalar: return {"c"};
    default: return {};
  }
}

std::string_view primary_attribute(const JsonOp& op) {
  if (op.composite) return {};  // its one-key value is its operands: {"rmsnorm": "weight"}
  auto keys = attribute_keys(op);
  return keys.empty() ? std::string_view{} : keys.front();
}

bool needs_attribute(const JsonOp& op) { return op.primitive && !primary_attribute(op).empty(); }

void OpAttributes::read(const JsonOp& op, std::string_view key, const Json& value, const JsonPath& at) {
  EPIFUSE_ASSERT(attribute_keys(op).size() > 0, "{} has no attributes", op.name());
  if (key == "p") {
    p_ = read_number(value, at);
    p_at_ = at;
  } else if (key == "rng") {
    rng_ = read_rng(value, at);
  } else if (key == "stream") {
    // An integer written as one, as shape dimensions are (4.0 is refused).
    if (!value.is_number_integer())
      fail(at, "a dropout stream is an integer in [0, {}), got {}", limits::k_max_dropouts, describe(value));
    stream_ = value.is_number_unsigned() && value.get<std::uint64_t>() > INT64_MAX ? INT64_MAX : value.get<std::int64_t>();
    stream_at_ = at;
  } else if (key == "alpha") {
    alpha_ = read_number(value, at);
    alpha_at_ = at;
  } else if (key == "to") {
    to_ = read_dtype(value, at);
  } else if (key == "c") {
    c_ = read_number(value, at);
    c_at_ = at;
  } else if (key == "eps") {
    eps_ = read_number(value, at);
    eps_at_ = at;
  } else {
    EPIFUSE_ASSERT(false, "unexpected attribute key '{}'", key);
  }
}

void OpAttributes::read_all(const JsonOp& op, const Json& obj, const JsonPath& at) {
  for (auto key : attribute_keys(op))
    if (const Json* v = find(obj, key)) read(op, key, *v, at.key(key));
}

Value OpAttributes::apply(Graph& g, const JsonOp& op, std::span<const Value> args, const JsonPath& where) const {
  EPIFUSE_ASSERT(args.size() == static_cast<std::size_t>(op.arity()), "arity of {}", op.name());
  if (op.primitive) return apply_primitive(g, op.primitive->kind, args, where);
  const CompositeInfo& c = *op.composite;
  double eps = 0.0;
  if (c.default_eps) {
    eps = eps_.value_or(*c.default_eps);
    if (eps_) at_path(eps_at_, [&] { Graph::check_eps(c.name, eps); });
  }
  return at_path(where, [&] { return c.build(g, args, eps); });
}

Value OpAttributes::apply_primitive(Graph& g, OpKind op, std::span<const Value> args,
                                    const JsonPath& where) const {
  const auto& info = op_info(op);
  switch (op) {
    // The builder's own check of an attribute, reported where it was written;
    // then the builder call, whose other failures (a limit) belong to the op.
    case OpKind::dropout:
      if (!p_) fail(where, "dropout needs the probability 'p' (a number in [0, 1])");
      at_path(p_at_, [&] { Graph::check_probability(*p_); });
      if (stream_) at_path(stream_at_, [&] { Graph::check_stream(*stream_); });
      return at_path(where, [&] {
        return g.dropout(args[0], *p_, rng_.value_or(RngMode::philox4),
                         stream_ ? std::optional<int>(static_cast<int>(*stream_)) : std::nullopt);
      });
    case OpKind::scale:
      if (!alpha_) fail(where, "scale needs the factor 'alpha' (a finite number)");
      at_path(alpha_at_, [&] { Graph::check_alpha(*alpha_); });
      return at_path(where, [&] { return g.scale(args[0], *alpha_); });
    case OpKind::add_scalar:
      if (!c_) fail(where, "add_scalar needs the constant 'c' (a finite number)");
      at_path(c_at_, [&] { Graph::check_constant(*c_); });
      return at_path(where, [&] { return g.add_scalar(args[0], *c_); });
    case OpKind::cast:
      if (!to_) fail(where, "cast needs the target dtype 'to'");
      return at_path(where, [&] { return g.cast(args[0], *to_); });
    default:
      if (info.arity == 2) return at_path(where, [&] { return g.binary(op, args[0], args[1]); });
      return at_path(where, [&] { return g.unary(op, args[0]); });
  }
}

}  // namespace epifuse::schema
