// The C ABI (include/epifuse/c_api.h) as a C caller sees it: NULL arrays with
// counts, JSON fragments read by the CLI's rules (repeated keys, numbers beyond
// a double), chains from bytes with their length, clones. The many-threads
// side is tests/stress/c_api_threads.cpp (tools/sanitize_c_api.sh).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "epifuse/c_api.h"

namespace {

std::string last_error() { return ef_last_error(); }

// x: f32 full; y = relu(x).
struct Relu {
  ef_spec* spec = nullptr;
  std::uint32_t x = 0, y = 0;
  Relu() {
    REQUIRE(ef_spec_new("relu", nullptr, &spec) == EF_OK);
    REQUIRE(ef_spec_input(spec, "x", "f32", nullptr, &x) == EF_OK);
    REQUIRE(ef_spec_op(spec, "relu", &x, 1, nullptr, &y) == EF_OK);
    REQUIRE(ef_spec_output(spec, "y", y, "f32") == EF_OK);
  }
  ~Relu() { ef_spec_free(spec); }
  Relu(const Relu&) = delete;
  Relu& operator=(const Relu&) = delete;
};

std::string to_json(const ef_spec* spec) {
  char* text = nullptr;
  REQUIRE(ef_spec_to_json(spec, &text) == EF_OK);
  std::string s = text;
  ef_string_free(text);
  return s;
}

constexpr const char* k_chain = R"({"epifuse": 1, "inputs": {"x": {"dtype": "f32"}},
  "ops": [{"name": "y", "op": "relu", "args": ["x"]}], "outputs": {"y": {"dtype": "f32"}}})";

}  // namespace

TEST_CASE("C ABI: a NULL array with a non-zero count is a user error naming it") {
  Relu r;
  std::uint32_t v = 0;
  CHECK(ef_spec_op(r.spec, "add", nullptr, 2, nullptr, &v) == EF_USER_ERROR);
  CHECK(last_error().find("args is NULL") != std::string::npos);

  std::vector<float> x(4 * 8, 1.0f), y(4 * 8);
  const char* in_names[] = {"x"};
  const void* ins[] = {x.data()};
  const char* out_names[] = {"y"};
  void* outs[] = {y.data()};
  CHECK(ef_evaluate(r.spec, 4, 8, 0, nullptr, ins, 1, out_names, outs, 1, 0, 0) == EF_USER_ERROR);
  CHECK(last_error().find("input_names is NULL") != std::string::npos);
  CHECK(ef_evaluate(r.spec, 4, 8, 0, in_names, nullptr, 1, out_names, outs, 1, 0, 0) == EF_USER_ERROR);
  CHECK(last_error().find("inputs is NULL") != std::string::npos);
  CHECK(ef_evaluate(r.spec, 4, 8, 0, in_names, ins, 1, nullptr, outs, 1, 0, 0) == EF_USER_ERROR);
  CHECK(last_error().find("output_names is NULL") != std::string::npos);
  CHECK(ef_evaluate(r.spec, 4, 8, 0, in_names, ins, 1, out_names, nullptr, 1, 0, 0) == EF_USER_ERROR);
  CHECK(last_error().find("outputs is NULL") != std::string::npos);
  CHECK(ef_evaluate(r.spec, 4, 8, 0, in_names, ins, 1, out_names, outs, 1, 0, 0) == EF_OK);
  CHECK(y[0] == 1.0f);

  // The arrays are checked before anything else, so this holds without a GPU.
  const std::uint64_t ptrs[] = {0};
  CHECK(ef_jit_launch(nullptr, nullptr, nullptr, 2, ptrs, 1, 4, 8, 0, 0, 0, nullptr) == EF_USER_ERROR);
  CHECK(last_error().find("inputs is NULL") != std::string::npos);
  CHECK(ef_jit_launch(nullptr, nullptr, ptrs, 1, nullptr, 3, 4, 8, 0, 0, 0, nullptr) == EF_USER_ERROR);
  CHECK(last_error().find("outputs is NULL") != std::string::npos);
  ef_launch record{};
  record.ninputs = 1;
  CHECK(ef_launch_record(&record) == EF_USER_ERROR);
  CHECK(last_error().find("inputs is NULL") != std::string::npos);
}

