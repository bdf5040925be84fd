#pragma once
// The names a spec body (ops/outputs, or a chain) refers to: the mainloop's
// accumulators, the declared inputs and the op values made so far. The naming
// rules themselves are src/ir/names.hpp's.
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "epifuse/spec.hpp"
#include "json/read.hpp"

namespace epifuse::schema {

class Scope {
 public:
  explicit Scope(KernelSpec& spec) : spec_(spec) {}
  Graph& graph() { return spec_.graph; }
  MainloopKind kind() const { return spec_.mainloop.kind; }

  /// Makes the accumulator leaves whose names are in `referenced` before any
  /// other node, in index order, as a C++ user typically builds a graph.
  void make_accumulators(const std::set<std::string, std::less<>>& referenced);
  /// Declares the inputs of object `inputs` (at `at`) in their written order,
  /// which is their binding order.
  void declare_inputs(const Json& inputs, const JsonPath& at);
  /// A declared input; invalid when there is none of that name.
  Value input(std::string_view name) const;
  /// An accumulator, input or op value. An accumulator name that this mainloop
  /// lacks fails at `at`; any other unknown name gives an invalid Value.
  Value lookup(std::string_view name, const JsonPath& at);
  /// Names op value `v`; `at` is the name's path and `definer` where it is
  /// defined (`ops[3]`), for later messages. Fails on a reserved or duplicate name.
  void define(const std::string& name, Value v, const JsonPath& at, std::string definer);
  /// Fails at the first input that no op or output reads.
  void check_inputs_used() const;

 private:
  KernelSpec& spec_;
  JsonPath inputs_at_;
  std::map<std::string, Value, std::less<>> values_;       // inputs and op values
  std::map<std::string, std::string, std::less<>> definer_;  // name -> "an input" / "ops[3]"
};

}  // namespace epifuse::schema
