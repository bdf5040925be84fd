// The limits on JSON text (src/ir/limits.hpp, docs/limits.md): each at the
// limit and one past it, with the message naming the limit and the JSON path.
// The graph's own limits are in test_graph.cpp; timings in tests/cli/run_examples.sh.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <fmt/format.h>

#include "epifuse/errors.hpp"
#include "epifuse/graph.hpp"
#include "epifuse/json.hpp"
#include "ir/limits.hpp"

using namespace epifuse;
namespace fs = std::filesystem;

namespace {

KernelSpec from_text(std::string_view text) { return spec_from_json_text(text, "test.json"); }

// The message of the UserError that parsing `text` throws ("" when none).
std::string error_of(std::string_view text) {
  try {
    (void)from_text(text);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// A valid elementwise spec whose body is `body` (the chain or ops/outputs keys).
std::string spec_with(std::string_view body, std::string_view inputs = R"("x": {"dtype": "f32"})") {
  return fmt::format(R"({{"epifuse": 1, "inputs": {{{}}}, {}}})", inputs, body);
}

// `n` copies of `item`, comma separated.
std::string repeat(std::string_view item, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += fmt::format("{}{}", i ? "," : "", item);
  return out;
}

}  // namespace

TEST_CASE("nesting: 64 levels parse, the 65th is refused where it opens") {
  auto nested = [](int levels) {
    return spec_with(fmt::format(R"("chain": ["relu"], "extra": {}{})", std::string(levels - 1, '['),
                                 std::string(levels - 1, ']')));
  };
  // The document is level 1, `extra`'s value level 2.
  const std::string at_limit = error_of(nested(limits::k_max_depth));
  CHECK(at_limit.find("unknown key 'extra'") != std::string::npos);
  const std::string past = error_of(nested(limits::k_max_depth + 1));
  CHECK(past.find("JSON nesting deeper than the limit of 64 levels") != std::string::npos);
  std::string path = "extra";
  for (int i = 0; i < limits::k_max_depth - 1; ++i) path += "[0]";
  CHECK(past.rfind(path + ": JSON nesting", 0) == 0);
}

TEST_CASE("nesting: a million levels stop at the limit, fast") {
  const std::string deep(1000000, '[');
  const auto t0 = std::chrono::steady_clock::now();
  const std::string message = error_of(deep);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(message.find("nesting deeper than the limit of 64 levels") != std::string::npos);
  CHECK(message.size() < 400);
  // Before the limit this crashed (SIGSEGV) or took seconds; a generous bound.
  CHECK(s < 0.5);
}

TEST_CASE("keys: 256 in one object parse, the 257th is refused at its path") {
  auto object = [](std::size_t n) {
    std::string members;
    for (std::size_t i = 0; i < n; ++i) members += fmt::format(R"({}"k{}": 0)", i ? "," : "", i);
    return spec_with(fmt::format(R"("chain": ["relu"], "extra": {{{}}})", members));
  };
  CHECK(error_of(object(limits::k_max_object_keys)).find("unknown key 'extra'") != std::string::npos);
  CHECK(error_of(object(limits::k_max_object_keys + 1)) ==
        "extra.k256: more than the limit of 256 keys in one object");
}

TEST_CASE("array elements: 4096 parse, the 4097th is refused at its index") {
  auto array = [](std::size_t n) { return spec_with(fmt::format(R"("chain": ["relu"], "shape": [{}])", repeat("1", n))); };
  CHECK(error_of(array(limits::k_max_array_elements)).find("got 4096 dimensions") != std::string::npos);
  CHECK(error_of(array(limits::k_max_array_elements + 1)) ==
        "shape[4096]: more than the limit of 4096 elements in one array");
  // Arrays of objects and arrays count the same way.
  const std::string objects = spec_with(fmt::format(R"("chain": [{}])", repeat(R"({"scale": 1})", 4097)));
  CHECK(error_of(objects).find("chain[4096]: more than the limit of 4096 elements") == 0);
}

TEST_CASE("chain text: 1 MiB parses, one byte more is refused before parsing") {
  std::string text = spec_with(R"("chain": ["relu"])");
  text.resize(limits::k_max_chain_bytes, ' ');  // JSON allows trailing whitespace
  CHECK_NOTHROW((void)from_text(text));
  text.push_back(' ');
  CHECK(error_of(text) == "test.json: 1048577 bytes, more than the limit of 1048576 bytes (1 MiB) for a chain");
}

TEST_CASE("chain files are read up to the limit and no further") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("epifuse_limits_{}", ::getpid());
  fs::create_directories(dir);
  const fs::path big = dir / "big.json";
  {
    std::ofstream out(big, std::ios::binary);
    out << spec_with(R"("chain": ["relu"])") << std::string(limits::k_max_chain_bytes, ' ');
  }
  CHECK_THROWS_WITH_AS((void)load_spec(big),
                       doctest::Contains("big.json: more than the limit of 1048576 bytes (1 MiB) for a chain"),
                       UserError);
  // A file that never ends is not read to its end.
  if (fs::exists("/dev/zero"))
    CHECK_THROWS_WITH_AS((void)load_spec("/dev/zero"), doctest::Contains("/dev/zero: more than the limit"), UserError);
  fs::remove_all(dir);
}

TEST_CASE("a NUL byte anywhere is refused before parsing, naming its byte") {
  using namespace std::string_literals;
  const std::string ok = spec_with(R"("chain": ["relu"])");
  CHECK_NOTHROW((void)from_text(ok));
  // After the document: nlohmann would stop there and accept it.
  CHECK(error_of(ok + "\0"s) ==
        fmt::format("test.json: byte {0} (line 1, column {0}): NUL byte in the chain text (JSON text has none)",
                    ok.size() + 1));
  // Inside a string, on line 2.
  const std::string in_string = "{\"epifuse\": 1,\n \"name\": \"a\0b\"}"s;
  CHECK(error_of(in_string).find("test.json: byte 27 (line 2, column 12): NUL byte") == 0);
}

TEST_CASE("graph limits reach the JSON layer at the path of the offending entry") {
  SUBCASE("ops: 1024 build, the 1025th fails at its index") {
    auto chain = [](std::size_t n) { return spec_with(fmt::format(R"("chain": [{}])", repeat(R"("relu")", n))); };
    CHECK_NOTHROW((void)from_text(chain(limits::k_max_ops)));
    CHECK(error_of(chain(limits::k_max_ops + 1)) == "chain[1024]: relu: more than the limit of 1024 ops in one graph");
    std::string ops = R"({"name": "v0", "op": "relu", "args": ["x"]})";
    for (std::size_t i = 1; i <= limits::k_max_ops; ++i)
      ops += fmt::format(R"(, {{"name": "v{}", "op": "relu", "args": ["v{}"]}})", i, i - 1);
    CHECK(error_of(spec_with(fmt::format(R"("ops": [{}], "outputs": {{"y": {{"dtype": "f32", "value": "v0"}}}})", ops)))
              .find("ops[1024]: relu: more than the limit of 1024 ops") == 0);
  }
  SUBCASE("inputs: 128 build, the 129th fails at its key") {
    // x and i1..i<n-1>, each added by the chain.
    auto with_inputs = [](std::size_t n) {
      std::string inputs = R"("x": {"dtype": "f32"})", chain = R"("relu")";
      for (std::size_t i = 1; i < n; ++i) {
        inputs += fmt::format(R"(, "i{}": {{"dtype": "f32"}})", i);
        chain += fmt::format(R"(, "i{}")", i);
      }
      return spec_with(fmt::format(R"("chain": [{}])", chain), inputs);
    };
    CHECK_NOTHROW((void)from_text(with_inputs(limits::k_max_inputs)));
    CHECK(error_of(with_inputs(limits::k_max_inputs + 1)) ==
          "inputs.i128: input 'i128': more than the limit of 128 inputs in one graph");
  }
  SUBCASE("outputs: 32 store, the 33rd fails at its key") {
    auto outputs = [](std::size_t n) {
      std::string out;
      for (std::size_t i = 0; i < n; ++i) out += fmt::format(R"({}"o{}": {{"dtype": "f32", "value": "x"}})", i ? ", " : "", i);
      return spec_with(fmt::format(R"("outputs": {{{}}})", out));
    };
    CHECK_NOTHROW((void)from_text(outputs(limits::k_max_outputs)));
    CHECK(error_of(outputs(limits::k_max_outputs + 1)) ==
          "outputs.o32: output 'o32': more than the limit of 32 outputs in one graph");
  }
  SUBCASE("scale and dropout: 256 each, the 257th fails at its step") {
    auto chain = [](std::string_view step, std::size_t n) { return spec_with(fmt::format(R"("chain": [{}])", repeat(step, n))); };
    CHECK_NOTHROW((void)from_text(chain(R"({"scale": 2})", limits::k_max_scale_ops)));
    CHECK(error_of(chain(R"({"scale": 2})", limits::k_max_scale_ops + 1)).find(
              "chain[256]: scale: more than the limit of 256 scale ops") == 0);
    CHECK_NOTHROW((void)from_text(chain(R"({"dropout": 0.5})", limits::k_max_dropouts)));
    CHECK(error_of(chain(R"({"op": "dropout", "p": 0.5})", limits::k_max_dropouts + 1)) ==
          "chain[256]: dropout: more than the limit of 256 dropout ops in one graph");
  }
  SUBCASE("names: 64 characters, not 65") {
    const std::string name(limits::k_max_name_length, 'v');
    auto named = [](const std::string& n) {
      return spec_with(fmt::format(R"("ops": [{{"name": "{}", "op": "relu", "args": ["x"]}}], "outputs": {{"y": {{"dtype": "f32", "value": "{}"}}}})", n, n));
    };
    CHECK_NOTHROW((void)from_text(named(name)));
    CHECK(error_of(named(name + "v")) ==
          fmt::format("ops[0].name: value name '{}v' has 65 characters, more than the limit of 64", name));
  }
}

TEST_CASE("messages quote at most an excerpt of what the user wrote") {
  const std::string key(100000, 'k');
  const std::string message = error_of(spec_with(fmt::format(R"("chain": ["relu"], "{}": 1)", key)));
  CHECK(message.find("unknown key") != std::string::npos);
  CHECK(message.size() < 400);
  const std::string value = error_of(spec_with(fmt::format(R"("chain": ["relu"], "name": [{}])", repeat("12345", 4000))));
  CHECK(value.find("expected a string, got array [12345,12345,") != std::string::npos);
  CHECK(value.size() < 200);
}

// Note [Composites add all their ops or none] (src/ir/graph.cpp): a composite
// that meets the op limit leaves the graph as it was, so that a caller who
// catches the error can go on with a graph that still verifies.
TEST_CASE("a composite past the op limit adds none of its ops") {
  struct Case {
    const char* name;
    std::size_t ops;
    Value (*build)(Graph& g, Value x, Value w, Value b);
  };
  const Case cases[] = {
      {"softmax", 5, [](Graph& g, Value x, Value, Value) { return g.softmax(x); }},
      {"log_softmax", 6, [](Graph& g, Value x, Value, Value) { return g.log_softmax(x); }},
      {"rmsnorm", 6, [](Graph& g, Value x, Value w, Value) { return g.rmsnorm(x, w, 1e-6); }},
      {"layernorm", 9, [](Graph& g, Value x, Value w, Value b) { return g.layernorm(x, w, b, 1e-5); }},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    // `room` ops left before the composite: one short of its count, then exactly it.
    for (const std::size_t room : {c.ops - 1, c.ops}) {
      CAPTURE(room);
      Graph g;
      const Value x = g.input("x", DType::f32);
      const Value w = g.input("w", DType::f32, Broadcast::row);
      const Value b = g.input("b", DType::f32, Broadcast::row);
      Value last = g.add(g.mul(x, w), b);  // uses every input, so the graph verifies
      for (std::size_t i = 2; i < limits::k_max_ops - room; ++i) last = g.relu(last);
      g.output("y", last, DType::f32);
      const std::size_t nodes = g.nodes().size();
      if (room < c.ops) {
        CHECK_THROWS_WITH_AS(c.build(g, last, w, b),
                             doctest::Contains(fmt::format("{}: its {} ops would make more than the limit of 1024 ops",
                                                           c.name, c.ops).c_str()),
                             UserError);
        CHECK(g.nodes().size() == nodes);
        CHECK_NOTHROW(verify(g));
        // The graph is still usable: one more op fits.
        CHECK_NOTHROW((void)g.relu(last));
      } else {
        const Value y = c.build(g, last, w, b);
        CHECK(g.nodes().size() == nodes + c.ops);
        g.output("z", y, DType::f32);
        CHECK_NOTHROW(verify(g));
      }
    }
  }
}

TEST_CASE("a composite past the op limit in JSON is reported at its step") {
  std::string chain;
  for (std::size_t i = 0; i < limits::k_max_ops - 4; ++i) chain += R"("relu", )";
  CHECK(error_of(spec_with(fmt::format(R"("chain": [{}"softmax"])", chain))) ==
        "chain[1020]: softmax: its 5 ops would make more than the limit of 1024 ops in one graph (4 left)");
}