TEST_CASE("C ABI: a number beyond a double in a JSON fragment is a user error") {
  Relu r;
  std::uint32_t v = 0;
  for (const char* attributes : {R"({"p": 1e999})", R"({"p": -1e400})", R"({"p": 1)" "0000000000000000000000000000000000"
                                 "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
                                 "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
                                 "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
                                 "000000000000000000000000000000000000000000000000000000000000000000000000}"}) {
    CAPTURE(attributes);
    CHECK(ef_spec_op(r.spec, "dropout", &r.x, 1, attributes, &v) == EF_USER_ERROR);
    CHECK(last_error().find("dropout") != std::string::npos);
    CHECK(last_error().find("bug") == std::string::npos);
  }
  ef_spec* s = nullptr;
  CHECK(ef_spec_new("g", R"({"kind": "gemm", "a": 1e999})", &s) == EF_USER_ERROR);
  CHECK(last_error().find("mainloop") != std::string::npos);
  CHECK(last_error().find("bug") == std::string::npos);
}

TEST_CASE("C ABI: a repeated key or name is refused as the CLI refuses it") {
  Relu r;
  std::uint32_t v = 0;
  CHECK(ef_spec_op(r.spec, "dropout", &r.x, 1, R"({"p": 0.1, "p": 0.9})", &v) == EF_USER_ERROR);
  CHECK(last_error().find("duplicate key 'p'") != std::string::npos);
  CHECK(ef_spec_op(r.spec, "dropout", &r.x, 1, R"({"p": 0.1})", &v) == EF_OK);

  ef_spec* s = nullptr;
  CHECK(ef_spec_new("g", R"({"kind": "gemm", "a": "f16", "a": "f32"})", &s) == EF_USER_ERROR);
  CHECK(last_error().find("duplicate key 'a'") != std::string::npos);

  CHECK(ef_spec_input(r.spec, "x", "f16", nullptr, &v) == EF_USER_ERROR);
  CHECK(last_error().find("duplicate value name 'x'") != std::string::npos);

  std::vector<float> x(2 * 8, 1.0f), x2(2 * 8, -1.0f), y(2 * 8);
  const char* in_names[] = {"x", "x"};
  const void* ins[] = {x.data(), x2.data()};
  const char* out_names[] = {"y"};
  void* outs[] = {y.data()};
  CHECK(ef_evaluate(r.spec, 2, 8, 0, in_names, ins, 2, out_names, outs, 1, 0, 0) == EF_USER_ERROR);
  CHECK(last_error().find("input 'x' is given twice") != std::string::npos);
}

TEST_CASE("C ABI: a chain from bytes is read by the CLI's rules, its length and not a NUL ending it") {
  ef_spec* s = nullptr;
  const std::string chain = k_chain;
  // Not NUL-terminated: the bytes of the chain inside a longer buffer.
  const std::string buffer = chain + "trailing text the size leaves out";
  REQUIRE(ef_spec_from_json_bytes(buffer.data(), chain.size(), "buffer.json", &s) == EF_OK);
  ef_spec* t = nullptr;
  REQUIRE(ef_spec_from_json(k_chain, nullptr, &t) == EF_OK);
  CHECK(to_json(s) == to_json(t));
  ef_spec_free(s);
  ef_spec_free(t);

  const std::string with_nul = chain + std::string(1, '\0') + "garbage";
  CHECK(ef_spec_from_json_bytes(with_nul.data(), with_nul.size(), "nul.json", &s) == EF_USER_ERROR);
  CHECK(last_error().find("nul.json") != std::string::npos);
  CHECK(last_error().find("NUL byte") != std::string::npos);

  std::string big = chain;
  big.insert(big.size() - 1, ", \"name\": \"" + std::string(ef_spec_json_limit(), 'n') + "\"");
  CHECK(ef_spec_from_json_bytes(big.data(), big.size(), "big.json", &s) == EF_USER_ERROR);
  CHECK(last_error().find("more than the limit of 1048576 bytes") != std::string::npos);

  const char* k_twice = R"({"epifuse": 1, "epifuse": 1})";
  CHECK(ef_spec_from_json_bytes(k_twice, std::strlen(k_twice), nullptr, &s) == EF_USER_ERROR);
  CHECK(last_error().find("duplicate key 'epifuse'") != std::string::npos);

  CHECK(ef_spec_from_json_bytes(nullptr, 5, nullptr, &s) == EF_USER_ERROR);
  CHECK(last_error().find("data is NULL") != std::string::npos);
  CHECK(ef_spec_from_json_bytes(nullptr, 0, nullptr, &s) == EF_USER_ERROR);  // no text is no JSON
  CHECK(ef_spec_json_limit() == std::size_t{1} << 20);
}

TEST_CASE("C ABI: a clone is independent of its original") {
  ef_spec* clone = nullptr;
  std::string before;
  {
    Relu r;
    before = to_json(r.spec);
    REQUIRE(ef_spec_clone(r.spec, &clone) == EF_OK);
    std::uint32_t v = 0;
    REQUIRE(ef_spec_op(r.spec, "exp", &r.x, 1, nullptr, &v) == EF_OK);
    REQUIRE(ef_spec_output(r.spec, "z", v, "f32") == EF_OK);
    CHECK(to_json(r.spec) != before);
  }  // the original is freed
  CHECK(to_json(clone) == before);
  std::uint32_t v = 0;
  CHECK(ef_spec_op(clone, "relu", nullptr, 1, nullptr, &v) == EF_USER_ERROR);  // args NULL
  ef_spec_free(clone);
  CHECK(ef_spec_clone(nullptr, &clone) == EF_USER_ERROR);
}

