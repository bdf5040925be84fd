// libFuzzer target over the C ABI (include/epifuse/c_api.h), the entry points
// the Python module calls (docs/fuzzing.md). Every call must answer EF_OK or
// EF_USER_ERROR: anything else (an internal error, a "bug in epifuse" message,
// a sanitizer report) aborts, and libFuzzer saves the input as a crash.
//
// The first byte picks what the rest is:
//   any byte but \x01 and \x02: the whole input is a chain file's bytes, read as
//     epifuse.load reads a file (ef_spec_from_json_bytes: size, NUL and syntax
//     checks, the schema, the builder). An accepted chain is written back, read
//     again, cloned, and evaluated on the CPU reference at a small shape on
//     deterministic data, as a NumPy call would run it; then differentiated, and
//     its backward made a GEMM's epilogue (ef_spec_as_gemm_epilogue);
//   \x01: builder calls, one a line. Line 1 is the chain's name, line 2 its
//     mainloop (JSON, may be empty); then `input NAME DTYPE BROADCAST`,
//     `acc INDEX`, `output NAME ID DTYPE`, `nograd ID`, `precision P`, or
//     `OP ID,ID,... ATTRIBUTES-JSON` (ef_spec_op). The result is evaluated as above;
//   \x02: NULL arrays with non-zero counts, and counts that disagree with the
//     chain, at every entry that takes an array.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "epifuse/c_api.h"

namespace {

using Json = nlohmann::json;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_c_api: %s\n", what.c_str());
  std::abort();
}

// EF_OK or EF_USER_ERROR are answers; anything else is a bug.
bool ok(int status, const char* call) {
  const std::string message = ef_last_error();
  if (status != EF_OK && status != EF_USER_ERROR) fail(std::string(call) + " returned " + std::to_string(status) + ": " + message);
  // Internal errors open with these words; a user error may quote them from the input.
  if (message.starts_with("internal error (a bug") || message.starts_with("unexpected error (a bug"))
    fail(std::string(call) + ": " + message);
  return status == EF_OK;
}

std::optional<std::string> take(int status, char* s, const char* call) {
  if (!ok(status, call)) return std::nullopt;
  std::string out = s;
  ef_string_free(s);
  return out;
}

// A deterministic value of an element: non-zero, small, of either sign.
float value_at(std::size_t i) { return static_cast<float>(static_cast<int>(i % 13) - 6) * 0.25f + 0.125f; }

std::uint16_t to_half_bits(float f, const std::string& dtype) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if (dtype == "bf16") return static_cast<std::uint16_t>(u >> 16);  // exact for value_at's values
  // f16 of value_at's values (|v| <= 1.625, multiples of 1/8): exact.
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const int exp = static_cast<int>((u >> 23) & 0xFF) - 127 + 15;
  const std::uint32_t mant = (u >> 13) & 0x3FFu;
  return static_cast<std::uint16_t>(sign | (static_cast<std::uint32_t>(exp) << 10) | mant);
}

void exercise(ef_spec* spec, std::uint32_t salt, bool differentiate = true);

// The backward as a GEMM's epilogue (ef_spec_as_gemm_epilogue), one of its inputs
// (picked by salt) as the upstream gradient, B row- or column-major: a UserError,
// or a spec that verifies and goes through exercise's steps.
void exercise_dgrad(const ef_spec* backward, std::uint32_t salt) {
  char* text = nullptr;
  const std::optional<std::string> json = take(ef_spec_to_json(backward, &text), text, "ef_spec_to_json(backward)");
  if (!json) return;
  const Json doc = Json::parse(*json);
  const auto inputs = doc.find("inputs");
  if (inputs == doc.end() || !inputs->is_object() || inputs->empty()) return;
  auto upstream = inputs->begin();
  std::advance(upstream, static_cast<std::ptrdiff_t>(salt % inputs->size()));
  const char* mainloop = salt & 1 ? R"({"kind": "gemm", "a": "f32", "b": "f32", "b_layout": "col"})"
                                  : R"({"kind": "gemm", "a": "bf16", "b": "bf16", "b_layout": "row"})";
  ef_spec* dgrad = nullptr;
  if (!ok(ef_spec_as_gemm_epilogue(backward, upstream.key().c_str(), mainloop, &dgrad), "ef_spec_as_gemm_epilogue"))
    return;
  if (!ok(ef_spec_verify(dgrad), "ef_spec_verify(dgrad)"))
    fail(std::string("as_gemm_epilogue gave a spec that does not verify: ") + ef_last_error());
  exercise(dgrad, salt, false);
  ef_spec_free(dgrad);
}

