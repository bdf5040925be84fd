#pragma once
// The body of a spec: what is computed from the leaves. Either the full form
// (`ops` + `outputs`, ops.cpp) or the chain shorthand (`chain` + `out`, chain.cpp).
#include "json/read.hpp"
#include "json/scope.hpp"

namespace epifuse::schema {

/// Full form: array `ops` at `at`, each {"name", "op", "args", attributes...}.
void read_ops(Scope& scope, const Json& ops, const JsonPath& at);
/// Full form: object `outputs` at `at`, value name -> {"dtype", "value"?}.
void read_outputs(Scope& scope, const Json& outputs, const JsonPath& at);
/// Chain shorthand: desugars array `chain` at `at` into op nodes applied to the
/// mainloop's leaf and stores the result as output `y` in dtype `out`.
void read_chain(Scope& scope, const Json& chain, const JsonPath& at, DType out);

}  // namespace epifuse::schema