TEST_CASE("C ABI: grad gives a forward and a backward spec, or a UserError and nothing") {
  Relu r;
  ef_spec *forward = nullptr, *backward = nullptr;
  char* info = nullptr;
  REQUIRE(ef_spec_grad(r.spec, nullptr, &forward, &backward, &info) == EF_OK);
  const std::string meta = info;
  ef_string_free(info);
  CHECK(meta.find("\"wrt\":[\"x\"]") != std::string::npos);
  CHECK(ef_spec_verify(forward) == EF_OK);
  CHECK(ef_spec_verify(backward) == EF_OK);
  CHECK(to_json(backward).find("relu_deriv") != std::string::npos);
  ef_spec_free(forward);
  ef_spec_free(backward);
  forward = backward = nullptr;
  info = nullptr;
  CHECK(ef_spec_grad(r.spec, "[\"seed\"]", &forward, &backward, &info) == EF_USER_ERROR);
  CHECK(std::string(ef_last_error()).find("not an input") != std::string::npos);
  CHECK(ef_spec_grad(r.spec, "{}", &forward, &backward, &info) == EF_USER_ERROR);
  CHECK((forward == nullptr && backward == nullptr && info == nullptr));
  CHECK(ef_spec_grad(r.spec, nullptr, nullptr, &backward, &info) == EF_USER_ERROR);
}

TEST_CASE("C ABI: a chain name with a control character is refused, as the JSON reader refuses it") {
  ef_spec* s = nullptr;
  CHECK(ef_spec_new("bad\x1b[31mname", nullptr, &s) == EF_USER_ERROR);
  CHECK(s == nullptr);
  CHECK(std::string(ef_last_error()).find("control characters") != std::string::npos);
  CHECK(std::string(ef_last_error()).find("\\x1b") != std::string::npos);  // shown escaped, never raw
  CHECK(ef_spec_new("caf\xe9 \xab", nullptr, &s) == EF_USER_ERROR);  // Latin-1 bytes: not UTF-8, never writable as JSON
  CHECK(std::string(ef_last_error()).find("UTF-8") != std::string::npos);
  REQUIRE(ef_spec_new("plain name, caf\xc3\xa9", nullptr, &s) == EF_OK);
  char* json = nullptr;
  REQUIRE(ef_spec_to_json(s, &json) == EF_OK);
  ef_string_free(json);
  ef_spec_free(s);
}

TEST_CASE("C ABI: the calls for devices, tuning and inputs not differentiated refuse bad arguments, naming them") {
  Relu r;
  // Inputs only; a value that is not an input says so.
  CHECK(ef_spec_set_differentiable(r.spec, r.x, 0) == EF_OK);
  char* json = nullptr;
  REQUIRE(ef_spec_to_json(r.spec, &json) == EF_OK);
  const std::string text = json;
  ef_string_free(json);
  CHECK(text.find("\"grad\"") != std::string::npos);
  CHECK(ef_spec_set_differentiable(r.spec, r.y, 0) == EF_USER_ERROR);
  CHECK(last_error().find("only inputs") != std::string::npos);
  CHECK(ef_spec_set_differentiable(nullptr, r.x, 0) == EF_USER_ERROR);
  CHECK(ef_spec_set_differentiable(r.spec, 9999, 0) == EF_USER_ERROR);

  ef_jit* jit = nullptr;
  CHECK(ef_jit_new_on_device("sm_90a", -1, &jit) == EF_USER_ERROR);
  CHECK(last_error().find("numbered from 0") != std::string::npos);
  CHECK(jit == nullptr);
  CHECK(ef_jit_new_on_device("sm_90a", 0, nullptr) == EF_USER_ERROR);

  // The arrays and handles are checked before anything else, so this holds without a GPU.
  const std::uint64_t ptrs[] = {0};
  char* result = nullptr;
  CHECK(ef_jit_tune(nullptr, r.spec, 4, 8, 0, ptrs, 1, ptrs, 1, 0, 0, &result) == EF_USER_ERROR);
  CHECK(last_error().find("jit is NULL") != std::string::npos);
  CHECK(ef_jit_tune(nullptr, r.spec, 4, 8, 0, nullptr, 1, ptrs, 1, 0, 0, &result) == EF_USER_ERROR);
  CHECK(result == nullptr);
}

