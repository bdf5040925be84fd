// The C ABI (include/epifuse/c_api.h, docs/python.md): thin wrappers that turn
// C arguments into the C++ API's types and its exceptions into status codes.
// Nothing here decides anything the C++ API does not: a builder call checks what
// Graph checks, a JSON spec is read by the JSON front end, an evaluation is the
// CPU reference's. This file holds the specs (building, JSON, gradients,
// bindings, evaluation); c_api_jit.cpp compiles and launches them, and
// src/capi/handles.hpp is what both share.
#include "epifuse/c_api.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "capi/handles.hpp"
#include "epifuse/autodiff.hpp"
#include "epifuse/dgrad.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/json.hpp"
#include "epifuse/reference.hpp"
#include "ir/limits.hpp"
#include "ir/names.hpp"
#include "json/op_attributes.hpp"
#include "json/read.hpp"
#include "json/structure_check.hpp"

// Note [One spec, many threads]
// A spec is shared by whoever holds its handle, and Python threads call the
// builder, to_json and a compiled callable on one chain at once. Builder calls
// take the mutex exclusively; calls that only read it (verify, to_json) take it
// shared. Calls that do real work on a spec (bindings, evaluate, compile) copy
// it under a shared lock and work on the copy unlocked, so a long evaluation
// never holds up the builder and never sees a graph that grows under it.
// (ef_spec and snapshot: src/capi/handles.hpp.)

namespace {

using namespace epifuse;
using namespace epifuse::capi;

// A JSON fragment of a builder call (an op's attributes, a mainloop), read as the
// CLI reads a whole chain: the same structural limits and the same refusal of a
// repeated key (StructureCheck), and a number that overflows a double (1e999)
// refused as bad input, not reported as a bug.
Json parse_fragment(const char* text, const std::string& what) {
  const std::string_view t(text);
  EPIFUSE_CHECK(t.size() <= limits::k_max_chain_bytes, "{}: {} bytes of JSON, more than the limit of {}", what,
                t.size(), limits::k_max_chain_bytes);
  schema::StructureCheck check;
  try {
    return Json::parse(t.begin(), t.end(),
                       [&check](int depth, Json::parse_event_t event, Json& parsed) { return check(depth, event, parsed); });
  } catch (const Json::parse_error& e) {
    throw UserError(fmt::format("{}: not JSON: {}", what, e.what()));
  } catch (const Json::exception& e) {
    throw UserError(fmt::format("{}: {} (a number must be a finite double)", what, e.what()));
  } catch (const UserError& e) {
    throw UserError(fmt::format("{}: {}", what, e.what()));
  }
}

DType read_dtype(const char* text, const std::string& what) {
  require(text, "dtype");
  const std::optional<DType> d = parse_dtype(text);
  EPIFUSE_CHECK(d, "{}: unknown dtype '{}' (expected f32, f16 or bf16)", what, text);
  return *d;
}

// The caller holds s->mutex.
Value read_value(const ef_spec* s, std::uint32_t id, const std::string& what) {
  EPIFUSE_CHECK(id < s->spec.graph.nodes().size(), "{}: no value with id {} in this spec", what, id);
  return Value{id};
}

Json tensor_json(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape) {
  return {{"name", name}, {"dtype", std::string(to_string(dtype))}, {"shape", shape}};
}

}  // namespace