// The spec written back, read again, cloned, its bindings at a small shape, and
// evaluated on the CPU reference with every input and output given.
void exercise(ef_spec* spec, std::uint32_t salt, bool differentiate) {
  char* text = nullptr;
  const std::optional<std::string> json = take(ef_spec_to_json(spec, &text), text, "ef_spec_to_json");
  // A chain in the making (no output yet, say) prints as JSON but is no chain
  // file: the round trip is a promise for chains that verify.
  if (!json || !ok(ef_spec_verify(spec), "ef_spec_verify")) return;
  ef_spec* again = nullptr;
  if (!ok(ef_spec_from_json_bytes(json->data(), json->size(), "<written>", &again), "ef_spec_from_json_bytes(written)"))
    fail("a chain epifuse wrote does not read back: " + std::string(ef_last_error()) + "\n" + *json);
  ef_spec_free(again);
  ef_spec* copy = nullptr;
  if (!ok(ef_spec_clone(spec, &copy), "ef_spec_clone")) fail("clone refused");

  const std::int64_t m = 1 + salt % 5, n = 1 + (salt / 5) % 9, k = 1 + (salt / 45) % 7;
  char* b = nullptr;
  const std::optional<std::string> bindings = take(ef_spec_bindings(copy, m, n, k, &b), b, "ef_spec_bindings");
  if (bindings) {
    const Json doc = Json::parse(*bindings);
    std::vector<std::vector<unsigned char>> in_bytes, out_bytes;
    std::vector<std::string> in_names, out_names;
    auto bytes_of = [](const Json& t) {
      std::size_t count = 1;
      for (const Json& d : t["shape"]) count *= d.get<std::size_t>();
      return std::pair{count, t["dtype"].get<std::string>() == "f32" ? 4u : 2u};
    };
    for (const Json& t : doc["inputs"]) {
      const auto [count, size] = bytes_of(t);
      std::vector<unsigned char> bytes(count * size);
      for (std::size_t i = 0; i < count; ++i) {
        const float v = value_at(i + salt);
        if (size == 4) {
          std::memcpy(&bytes[i * 4], &v, 4);
        } else {
          const std::uint16_t h = to_half_bits(v, t["dtype"].get<std::string>());
          std::memcpy(&bytes[i * 2], &h, 2);
        }
      }
      in_names.push_back(t["name"].get<std::string>());
      in_bytes.push_back(std::move(bytes));
    }
    for (const Json& t : doc["outputs"]) {
      const auto [count, size] = bytes_of(t);
      out_names.push_back(t["name"].get<std::string>());
      out_bytes.emplace_back(count * size);
    }
    std::vector<const char*> in_n, out_n;
    std::vector<const void*> in_p;
    std::vector<void*> out_p;
    for (std::size_t i = 0; i < in_names.size(); ++i) in_n.push_back(in_names[i].c_str()), in_p.push_back(in_bytes[i].data());
    for (std::size_t i = 0; i < out_names.size(); ++i) out_n.push_back(out_names[i].c_str()), out_p.push_back(out_bytes[i].data());
    // An empty vector's data() may be NULL with a count of 0: allowed.
    ok(ef_evaluate(copy, m, n, k, in_n.data(), in_p.data(), in_n.size(), out_n.data(), out_p.data(), out_n.size(),
                   salt, salt >> 3),
       "ef_evaluate");
  }
  ef_spec_free(copy);
  // grad: a UserError, or a forward and a backward that verify and go through
  // all of the above themselves (once: the backward is not differentiated again),
  // and the backward's dgrad chain likewise.
  if (!differentiate) return;
  ef_spec *forward = nullptr, *backward = nullptr;
  char* info = nullptr;
  if (!ok(ef_spec_grad(spec, nullptr, &forward, &backward, &info), "ef_spec_grad")) return;
  ef_string_free(info);
  if (!ok(ef_spec_verify(forward), "ef_spec_verify(forward)") || !ok(ef_spec_verify(backward), "ef_spec_verify(backward)"))
    fail(std::string("grad gave a spec that does not verify: ") + ef_last_error());
  exercise(forward, salt, false);
  exercise(backward, salt, false);
  exercise_dgrad(backward, salt);
  ef_spec_free(forward);
  ef_spec_free(backward);
}

std::vector<std::string_view> lines_of(std::string_view s) {
  std::vector<std::string_view> out;
  while (!s.empty()) {
    const std::size_t nl = s.find('\n');
    out.push_back(s.substr(0, nl));
    if (nl == std::string_view::npos) break;
    s.remove_prefix(nl + 1);
  }
  return out;
}

std::vector<std::string> words_of(std::string_view line, std::size_t max_words) {
  std::vector<std::string> out;
  while (!line.empty() && out.size() + 1 < max_words) {
    const std::size_t sp = line.find(' ');
    if (sp == std::string_view::npos) break;
    out.emplace_back(line.substr(0, sp));
    line.remove_prefix(sp + 1);
  }
  out.emplace_back(line);  // the rest, spaces included (attributes JSON)
  return out;
}

std::uint32_t number(const std::string& s) { return static_cast<std::uint32_t>(std::strtoul(s.c_str(), nullptr, 10)); }