TEST_CASE("C ABI: strided operands through ef_jit_compile_ld and ef_launch's appended ld") {
  // Appended after rng_state: a record laid out before them is a prefix of this one.
  static_assert(offsetof(ef_launch, ld) >= offsetof(ef_launch, rng_state) + sizeof(std::uint64_t));
  static_assert(offsetof(ef_launch, nld) > offsetof(ef_launch, ld));
  ef_launch zeroed{};
  CHECK(zeroed.ld == nullptr);
  CHECK(zeroed.nld == 0);

  ef_spec* s = nullptr;
  REQUIRE(ef_spec_from_json(R"({"epifuse": 1, "mainloop": {"kind": "gemm", "a": "f16", "b": "f16", "b_layout": "col"},
    "inputs": {"bias": {"dtype": "f16", "broadcast": "row"}},
    "ops": [{"name": "y", "op": "add", "args": ["acc", "bias"]}], "outputs": {"y": {"dtype": "f16"}}})",
                            "strided.json", &s) == EF_OK);
  ef_jit* jit = nullptr;
  if (ef_jit_new("sm_80", &jit) != EF_OK) {
    MESSAGE("C ABI strided compile skipped: " << last_error());
    ef_spec_free(s);
    return;
  }
  ef_kernel* kernel = nullptr;
  const std::int64_t short_a[] = {60};  // K is 64
  CHECK(ef_jit_compile_ld(jit, s, 32, 48, 64, short_a, 1, nullptr, &kernel) == EF_USER_ERROR);
  CHECK(last_error().find("operand 'a'") != std::string::npos);
  CHECK(last_error().find("ld 60") != std::string::npos);
  const std::int64_t on_bias[] = {0, 0, 64};  // a row [N] input has no rows to space
  CHECK(ef_jit_compile_ld(jit, s, 32, 48, 64, on_bias, 3, nullptr, &kernel) == EF_USER_ERROR);
  CHECK(last_error().find("input 'bias'") != std::string::npos);
  CHECK(last_error().find("full [M,N]") != std::string::npos);
  CHECK(ef_jit_compile_ld(jit, s, 32, 48, 64, nullptr, 2, nullptr, &kernel) == EF_USER_ERROR);
  CHECK(last_error().find("ld is NULL") != std::string::npos);
  const std::int64_t lds[] = {72, 80};
  REQUIRE(ef_jit_compile_ld(jit, s, 32, 48, 64, lds, 2, nullptr, &kernel) == EF_OK);
  ef_kernel* dense = nullptr;
  REQUIRE(ef_jit_compile_ld(jit, s, 32, 48, 64, nullptr, 0, nullptr, &dense) == EF_OK);
  char* a = nullptr;
  char* b = nullptr;
  REQUIRE(ef_kernel_bindings(kernel, &a) == EF_OK);
  REQUIRE(ef_kernel_bindings(dense, &b) == EF_OK);
  const std::string strided_json = a, dense_json = b;
  CHECK(strided_json.find(R"("inputs":["a","b","bias"])") != std::string::npos);
  CHECK(strided_json != dense_json);  // another kernel (its name), the same bindings
  ef_string_free(a);
  ef_string_free(b);
  ef_kernel_free(kernel);
  ef_kernel_free(dense);
  ef_jit_free(jit);
  ef_spec_free(s);
}

TEST_CASE("C ABI: one jit, two chains of one signature named differently: each kernel's bindings are its own") {
  // Note [Binding names]: the Python module binds its arguments by these names.
  ef_spec* pq = nullptr;
  ef_spec* qp = nullptr;
  REQUIRE(ef_spec_from_json(R"({"epifuse": 1, "inputs": {"p": {"dtype": "f32"}, "q": {"dtype": "f32"}},
    "ops": [{"name": "y", "op": "sub", "args": ["p", "q"]}], "outputs": {"y": {"dtype": "f32"}}})",
                            "pq.json", &pq) == EF_OK);
  REQUIRE(ef_spec_from_json(R"({"epifuse": 1, "inputs": {"q": {"dtype": "f32"}, "p": {"dtype": "f32"}},
    "ops": [{"name": "z", "op": "sub", "args": ["q", "p"]}], "outputs": {"z": {"dtype": "f32"}}})",
                            "qp.json", &qp) == EF_OK);
  ef_jit* jit = nullptr;
  if (ef_jit_new("sm_80", &jit) != EF_OK) {
    MESSAGE("C ABI binding names skipped: " << last_error());
    ef_spec_free(pq);
    ef_spec_free(qp);
    return;
  }
  ef_kernel* first = nullptr;
  ef_kernel* second = nullptr;
  REQUIRE(ef_jit_compile(jit, pq, 64, 64, 0, nullptr, &first) == EF_OK);
  REQUIRE(ef_jit_compile(jit, qp, 64, 64, 0, nullptr, &second) == EF_OK);
  char* a = nullptr;
  char* b = nullptr;
  REQUIRE(ef_kernel_bindings(first, &a) == EF_OK);
  REQUIRE(ef_kernel_bindings(second, &b) == EF_OK);
  const std::string first_json = a, second_json = b;
  CHECK(first_json.find(R"("inputs":["p","q"],"outputs":["y"])") != std::string::npos);
  CHECK(second_json.find(R"("inputs":["q","p"],"outputs":["z"])") != std::string::npos);
  ef_string_free(a);
  ef_string_free(b);
  ef_kernel_free(first);
  ef_kernel_free(second);
  ef_jit_free(jit);
  ef_spec_free(pq);
  ef_spec_free(qp);
}