extern "C" {

const char* ef_version(void) { return EPIFUSE_VERSION; }
const char* ef_last_error(void) { return last_error.c_str(); }
void ef_string_free(char* s) { std::free(s); }

int ef_spec_from_json(const char* text, const char* source, ef_spec** out) {
  return guarded([&] {
    require(text, "text");
    require(out, "out");
    *out = new ef_spec{spec_from_json_text(text, source ? source : "<json>")};
  });
}

int ef_spec_from_json_bytes(const char* data, std::size_t size, const char* source, ef_spec** out) {
  return guarded([&] {
    require_array(data, size, "data");
    require(out, "out");
    // The CLI's own reader after the file is read (size limit, NUL bytes, syntax,
    // structure, repeated keys), so the rules for a chain cannot drift apart.
    const std::string_view text = size == 0 ? std::string_view() : std::string_view(data, size);
    *out = new ef_spec{spec_from_json_text(text, source ? source : "<json>")};
  });
}

std::size_t ef_spec_json_limit(void) { return limits::k_max_chain_bytes; }

int ef_spec_clone(const ef_spec* spec, ef_spec** out) {
  return guarded([&] {
    require(spec, "spec");
    require(out, "out");
    *out = new ef_spec{snapshot(spec)};
  });
}

int ef_spec_new(const char* name, const char* mainloop_json, ef_spec** out) {
  return guarded([&] {
    require(out, "out");
    auto s = std::make_unique<ef_spec>();
    if (name) {
      // The JSON reader's rule (names::chain_name_problem).
      if (const std::optional<std::string> problem = names::chain_name_problem(name)) throw UserError(*problem);
      s->spec.name = name;
    }
    if (mainloop_json && *mainloop_json) {
      const Json v = parse_fragment(mainloop_json, "mainloop");
      s->spec.mainloop = schema::read_mainloop(v, schema::JsonPath().key("mainloop"));
    }
    *out = s.release();
  });
}

void ef_spec_free(ef_spec* spec) { delete spec; }

int ef_spec_input(ef_spec* spec, const char* name, const char* dtype, const char* broadcast, std::uint32_t* value) {
  return guarded([&] {
    require(spec, "spec");
    require(name, "name");
    require(value, "value");
    const std::string what = fmt::format("input '{}'", name);
    Broadcast b = Broadcast::full;
    if (broadcast && *broadcast) {
      const std::optional<Broadcast> parsed = parse_broadcast(broadcast);
      EPIFUSE_CHECK(parsed, "{}: unknown broadcast '{}' (expected full, row, col or scalar)", what, broadcast);
      b = *parsed;
    }
    const DType d = read_dtype(dtype, what);
    std::unique_lock lock(spec->mutex);
    *value = spec->spec.graph.input(name, d, b).id;
  });
}

int ef_spec_set_differentiable(ef_spec* spec, std::uint32_t value, int differentiable) {
  return guarded([&] {
    require(spec, "spec");
    std::unique_lock lock(spec->mutex);
    spec->spec.graph.set_differentiable(Value{value}, differentiable != 0);
  });
}

int ef_spec_accumulator(ef_spec* spec, int index, std::uint32_t* value) {
  return guarded([&] {
    require(spec, "spec");
    require(value, "value");
    std::unique_lock lock(spec->mutex);
    *value = spec->spec.graph.accumulator(index).id;
  });
}

int ef_spec_op(ef_spec* spec, const char* op, const std::uint32_t* args, std::size_t nargs,
               const char* attributes_json, std::uint32_t* value) {
  return guarded([&] {
    require(spec, "spec");
    require(op, "op");
    require(value, "value");
    const std::optional<schema::JsonOp> found = schema::find_json_op(op);
    EPIFUSE_CHECK(found, "unknown op '{}'", op);
    const schema::JsonOp& o = *found;
    EPIFUSE_CHECK(nargs == static_cast<std::size_t>(o.arity()), "{} takes {} operand(s), got {}", o.name(),
                  o.arity(), nargs);
    require_array(args, nargs, "args");
    const schema::JsonPath at = schema::JsonPath().key(o.name());
    schema::OpAttributes attributes;
    if (attributes_json && *attributes_json) {
      const Json obj = parse_fragment(attributes_json, fmt::format("{}: attributes", o.name()));
      EPIFUSE_CHECK(obj.is_object(), "{}: attributes must be a JSON object", o.name());
      const std::vector<std::string_view> keys = schema::attribute_keys(o);
      for (const auto& [key, v] : obj.items())
        EPIFUSE_CHECK(std::find(keys.begin(), keys.end(), key) != keys.end(), "{}: unknown attribute '{}'{}", o.name(),
                      key, keys.empty() ? " (it takes none)" : fmt::format(" (it takes {})", fmt::join(keys, ", ")));
      attributes.read_all(o, obj, at);
    }
    std::unique_lock lock(spec->mutex);
    std::vector<Value> operands;
    for (std::size_t i = 0; i < nargs; ++i)
      operands.push_back(read_value(spec, args[i], fmt::format("{} operand {}", o.name(), i)));
    *value = attributes.apply(spec->spec.graph, o, operands, at).id;
  });
}

int ef_spec_output(ef_spec* spec, const char* name, std::uint32_t value, const char* dtype) {
  return guarded([&] {
    require(spec, "spec");
    require(name, "name");
    const std::string what = fmt::format("output '{}'", name);
    const DType d = read_dtype(dtype, what);
    std::unique_lock lock(spec->mutex);
    spec->spec.graph.output(name, read_value(spec, value, what), d);
  });
}

int ef_spec_set_precision(ef_spec* spec, const char* precision) {
  return guarded([&] {
    require(spec, "spec");
    require(precision, "precision");
    const std::string p = precision;
    EPIFUSE_CHECK(p == "accurate" || p == "fast", "precision: expected \"accurate\" or \"fast\", got '{}'", p);
    std::unique_lock lock(spec->mutex);
    spec->spec.precision = p == "fast" ? Precision::fast : Precision::accurate;
  });
}

int ef_spec_verify(const ef_spec* spec) {
  return guarded([&] {
    require(spec, "spec");
    std::shared_lock lock(spec->mutex);
    verify(spec->spec);
  });
}

int ef_spec_to_json(const ef_spec* spec, char** out) {
  return guarded([&] {
    require(spec, "spec");
    require(out, "out");
    std::string text;
    {
      std::shared_lock lock(spec->mutex);
      text = spec_to_json(spec->spec).dump(2);
    }
    *out = c_string(text);
  });
}

int ef_spec_grad(const ef_spec* spec, const char* wrt_json, ef_spec** forward, ef_spec** backward, char** info) {
  return guarded([&] {
    require(spec, "spec");
    require(forward, "forward");
    require(backward, "backward");
    require(info, "info");
    GradOptions options;
    if (wrt_json && *wrt_json) {
      const Json v = parse_fragment(wrt_json, "wrt");
      if (!v.is_array()) throw UserError(fmt::format("wrt: a JSON array of input names, got {}", schema::describe(v)));
      for (const Json& name : v) {
        if (!name.is_string()) throw UserError(fmt::format("wrt: names are strings, got {}", schema::describe(name)));
        options.wrt.push_back(name.get<std::string>());
      }
    }
    GradResult r = grad(snapshot(spec), options);
    Json doc = {{"wrt", r.wrt}, {"saved", Json::array()}};
    for (const SavedTensor& t : r.saved) doc["saved"].push_back({{"name", t.name}, {"kind", t.kind}, {"of", t.of}});
    auto f = std::make_unique<ef_spec>();
    f->spec = std::move(r.forward);
    auto b = std::make_unique<ef_spec>();
    b->spec = std::move(r.backward);
    *info = c_string(doc.dump());
    *forward = f.release();
    *backward = b.release();
  });
}

int ef_spec_as_gemm_epilogue(const ef_spec* backward, const char* upstream, const char* mainloop_json, ef_spec** out) {
  return guarded([&] {
    require(backward, "backward");
    require(upstream, "upstream");
    require(mainloop_json, "mainloop_json");
    require(out, "out");
    const Json v = parse_fragment(mainloop_json, "mainloop");
    const Mainloop gemm = schema::read_mainloop(v, schema::JsonPath().key("mainloop"));
    auto s = std::make_unique<ef_spec>();
    s->spec = as_gemm_epilogue(snapshot(backward), upstream, gemm);
    // Refused here rather than at its first compile: an input the GEMM chain
    // cannot take (named a or b) makes a spec that can never run.
    verify(s->spec);
    *out = s.release();
  });
}

int ef_spec_bindings(const ef_spec* spec, std::int64_t m, std::int64_t n, std::int64_t k, char** out) {
  return guarded([&] {
    require(spec, "spec");
    require(out, "out");
    const KernelSpec s = snapshot(spec);
    verify(s);
    const Shape shape = make_shape(s, m, n, k);
    Json doc = {{"inputs", Json::array()}, {"outputs", Json::array()}};
    for (const OperandDesc& d : required_inputs(s, shape))
      doc["inputs"].push_back(tensor_json(d.name, d.dtype, d.shape));
    for (const Output& o : s.graph.outputs()) {
      const Broadcast b = s.graph.node(o.value).broadcast;
      Json t = tensor_json(o.name, o.dtype, operand_shape(b, shape));
      t["broadcast"] = to_string(b);
      doc["outputs"].push_back(std::move(t));
    }
    *out = c_string(doc.dump());
  });
}

int ef_evaluate(const ef_spec* spec, std::int64_t m, std::int64_t n, std::int64_t k, const char* const* input_names,
                const void* const* inputs, std::size_t ninputs, const char* const* output_names, void* const* outputs,
                std::size_t noutputs, std::uint64_t seed, std::uint64_t offset) {
  return guarded([&] {
    require(spec, "spec");
    require_array(input_names, ninputs, "input_names");
    require_array(inputs, ninputs, "inputs");
    require_array(output_names, noutputs, "output_names");
    require_array(outputs, noutputs, "outputs");
    const KernelSpec s = snapshot(spec);
    verify(s);
    const Shape shape = make_shape(s, m, n, k);
    const std::vector<OperandDesc> wanted = required_inputs(s, shape);
    TensorMap host;
    for (std::size_t i = 0; i < ninputs; ++i) {
      require(input_names[i], "input name");
      require(inputs[i], "input pointer");
      const auto d = std::find_if(wanted.begin(), wanted.end(), [&](const OperandDesc& w) { return w.name == input_names[i]; });
      EPIFUSE_CHECK(d != wanted.end(), "'{}' is not an input of this spec", input_names[i]);
      // A second binding of one name would be dropped without a word: which
      // array the caller meant is not ours to guess.
      EPIFUSE_CHECK(!host.count(d->name), "input '{}' is given twice", d->name);
      HostTensor t = HostTensor::zeros(d->dtype, d->shape);
      std::memcpy(t.bytes.data(), inputs[i], t.bytes.size());
      host.emplace(d->name, std::move(t));
    }
    for (std::size_t i = 0; i < noutputs; ++i) {
      require(output_names[i], "output name");
      require(outputs[i], "output pointer");
      for (std::size_t j = 0; j < i; ++j)
        EPIFUSE_CHECK(std::strcmp(output_names[i], output_names[j]) != 0, "output '{}' is asked for twice",
                      output_names[i]);
    }
    const TensorMap result = evaluate(s, shape, host, LaunchArgs{seed, offset});
    for (std::size_t i = 0; i < noutputs; ++i) {
      const auto it = result.find(output_names[i]);
      EPIFUSE_CHECK(it != result.end(), "'{}' is not an output of this spec", output_names[i]);
      std::memcpy(outputs[i], it->second.bytes.data(), it->second.bytes.size());
    }
  });
}

}  // extern "C"