// C strings stop at a NUL; the builder's text is cut there, as a C caller's would be.
std::string c_text(std::string_view s) { return std::string(s.substr(0, s.find('\0'))); }

void builder(std::string_view body, std::uint32_t salt) {
  const std::vector<std::string_view> lines = lines_of(body);
  const std::string name = lines.empty() ? "" : c_text(lines[0]);
  const std::string mainloop = lines.size() < 2 ? "" : c_text(lines[1]);
  ef_spec* spec = nullptr;
  if (!ok(ef_spec_new(name.c_str(), mainloop.empty() ? nullptr : mainloop.c_str(), &spec), "ef_spec_new")) return;
  std::uint32_t last = 0;
  for (std::size_t i = 2; i < lines.size() && i < 64; ++i) {
    const std::vector<std::string> w = words_of(c_text(lines[i]), 4);
    std::uint32_t v = 0;
    if (w[0] == "input" && w.size() >= 3) {
      if (ok(ef_spec_input(spec, w[1].c_str(), w[2].c_str(), w.size() > 3 ? w[3].c_str() : nullptr, &v), "ef_spec_input"))
        last = v;
    } else if (w[0] == "acc" && w.size() >= 2) {
      if (ok(ef_spec_accumulator(spec, static_cast<int>(number(w[1])), &v), "ef_spec_accumulator")) last = v;
    } else if (w[0] == "output" && w.size() >= 4) {
      ok(ef_spec_output(spec, w[1].c_str(), number(w[2]), w[3].c_str()), "ef_spec_output");
    } else if (w[0] == "nograd" && w.size() >= 2) {
      ok(ef_spec_set_differentiable(spec, number(w[1]), 0), "ef_spec_set_differentiable");
    } else if (w[0] == "precision" && w.size() >= 2) {
      ok(ef_spec_set_precision(spec, w[1].c_str()), "ef_spec_set_precision");
    } else {
      const std::vector<std::string> op = words_of(c_text(lines[i]), 3);
      std::vector<std::uint32_t> args;
      if (op.size() >= 2) {
        std::string_view ids = op[1];
        while (!ids.empty() && args.size() < 8) {
          const std::size_t comma = ids.find(',');
          args.push_back(number(std::string(ids.substr(0, comma))));
          if (comma == std::string_view::npos) break;
          ids.remove_prefix(comma + 1);
        }
      }
      const char* attributes = op.size() >= 3 ? op[2].c_str() : nullptr;
      if (ok(ef_spec_op(spec, op[0].c_str(), args.data(), args.size(), attributes, &v), "ef_spec_op")) last = v;
    }
  }
  ok(ef_spec_output(spec, "fuzz_out", last, "f32"), "ef_spec_output");
  exercise(spec, salt);
  ef_spec_free(spec);
}

// NULL arrays with non-zero counts: EF_USER_ERROR, never a dereference.
void null_arrays(std::string_view body, std::uint32_t salt) {
  const std::size_t count = 1 + salt % 4;
  ef_spec* spec = nullptr;
  const std::string text = c_text(body);
  if (!ok(ef_spec_from_json_bytes(text.data(), text.size(), "<fuzz>", &spec), "ef_spec_from_json_bytes")) {
    if (!ok(ef_spec_new("null_arrays", nullptr, &spec), "ef_spec_new")) fail("ef_spec_new refused a plain spec");
  }
  std::uint32_t v = 0;
  if (ok(ef_spec_op(spec, "relu", nullptr, count, nullptr, &v), "ef_spec_op(NULL args)")) fail("ef_spec_op took NULL args");
  const char* name = "x";
  const void* ptr = name;
  void* out = nullptr;
  const int variant = static_cast<int>(salt / 4 % 4);
  const int status = ef_evaluate(spec, 2, 2, 2, variant == 0 ? nullptr : &name, variant == 1 ? nullptr : &ptr,
                                 variant >= 2 ? count : 1, variant == 2 ? nullptr : &name,
                                 variant == 3 ? nullptr : &out, variant >= 2 ? count : 1, 0, 0);
  if (ok(status, "ef_evaluate(NULL arrays)")) fail("ef_evaluate took NULL arrays");
  ef_spec_free(spec);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::uint32_t salt = 2166136261u;  // FNV-1a: each input picks its shape and data deterministically
  for (const unsigned char c : input) salt = (salt ^ c) * 16777619u;
  if (size > 0 && data[0] == 1) {
    builder(input.substr(1), salt);
  } else if (size > 0 && data[0] == 2) {
    null_arrays(input.substr(1), salt);
  } else {
    ef_spec* spec = nullptr;
    if (ok(ef_spec_from_json_bytes(input.data(), input.size(), "<fuzz>", &spec), "ef_spec_from_json_bytes")) {
      exercise(spec, salt);
      ef_spec_free(spec);
    }
  }
  return 0;
}