TEST_CASE("C ABI: strided chain inputs and outputs through the same ld record (inputs, then outputs)") {
  ef_spec* s = nullptr;
  REQUIRE(ef_spec_from_json(R"({"epifuse": 1, "mainloop": {"kind": "gemm", "a": "f16", "b": "f16", "b_layout": "col"},
    "inputs": {"bias": {"dtype": "f16", "broadcast": "row"}, "res": {"dtype": "f16"}},
    "ops": [{"name": "z", "op": "add", "args": ["acc", "bias"]}, {"name": "y", "op": "add", "args": ["z", "res"]},
            {"name": "db", "op": "col_sum", "args": ["y"]}],
    "outputs": {"y": {"dtype": "f16"}, "db": {"dtype": "f32"}}})",
                            "strided_epilogue.json", &s) == EF_OK);
  ef_jit* jit = nullptr;
  if (ef_jit_new("sm_80", &jit) != EF_OK) {
    MESSAGE("C ABI strided epilogue compile skipped: " << last_error());
    ef_spec_free(s);
    return;
  }
  // Bindings: a, b, bias, res, then y, db.
  ef_kernel* kernel = nullptr;
  const std::int64_t short_res[] = {0, 0, 0, 40};  // N is 48
  CHECK(ef_jit_compile_ld(jit, s, 32, 48, 64, short_res, 4, nullptr, &kernel) == EF_USER_ERROR);
  CHECK(last_error().find("input 'res': ld 40") != std::string::npos);
  const std::int64_t on_db[] = {0, 0, 0, 0, 0, 64};  // a column sum is [N]
  CHECK(ef_jit_compile_ld(jit, s, 32, 48, 64, on_db, 6, nullptr, &kernel) == EF_USER_ERROR);
  CHECK(last_error().find("output 'db'") != std::string::npos);
  const std::int64_t too_many[] = {0, 0, 0, 0, 0, 0, 64};
  CHECK(ef_jit_compile_ld(jit, s, 32, 48, 64, too_many, 7, nullptr, &kernel) == EF_USER_ERROR);
  CHECK(last_error().find("7 given, the kernel binds 4 inputs and 2 outputs") != std::string::npos);
  const std::int64_t lds[] = {0, 0, 0, 56, 64};
  REQUIRE(ef_jit_compile_ld(jit, s, 32, 48, 64, lds, 5, nullptr, &kernel) == EF_OK);
  ef_kernel* dense = nullptr;
  const std::int64_t n_is_dense[] = {0, 0, 0, 48, 48, 0};  // ld = N: the dense kernel
  REQUIRE(ef_jit_compile_ld(jit, s, 32, 48, 64, n_is_dense, 6, nullptr, &dense) == EF_OK);
  char* a = nullptr;
  char* b = nullptr;
  REQUIRE(ef_kernel_bindings(kernel, &a) == EF_OK);
  REQUIRE(ef_kernel_bindings(dense, &b) == EF_OK);
  const std::string strided_json = a, dense_json = b;
  CHECK(strided_json.find(R"("inputs":["a","b","bias","res"],"outputs":["y","db"])") != std::string::npos);
  CHECK(strided_json != dense_json);  // another kernel (its name), the same bindings
  ef_string_free(a);
  ef_string_free(b);
  // A launch's record is read the same way; one longer than the bindings is
  // refused before anything reaches the device.
  const std::uint64_t ins[] = {0, 0, 0, 0}, outs[] = {0, 0};
  ef_launch l{};
  l.jit = jit;
  l.kernel = kernel;
  l.inputs = ins;
  l.ninputs = 4;
  l.outputs = outs;
  l.noutputs = 2;
  l.m = 32;
  l.n = 48;
  l.k = 64;
  l.ld = too_many;
  l.nld = 7;
  CHECK(ef_launch_record(&l) == EF_USER_ERROR);
  CHECK(last_error().find("7 given, the kernel binds 4 inputs and 2 outputs") != std::string::npos);
  ef_kernel_free(kernel);
  ef_kernel_free(dense);
  ef_jit_free(jit);
  ef_spec_free(s);
}

TEST_CASE("C ABI: strided tensors of elementwise and row chains through the ld record (no operands)") {
  ef_jit* jit = nullptr;
  if (ef_jit_new("sm_80", &jit) != EF_OK) {
    MESSAGE("C ABI strided rows compile skipped: " << last_error());
    return;
  }
  // Elementwise: bindings x, bias, then y; the record starts at the chain's first input.
  ef_spec* ew = nullptr;
  REQUIRE(ef_spec_from_json(R"({"epifuse": 1, "inputs": {"x": {"dtype": "f16"}, "bias": {"dtype": "f16", "broadcast": "row"}},
    "ops": [{"name": "z", "op": "add", "args": ["x", "bias"]}, {"name": "y", "op": "relu", "args": ["z"]}],
    "outputs": {"y": {"dtype": "f16"}}})",
                            "ew.json", &ew) == EF_OK);
  ef_kernel* kernel = nullptr;
  const std::int64_t short_x[] = {40};  // N is 48
  CHECK(ef_jit_compile_ld(jit, ew, 32, 48, 0, short_x, 1, nullptr, &kernel) == EF_USER_ERROR);
  CHECK(last_error().find("input 'x': ld 40 is less than its rows' 48 elements") != std::string::npos);
  const std::int64_t on_bias[] = {0, 64};
  CHECK(ef_jit_compile_ld(jit, ew, 32, 48, 0, on_bias, 2, nullptr, &kernel) == EF_USER_ERROR);
  CHECK(last_error().find("input 'bias': an ld is for a full [M,N] tensor") != std::string::npos);
  const std::int64_t too_many[] = {0, 0, 0, 64};
  CHECK(ef_jit_compile_ld(jit, ew, 32, 48, 0, too_many, 4, nullptr, &kernel) == EF_USER_ERROR);
  CHECK(last_error().find("4 given, the kernel binds 2 inputs and 1 outputs") != std::string::npos);
  const std::int64_t lds[] = {64, 0, 56};
  REQUIRE(ef_jit_compile_ld(jit, ew, 32, 48, 0, lds, 3, nullptr, &kernel) == EF_OK);
  ef_kernel* dense = nullptr;
  const std::int64_t n_is_dense[] = {48, 0, 48};
  REQUIRE(ef_jit_compile_ld(jit, ew, 32, 48, 0, n_is_dense, 3, nullptr, &dense) == EF_OK);
  char* a = nullptr;
  char* b = nullptr;
  REQUIRE(ef_kernel_bindings(kernel, &a) == EF_OK);
  REQUIRE(ef_kernel_bindings(dense, &b) == EF_OK);
  const std::string strided_json = a, dense_json = b;
  CHECK(strided_json.find(R"("inputs":["x","bias"],"outputs":["y"])") != std::string::npos);
  CHECK(strided_json != dense_json);  // another kernel (its name), the same bindings
  ef_string_free(a);
  ef_string_free(b);
  ef_kernel_free(kernel);
  ef_kernel_free(dense);
  ef_spec_free(ew);
  // A row chain (softmax): x strided, y strided.
  ef_spec* rows = nullptr;
  REQUIRE(ef_spec_from_json(R"({"epifuse": 1, "inputs": {"x": {"dtype": "bf16"}},
    "ops": [{"name": "y", "op": "softmax", "args": ["x"]}], "outputs": {"y": {"dtype": "bf16"}}})",
                            "rows.json", &rows) == EF_OK);
  const std::int64_t row_lds[] = {1032, 2048};
  REQUIRE(ef_jit_compile_ld(jit, rows, 16, 1024, 0, row_lds, 2, nullptr, &kernel) == EF_OK);
  const std::int64_t short_y[] = {0, 1000};
  CHECK(ef_jit_compile_ld(jit, rows, 16, 1024, 0, short_y, 2, nullptr, &dense) == EF_USER_ERROR);
  CHECK(last_error().find("output 'y': ld 1000 is less than its rows' 1024 elements") != std::string::npos);
  ef_kernel_free(kernel);
  ef_spec_free(rows);
  ef_jit_free(jit);
}

TEST_CASE("C ABI: batched GEMMs through ef_jit_compile_batched and ef_launch's appended batch fields") {
  // Appended after nld: a record laid out before them is a prefix of this one.
  static_assert(offsetof(ef_launch, batch) >= offsetof(ef_launch, nld) + sizeof(std::size_t));
  static_assert(offsetof(ef_launch, nbatch_stride) > offsetof(ef_launch, batch_stride));
  ef_launch zeroed{};
  CHECK(zeroed.batch == 0);  // an unbatched launch
  CHECK(zeroed.batch_stride == nullptr);
  CHECK(zeroed.nbatch_stride == 0);

  ef_spec* s = nullptr;
  REQUIRE(ef_spec_from_json(R"({"epifuse": 1, "mainloop": {"kind": "gemm", "a": "f16", "b": "f16", "b_layout": "col"},
    "inputs": {"bias": {"dtype": "f16", "broadcast": "row"}, "res": {"dtype": "f16"}},
    "ops": [{"name": "z", "op": "add", "args": ["acc", "bias"]}, {"name": "y", "op": "add", "args": ["z", "res"]}],
    "outputs": {"y": {"dtype": "f16"}}})",
                            "batched.json", &s) == EF_OK);
  ef_jit* jit = nullptr;
  if (ef_jit_new("sm_80", &jit) != EF_OK) {
    MESSAGE("C ABI batched compile skipped: " << last_error());
    ef_spec_free(s);
    return;
  }
  ef_kernel* kernel = nullptr;
  CHECK(ef_jit_compile_batched(jit, s, 32, 48, 64, nullptr, 0, 70000, nullptr, 0, nullptr, &kernel) == EF_USER_ERROR);
  CHECK(last_error().find("batch 70000") != std::string::npos);
  const std::int64_t overlapping[] = {-1, 100};  // B is 48 x 64 = 3072 elements
  CHECK(ef_jit_compile_batched(jit, s, 32, 48, 64, nullptr, 0, 4, overlapping, 2, nullptr, &kernel) == EF_USER_ERROR);
  CHECK(last_error().find("operand 'b'") != std::string::npos);
  CHECK(last_error().find("overlap") != std::string::npos);
  const std::int64_t three[] = {-1, 0, 0};
  CHECK(ef_jit_compile_batched(jit, s, 32, 48, 64, nullptr, 0, 4, three, 3, nullptr, &kernel) == EF_USER_ERROR);
  CHECK(last_error().find("2 GEMM operands") != std::string::npos);
  CHECK(ef_jit_compile_batched(jit, s, 32, 48, 64, nullptr, 0, 4, nullptr, 2, nullptr, &kernel) == EF_USER_ERROR);
  CHECK(last_error().find("batch_stride is NULL") != std::string::npos);
  const std::int64_t shared_b[] = {-1, 0};  // one weight for every batch
  REQUIRE(ef_jit_compile_batched(jit, s, 32, 48, 64, nullptr, 0, 4, shared_b, 2, nullptr, &kernel) == EF_OK);
  ef_kernel* one = nullptr;
  REQUIRE(ef_jit_compile_batched(jit, s, 32, 48, 64, nullptr, 0, 1, nullptr, 0, nullptr, &one) == EF_OK);
  ef_kernel* plain = nullptr;
  REQUIRE(ef_jit_compile(jit, s, 32, 48, 64, nullptr, &plain) == EF_OK);
  char* a = nullptr;
  char* b = nullptr;
  char* c = nullptr;
  REQUIRE(ef_kernel_bindings(kernel, &a) == EF_OK);
  REQUIRE(ef_kernel_bindings(one, &b) == EF_OK);
  REQUIRE(ef_kernel_bindings(plain, &c) == EF_OK);
  const std::string batched_json = a, one_json = b, plain_json = c;
  CHECK(batched_json.find(R"("inputs":["a","b","bias","res"])") != std::string::npos);
  CHECK(batched_json != plain_json);  // another kernel (its name), the same bindings
  CHECK(one_json == plain_json);      // batch 1 is the unbatched kernel
  ef_string_free(a);
  ef_string_free(b);
  ef_string_free(c);
  ef_kernel_free(kernel);
  ef_kernel_free(one);
  ef_kernel_free(plain);
  ef_jit_free(jit);
  ef_spec_free(s);
}

TEST_CASE("C ABI: as_gemm_epilogue turns a backward spec into a GEMM chain, or a UserError and nothing") {
  // y = gelu_tanh(acc + bias): its backward reads dy, the saved pre-activation and
  // writes dacc and dbias; the dgrad chain reads acc where the backward read dy.
  constexpr const char* k_linear = R"({"epifuse": 1, "name": "linear",
    "mainloop": {"kind": "gemm", "a": "f32", "b": "f32", "b_layout": "col"},
    "inputs": {"bias": {"dtype": "f32", "broadcast": "row"}},
    "ops": [{"name": "z", "op": "add", "args": ["acc", "bias"]}, {"name": "y", "op": "gelu_tanh", "args": ["z"]}],
    "outputs": {"y": {"dtype": "f32"}}})";
  constexpr const char* k_gemm = R"({"kind": "gemm", "a": "f32", "b": "f32", "a_layout": "row", "b_layout": "row"})";
  ef_spec* chain = nullptr;
  REQUIRE(ef_spec_from_json(k_linear, nullptr, &chain) == EF_OK);
  ef_spec *forward = nullptr, *backward = nullptr;
  char* info = nullptr;
  REQUIRE(ef_spec_grad(chain, nullptr, &forward, &backward, &info) == EF_OK);
  ef_string_free(info);

  ef_spec* dgrad = nullptr;
  REQUIRE(ef_spec_as_gemm_epilogue(backward, "dy", k_gemm, &dgrad) == EF_OK);
  CHECK(ef_spec_verify(dgrad) == EF_OK);
  const std::string text = to_json(dgrad);
  CHECK(text.find("\"linear_backward_dgrad\"") != std::string::npos);
  CHECK(text.find("\"b_layout\": \"row\"") != std::string::npos);
  CHECK(text.find("\"dy\"") == std::string::npos);  // the accumulator took its place
  CHECK(text.find("gelu_tanh_deriv") != std::string::npos);
  CHECK(text.find("col_sum") != std::string::npos);
  char* bindings = nullptr;
  REQUIRE(ef_spec_bindings(dgrad, 4, 8, 3, &bindings) == EF_OK);
  const std::string b = bindings;
  ef_string_free(bindings);
  CHECK(b.find(R"({"name":"a","dtype":"f32","shape":[4,3]})") != std::string::npos);
  CHECK(b.find(R"({"name":"b","dtype":"f32","shape":[3,8]})") != std::string::npos);
  CHECK(b.find(R"("name":"dbias","dtype":"f32","shape":[8],"broadcast":"row")") != std::string::npos);

  // Each refusal says why and leaves *out unset.
  struct Refusal {
    const ef_spec* spec;
    const char* upstream;
    const char* mainloop;
    const char* says;
  };
  ef_spec* operand_named = nullptr;  // an input the GEMM chain would read as its operand
  REQUIRE(ef_spec_from_json(R"({"epifuse": 1, "inputs": {"dy": {"dtype": "f32"}, "b": {"dtype": "f32"}},
    "ops": [{"name": "dx", "op": "mul", "args": ["dy", "b"]}], "outputs": {"dx": {"dtype": "f32"}}})",
                            nullptr, &operand_named) == EF_OK);
  ef_spec* scaled = nullptr;  // dx = dy·g, g a row input: not an [M,N] value to become the accumulator
  REQUIRE(ef_spec_from_json(R"({"epifuse": 1,
    "inputs": {"dy": {"dtype": "f32"}, "g": {"dtype": "f32", "broadcast": "row"}},
    "ops": [{"name": "dx", "op": "mul", "args": ["dy", "g"]}], "outputs": {"dx": {"dtype": "f32"}}})",
                            nullptr, &scaled) == EF_OK);
  const Refusal refusals[] = {
      {nullptr, "dy", k_gemm, "backward is NULL"},
      {backward, nullptr, k_gemm, "upstream is NULL"},
      {backward, "dy", nullptr, "mainloop_json is NULL"},
      {backward, "dy", "{\"kind\": ", "mainloop: not JSON"},
      {backward, "dy", R"({"kind": "gemm", "a": "f32", "a": "f16"})", "duplicate key 'a'"},
      {backward, "dy", R"({"kind": "gemm", "a": "f64"})", "unknown dtype 'f64'"},
      {backward, "dy", R"({"kind": "dual_gemm", "a": "f32", "b": "f32"})", "a single GEMM"},
      {backward, "dy", R"("elementwise")", "a single GEMM"},
      {backward, "nope", k_gemm, "'nope' is not an input"},
      {scaled, "g", k_gemm, "input 'g' is a row input"},
      {dgrad, "dy", k_gemm, "already has a gemm mainloop"},
      {operand_named, "dy", k_gemm, "input 'b': in a gemm kernel the names a, b"},
  };
  for (const Refusal& r : refusals) {
    ef_spec* out = nullptr;
    CHECK(ef_spec_as_gemm_epilogue(r.spec, r.upstream, r.mainloop, &out) == EF_USER_ERROR);
    const std::string says = r.says, said = last_error();
    CAPTURE(said);
    CHECK(said.find(says) != std::string::npos);
    CHECK(out == nullptr);
  }
  CHECK(ef_spec_as_gemm_epilogue(backward, "dy", k_gemm, nullptr) == EF_USER_ERROR);
  CHECK(last_error().find("out is NULL") != std::string::npos);
  ef_spec_free(operand_named);
  ef_spec_free(scaled);
  ef_spec_free(dgrad);
  ef_spec_free(forward);
  ef_spec_free(backward);
  ef_spec_free(chain);
}
