// JSON schema v1 <-> KernelSpec: round trips, the chain shorthand, binding
// order, error paths. Must-fail inputs are data files: see test_errors.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <utility>

#include <nlohmann/json.hpp>

#include "epifuse/errors.hpp"
#include "epifuse/json.hpp"

using namespace epifuse;
using Json = nlohmann::ordered_json;

namespace {

// The docs/design.md §7.1 example.
constexpr std::string_view k_design_example = R"({
  "epifuse": 1,
  "name": "bias_gelu_dropout_add",
  "mainloop": "elementwise",
  "inputs": {
    "x":        {"dtype": "f32"},
    "bias":     {"dtype": "f32", "broadcast": "row"},
    "residual": {"dtype": "f32"}
  },
  "ops": [
    {"name": "z", "op": "add",       "args": ["x", "bias"]},
    {"name": "g", "op": "gelu_tanh", "args": ["z"]},
    {"name": "d", "op": "dropout",   "args": ["g"], "p": 0.1},
    {"name": "y", "op": "add",       "args": ["d", "residual"]}
  ],
  "outputs": {"y": {"dtype": "f32"}}
})";

KernelSpec design_example_api() {
  KernelSpec s;
  s.name = "bias_gelu_dropout_add";
  Graph& g = s.graph;
  Value x = g.input("x", DType::f32);
  Value bias = g.input("bias", DType::f32, Broadcast::row);
  Value residual = g.input("residual", DType::f32);
  Value z = g.add(x, bias);
  Value gl = g.gelu_tanh(z);
  Value d = g.dropout(gl, 0.1);
  Value y = g.add(d, residual);
  g.set_name(z, "z");
  g.set_name(gl, "g");
  g.set_name(d, "d");
  g.set_name(y, "y");
  g.output("y", y, DType::f32);
  return s;
}

// GEMM + bias + ReLU + dropout (the GEMM study), bf16 column-major A, f16 out.
KernelSpec gemm_bias_relu_dropout() {
  KernelSpec s;
  s.name = "gemm_bias_relu_dropout";
  s.mainloop = {MainloopKind::gemm, DType::bf16, DType::f16, Layout::col, Layout::row};
  Graph& g = s.graph;
  Value acc = g.accumulator();
  Value bias = g.input("bias", DType::f16, Broadcast::row);
  Value d = g.dropout(g.relu(g.add(acc, bias)), 0.25);
  g.output("y", d, DType::f16);
  s.default_shape = Shape{1024, 1024, 1024};
  return s;
}

// The gating layer: sigmoid(x@W1 + b1) * (x@W2 + b2).
KernelSpec dual_gemm_gating() {
  KernelSpec s;
  s.mainloop.kind = MainloopKind::dual_gemm;
  Graph& g = s.graph;
  Value acc0 = g.accumulator(0);
  Value acc1 = g.accumulator(1);
  Value b1 = g.input("bias1", DType::f16, Broadcast::row);  // b0, b1 are GEMM operands
  Value b2 = g.input("bias2", DType::f16, Broadcast::row);
  Value gate = g.sigmoid(g.add(acc0, b1));
  g.output("y", g.mul(gate, g.add(acc1, b2)), DType::f16);
  return s;
}

// Several outputs, cast, scale, both RNG modes, scalar and column inputs, fast precision.
KernelSpec many_features() {
  KernelSpec s;
  s.precision = Precision::fast;
  s.default_shape = Shape{4096, 768, 0};
  Graph& g = s.graph;
  Value x = g.input("x", DType::bf16);
  Value alpha_in = g.input("s", DType::f32, Broadcast::scalar);
  Value col = g.input("rowscale", DType::f16, Broadcast::col);
  Value a = g.scale(g.mul(x, col), -0.0625);
  Value b = g.max(a, alpha_in);
  Value d0 = g.dropout(b, 0.1);
  Value d1 = g.dropout(g.silu(d0), 1.0 / 3.0, RngMode::triton);
  Value c = g.cast(d1, DType::bf16);
  g.output("y", c, DType::bf16);
  g.output("pre", b, DType::f32);
  g.output("copy", x, DType::f16);
  return s;
}

KernelSpec reparse(const KernelSpec& s) { return spec_from_json(spec_to_json(s)); }

KernelSpec from_text(std::string_view text) { return spec_from_json_text(text, "test.json"); }

}  // namespace

TEST_CASE("the docs/design.md example parses to the graph built with the API") {
  const KernelSpec parsed = from_text(k_design_example);
  const KernelSpec api = design_example_api();
  CHECK(signature(parsed) == signature(api));
  CHECK(print(parsed) == print(api));  // names too
  CHECK(parsed.name == "bias_gelu_dropout_add");
  CHECK(parsed.mainloop.kind == MainloopKind::elementwise);
  CHECK(!parsed.default_shape);
}

TEST_CASE("graph -> JSON -> graph keeps the signature") {
  for (const KernelSpec& s :
       {design_example_api(), gemm_bias_relu_dropout(), dual_gemm_gating(), many_features()}) {
    CAPTURE(print(s));
    const KernelSpec back = reparse(s);
    CHECK(signature(back) == signature(s));
    CHECK(back.name == s.name);
    CHECK(back.mainloop == s.mainloop);
    CHECK(back.precision == s.precision);
    CHECK(back.default_shape == s.default_shape);
    // Output names are bindings and survive too.
    REQUIRE(back.graph.outputs().size() == s.graph.outputs().size());
    for (std::size_t i = 0; i < s.graph.outputs().size(); ++i)
      CHECK(back.graph.outputs()[i].name == s.graph.outputs()[i].name);
    // And the written text is a fixed point.
    CHECK(spec_to_json(back).dump() == spec_to_json(s).dump());
  }
}

TEST_CASE("spec_to_json writes the full form") {
  const Json j = spec_to_json(gemm_bias_relu_dropout());
  CHECK(j["epifuse"] == 1);
  CHECK(j["mainloop"]["kind"] == "gemm");
  CHECK(j["mainloop"]["a"] == "bf16");
  CHECK(j["mainloop"]["a_layout"] == "col");
  CHECK(j["inputs"]["bias"]["broadcast"] == "row");
  CHECK(j["ops"].size() == 3);
  CHECK(j["ops"][0]["args"][0] == "acc");
  CHECK(j["ops"][2]["p"] == 0.25);
  CHECK(!j["ops"][2].contains("rng"));  // the default is not written
  CHECK(j["outputs"].contains("y"));
  CHECK(j["shape"] == Json{1024, 1024, 1024});
  CHECK(!j.contains("precision"));
  // The unnamed op stored by output y takes its name; the rest are v<index>.
  CHECK(j["ops"][2]["name"] == "y");
  CHECK(j["ops"][0]["name"] == "v2");

  // math is written only when it is not the default, and reads back.
  CHECK(!j["mainloop"].contains("math"));
  KernelSpec t = gemm_bias_relu_dropout();
  t.mainloop.a = t.mainloop.b = DType::f32;
  t.mainloop.math = GemmMath::tf32;
  const Json tj = spec_to_json(t);
  CHECK(tj["mainloop"]["math"] == "tf32");
  CHECK(signature_bytes(spec_from_json(tj)) == signature_bytes(t));
  KernelSpec exact = t;
  exact.mainloop.math = GemmMath::exact;
  CHECK(signature_bytes(exact) != signature_bytes(t));  // a different kernel, a different key

  const Json m = spec_to_json(many_features());
  CHECK(m["precision"] == "fast");
  CHECK(m["shape"] == Json{4096, 768});
  CHECK(m["ops"][5]["rng"] == "triton");
  CHECK(m["ops"][6]["to"] == "bf16");
  CHECK(m["ops"][1]["alpha"] == -0.0625);
  CHECK(m["outputs"]["copy"] == Json{{"dtype", "f16"}, {"value", "x"}});
}

TEST_CASE("attributes round-trip exactly") {
  for (double p : {0.0, 1.0, 0.1, 1.0 / 3.0, 1e-7, 0.9999999999999999}) {
    KernelSpec s;
    Value x = s.graph.input("x", DType::f32);
    s.graph.output("y", s.graph.scale(s.graph.dropout(x, p), p * 7 - 3.5), DType::f32);
    const KernelSpec back = spec_from_json_text(spec_to_json(s).dump());
    CHECK(back.graph.nodes()[1].p == p);
    CHECK(back.graph.nodes()[2].alpha == p * 7 - 3.5);
    CHECK(signature(back) == signature(s));
  }
}

TEST_CASE("generated value names avoid input and op names") {
  KernelSpec s;
  Graph& g = s.graph;
  Value x = g.input("x", DType::f32);
  Value v1 = g.input("v2", DType::f32);  // the name the first op would get
  Value a = g.add(x, v1);                // node 2: unnamed
  Value b = g.relu(a);                   // node 3
  g.set_name(b, "v3_");
  Value c = g.relu(b);                   // node 4
  g.set_name(c, "v4");
  Value d = g.tanh(c);                   // node 5: unnamed, stored under two outputs
  g.output("y", d, DType::f32);
  g.output("z", d, DType::f16);
  g.output("x", a, DType::f32);          // an output named like an input
  const Json j = spec_to_json(s);
  CHECK(j["ops"][0]["name"] == "v2_");
  CHECK(j["ops"][3]["name"] == "y");
  CHECK(j["outputs"]["z"]["value"] == "y");
  CHECK(j["outputs"]["x"]["value"] == "v2_");
  const KernelSpec back = spec_from_json(j);
  CHECK(signature(back) == signature(s));
  CHECK(back.graph.outputs()[2].name == "x");
}

TEST_CASE("the chain shorthand desugars to the full form") {
  SUBCASE("the docs/design.md chain") {
    const KernelSpec chained = from_text(R"({
      "epifuse": 1,
      "inputs": {"x": {"dtype": "f32"}, "bias": {"dtype": "f32", "broadcast": "row"},
                 "residual": {"dtype": "f32"}},
      "chain": ["bias", "gelu_tanh", {"op": "dropout", "p": 0.1}, "residual"],
      "out": "f32"
    })");
    CHECK(signature(chained) == signature(from_text(k_design_example)));
    REQUIRE(chained.graph.outputs().size() == 1);
    CHECK(chained.graph.outputs()[0].name == "y");
    // "out" defaults to f32 and {"dropout": p} is the same step.
    const KernelSpec short_form = from_text(R"({
      "epifuse": 1,
      "inputs": {"x": {"dtype": "f32"}, "bias": {"dtype": "f32", "broadcast": "row"},
                 "residual": {"dtype": "f32"}},
      "chain": ["bias", "gelu_tanh", {"dropout": 0.1}, "residual"]
    })");
    CHECK(signature(short_form) == signature(chained));
  }
  SUBCASE("gemm chain starts from acc") {
    const KernelSpec chained = from_text(R"({
      "epifuse": 1,
      "mainloop": {"kind": "gemm", "a": "bf16", "b": "f16", "a_layout": "col"},
      "inputs": {"bias": {"dtype": "f16", "broadcast": "row"}},
      "chain": ["bias", "relu", {"op": "dropout", "p": 0.25}],
      "out": "f16",
      "shape": [1024, 1024, 1024]
    })");
    KernelSpec api = gemm_bias_relu_dropout();
    CHECK(signature(chained) == signature(api));
    CHECK(chained.default_shape == api.default_shape);
  }
  SUBCASE("every step form") {
    const KernelSpec chained = from_text(R"({
      "epifuse": 1,
      "inputs": {"x": {"dtype": "f16"}, "gate": {"dtype": "f16"}, "s": {"dtype": "f32", "broadcast": "scalar"}},
      "chain": [{"scale": 2.5}, {"op": "scale", "alpha": -1}, {"mul": "gate"}, {"op": "sub", "arg": "s"},
                {"max": "s"}, {"op": "min", "arg": "gate"}, "silu", {"cast": "bf16"},
                {"op": "cast", "to": "f16"}, {"op": "dropout", "p": 0.5, "rng": "triton"}, "gate"],
      "out": "bf16"
    })");
    const KernelSpec full = from_text(R"({
      "epifuse": 1,
      "inputs": {"x": {"dtype": "f16"}, "gate": {"dtype": "f16"}, "s": {"dtype": "f32", "broadcast": "scalar"}},
      "ops": [
        {"name": "a", "op": "scale", "args": ["x"], "alpha": 2.5},
        {"name": "b", "op": "scale", "args": ["a"], "alpha": -1},
        {"name": "c", "op": "mul", "args": ["b", "gate"]},
        {"name": "d", "op": "sub", "args": ["c", "s"]},
        {"name": "e", "op": "max", "args": ["d", "s"]},
        {"name": "f", "op": "min", "args": ["e", "gate"]},
        {"name": "g", "op": "silu", "args": ["f"]},
        {"name": "h", "op": "cast", "args": ["g"], "to": "bf16"},
        {"name": "i", "op": "cast", "args": ["h"], "to": "f16"},
        {"name": "j", "op": "dropout", "args": ["i"], "p": 0.5, "rng": "triton"},
        {"name": "k", "op": "add", "args": ["j", "gate"]}
      ],
      "outputs": {"k": {"dtype": "bf16"}}
    })");
    CHECK(signature(chained) == signature(full));
  }
  SUBCASE("an empty chain stores the leaf") {
    const KernelSpec plain_gemm = from_text(R"({"epifuse": 1, "mainloop": "gemm", "chain": []})");
    CHECK(plain_gemm.mainloop.kind == MainloopKind::gemm);
    CHECK(plain_gemm.mainloop.a == DType::f16);
    REQUIRE(plain_gemm.graph.outputs().size() == 1);
    CHECK(plain_gemm.graph.node(plain_gemm.graph.outputs()[0].value).kind == NodeKind::accumulator);
    CHECK(signature(reparse(plain_gemm)) == signature(plain_gemm));
  }
}

TEST_CASE("renaming inputs, values and outputs keeps the signature") {
  std::string renamed(k_design_example);
  const std::pair<std::string_view, std::string_view> renames[] = {
      {"\"x\"", "\"inp\""}, {"\"bias\"", "\"b\""}, {"\"residual\"", "\"skip\""},
      {"\"z\"", "\"pre\""}, {"\"y\"", "\"out\""}};
  for (auto [from, to] : renames) {
    for (auto pos = renamed.find(from); pos != std::string::npos; pos = renamed.find(from, pos))
      renamed.replace(pos, from.size(), to);
  }
  const KernelSpec a = from_text(k_design_example);
  const KernelSpec b = from_text(renamed);
  CHECK(signature(a) == signature(b));
  CHECK(print(a) != print(b));
  CHECK(b.graph.find("inp").valid());
}

TEST_CASE("input declaration order is binding order") {
  const auto spec_with = [](std::string_view inputs) {
    return from_text(fmt::format(R"({{"epifuse": 1, "inputs": {{{}}},
      "ops": [{{"name": "y", "op": "sub", "args": ["x", "r"]}}], "outputs": {{"y": {{"dtype": "f32"}}}}}})",
                                 inputs));
  };
  const KernelSpec xr = spec_with(R"("x": {"dtype": "f32"}, "r": {"dtype": "f32"})");
  const KernelSpec rx = spec_with(R"("r": {"dtype": "f32"}, "x": {"dtype": "f32"})");
  CHECK(xr.graph.node(xr.graph.inputs()[0]).name == "x");
  CHECK(rx.graph.node(rx.graph.inputs()[0]).name == "r");
  // sub(in0, in1) vs sub(in1, in0): a different binding, a different signature.
  CHECK(signature(xr) != signature(rx));
  // And the order survives a round trip.
  CHECK(reparse(rx).graph.node(reparse(rx).graph.inputs()[0]).name == "r");
}

TEST_CASE("dropout streams follow the order ops are listed") {
  const KernelSpec s = from_text(R"({"epifuse": 1, "inputs": {"x": {"dtype": "f32"}},
    "chain": [{"dropout": 0.1}, "relu", {"op": "dropout", "p": 0.2, "rng": "triton"}]})");
  CHECK(s.graph.dropout_count() == 2);
  CHECK(s.graph.nodes()[1].stream == 0);
  CHECK(s.graph.nodes()[3].stream == 1);
  CHECK(s.graph.nodes()[3].rng == RngMode::triton);
}

TEST_CASE("error messages start with the JSON path") {
  std::string doc(k_design_example);
  doc.replace(doc.find("\"p\": 0.1"), 8, "\"p\": 1.5");
  CHECK_THROWS_WITH_AS(from_text(doc), "ops[2].p: dropout probability must be in [0, 1], got 1.5",
                       UserError);
  try {
    from_text(doc);
  } catch (const JsonError& e) {
    CHECK(e.path() == "ops[2].p");
    CHECK(e.message() == "dropout probability must be in [0, 1], got 1.5");
  }
  CHECK_THROWS_WITH_AS(spec_from_json(Json::array()), "(root): a spec is a JSON object, got array []",
                       UserError);
  // A document built in memory can hold NaN, which JSON text cannot.
  Json j = Json::parse(k_design_example);
  j["ops"][2]["p"] = std::nan("");
  CHECK_THROWS_WITH_AS(spec_from_json(j), "ops[2].p: expected a finite number, got nan", UserError);
  j["ops"][2]["p"] = 0.1;
  j["inputs"]["bias"]["broadcast"] = "rows";
  CHECK_THROWS_WITH_AS(
      spec_from_json(j),
      "inputs.bias.broadcast: unknown broadcast 'rows' (expected full, row, col, scalar)", UserError);
}

TEST_CASE("syntax errors name the source and the position") {
  CHECK_THROWS_WITH_AS(spec_from_json_text("{\"epifuse\": 1,\n  \"inputs\": }", "chain.json"),
                       doctest::Contains("chain.json: invalid JSON at byte 28 (line 2, column 13, in inputs)"),
                       UserError);
  CHECK_THROWS_WITH_AS(spec_from_json_text("{\"epifuse\": 1, \"epifuse\": 1}"),
                       doctest::Contains("epifuse: duplicate key 'epifuse'"), UserError);
}

TEST_CASE("load_spec reports a file it cannot read") {
  CHECK_THROWS_WITH_AS(load_spec("/nonexistent/dir/spec.json"),
                       doctest::Contains("/nonexistent/dir/spec.json: cannot read spec"), UserError);
  CHECK_THROWS_WITH_AS(load_spec(EPIFUSE_SOURCE_DIR), doctest::Contains("it is a directory"),
                       UserError);
}

TEST_CASE("graphs whose leaves are interleaved with ops round-trip") {
  // The JSON form lists every leaf before every op. The signature numbers values
  // by node position, so a graph built as input, op, input, op comes back with
  // other numbers unless the signature numbers op values among ops only.
  KernelSpec s;
  Graph& g = s.graph;
  Value x = g.input("x", DType::f32);
  Value r = g.relu(x);
  Value bias = g.input("bias", DType::f32, Broadcast::row);
  g.output("y", g.add(r, bias), DType::f32);
  CHECK(signature(reparse(s)) == signature(s));
}

TEST_CASE("every example chain loads and round-trips") {
  const auto dir = std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples" / "chains";
  if (!std::filesystem::is_directory(dir)) return;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    CAPTURE(entry.path().string());
    KernelSpec s;
    CHECK_NOTHROW(s = load_spec(entry.path()));
    CHECK(signature(reparse(s)) == signature(s));
  }
}

namespace {

// x -> add_scalar -> softmax, log_softmax, rmsnorm and layernorm, each written
// as a composite op; the API graph of the same, built with the builder.
constexpr std::string_view k_composites = R"({
  "epifuse": 1,
  "inputs": {"x": {"dtype": "bf16"}, "w": {"dtype": "bf16", "broadcast": "row"},
             "b": {"dtype": "f32", "broadcast": "row"}},
  "ops": [
    {"name": "s",  "op": "add_scalar",  "args": ["x"], "c": -0.25},
    {"name": "p",  "op": "softmax",     "args": ["s"]},
    {"name": "lp", "op": "log_softmax", "args": ["p"]},
    {"name": "r",  "op": "rmsnorm",     "args": ["lp", "w"], "eps": 1e-3},
    {"name": "y",  "op": "layernorm",   "args": ["r", "w", "b"]},
    {"name": "z",  "op": "rmsnorm",     "args": ["y", "w"]}
  ],
  "outputs": {"y": {"dtype": "bf16"}, "z": {"dtype": "f32"}}
})";

KernelSpec composites_api() {
  KernelSpec s;
  Graph& g = s.graph;
  const Value x = g.input("x", DType::bf16);
  const Value w = g.input("w", DType::bf16, Broadcast::row);
  const Value b = g.input("b", DType::f32, Broadcast::row);
  const Value y = g.layernorm(g.rmsnorm(g.log_softmax(g.softmax(g.add_scalar(x, -0.25))), w, 1e-3), w, b, 1e-5);
  g.output("y", y, DType::bf16);
  g.output("z", g.rmsnorm(y, w, 1e-6), DType::f32);
  return s;
}

// The message of the UserError that reading `text` throws.
std::string error_of(std::string_view text) {
  try {
    (void)from_text(text);
  } catch (const UserError& e) {
    return e.what();
  }
  return "(accepted)";
}

// A one-input spec around `body` (ops + outputs or a chain) with x, w, b declared.
std::string with_norm_inputs(std::string_view body) {
  return fmt::format(R"({{"epifuse": 1, "inputs": {{"x": {{"dtype": "f32"}},
    "w": {{"dtype": "f32", "broadcast": "row"}}, "b": {{"dtype": "f32", "broadcast": "row"}}}}, {}}})",
                     body);
}

}  // namespace

TEST_CASE("composites and add_scalar in JSON: the builder's graph, defaults, names, round trip") {
  const KernelSpec parsed = from_text(k_composites);
  CHECK(signature(parsed) == signature(composites_api()));
  // The op's name is the last node it made; the graph has no composite node.
  const Graph& g = parsed.graph;
  CHECK(g.node(g.find("p")).op == OpKind::div);
  CHECK(g.node(g.find("lp")).op == OpKind::sub);
  CHECK(g.node(g.find("y")).op == OpKind::add);
  CHECK(g.node(g.find("s")).alpha == -0.25);
  // Default eps: layernorm 1e-5 (torch.nn.LayerNorm), rmsnorm 1e-6.
  std::vector<double> eps;
  for (const Node& n : g.nodes())
    if (n.kind == NodeKind::op && n.op == OpKind::add_scalar) eps.push_back(n.alpha);
  CHECK(eps == std::vector<double>{-0.25, 1e-3, 1e-5, 1e-6});
  // Written back as primitives, with add_scalar's c; it reads back to the same kernel.
  const Json j = spec_to_json(parsed);
  for (const Json& op : j["ops"]) {
    CHECK(op["op"] != "softmax");
    CHECK(op["op"] != "rmsnorm");
  }
  CHECK(j["ops"][0] == Json::parse(R"({"name": "s", "op": "add_scalar", "args": ["x"], "c": -0.25})"));
  CHECK(signature(reparse(parsed)) == signature(parsed));
  CHECK(spec_to_json(reparse(parsed)).dump() == j.dump());
  // Every c survives the round trip exactly, and different c's are different kernels.
  KernelSpec tiny;
  tiny.graph.output("y", tiny.graph.add_scalar(tiny.graph.input("x", DType::f32), 0x1p-24 + 0x1p-50), DType::f32);
  CHECK(reparse(tiny).graph.nodes()[1].alpha == 0x1p-24 + 0x1p-50);
  CHECK(signature_bytes(reparse(tiny)) == signature_bytes(tiny));
}

TEST_CASE("the chain shorthand takes add_scalar, the softmaxes and the norms") {
  const KernelSpec chained = from_text(with_norm_inputs(R"("chain": [
      {"add_scalar": 0.5}, {"op": "add_scalar", "c": -1}, "softmax", "log_softmax",
      {"op": "rmsnorm", "arg": "w", "eps": 1e-4}, {"rmsnorm": "w"},
      {"op": "layernorm", "args": ["w", "b"], "eps": 0.5}, {"layernorm": ["w", "b"]}], "out": "bf16")"));
  KernelSpec api;
  Graph& g = api.graph;
  const Value x = g.input("x", DType::f32);
  const Value w = g.input("w", DType::f32, Broadcast::row);
  const Value b = g.input("b", DType::f32, Broadcast::row);
  Value v = g.log_softmax(g.softmax(g.add_scalar(g.add_scalar(x, 0.5), -1)));
  v = g.rmsnorm(g.rmsnorm(v, w, 1e-4), w, 1e-6);
  g.output("y", g.layernorm(g.layernorm(v, w, b, 0.5), w, b, 1e-5), DType::bf16);
  CHECK(signature(chained) == signature(api));
}

TEST_CASE("composite and add_scalar errors name their JSON path") {
  const auto ops = [](std::string_view op_list, std::string_view out = "y") {
    return with_norm_inputs(fmt::format(R"("ops": [{}], "outputs": {{"{}": {{"dtype": "f32"}}}})", op_list, out));
  };
  // eps: at its own path, naming the value.
  CHECK(error_of(ops(R"({"name": "h", "op": "relu", "args": ["x"]},
                        {"name": "y", "op": "rmsnorm", "args": ["h", "w"], "eps": 0})")) ==
        "ops[1].eps: rmsnorm: eps must be a positive number finite in float32 (added in fp32), got 0");
  CHECK(error_of(ops(R"({"name": "y", "op": "layernorm", "args": ["x", "w", "b"], "eps": -1e-5})")) ==
        "ops[0].eps: layernorm: eps must be a positive number finite in float32 (added in fp32), got -1e-05");
  CHECK(error_of(ops(R"({"name": "y", "op": "layernorm", "args": ["x", "w", "b"], "eps": 1e-50})")) ==
        "ops[0].eps: layernorm: eps must be a positive number finite in float32 (added in fp32), got 1e-50");
  CHECK(error_of(ops(R"({"name": "y", "op": "rmsnorm", "args": ["x", "w"], "eps": "1e-6"})")) ==
        "ops[0].eps: expected a number, got string \"1e-6\"");
  // c: required, finite in float32.
  CHECK(error_of(ops(R"({"name": "y", "op": "add_scalar", "args": ["x"]})")) ==
        "ops[0]: add_scalar needs the constant 'c' (a finite number)");
  CHECK(error_of(ops(R"({"name": "y", "op": "add_scalar", "args": ["x"], "c": 1e39})")) ==
        "ops[0].c: add_scalar: c 1e+39 is not finite in float32 (|c| <= 3.4028235e+38)");
  // Operands: count, and the norms' row vectors.
  CHECK(error_of(ops(R"({"name": "y", "op": "rmsnorm", "args": ["x"]})")) ==
        "ops[0].args: rmsnorm takes 2 arguments, got 1");
  CHECK(error_of(ops(R"({"name": "y", "op": "layernorm", "args": ["x", "x", "b"]})")) ==
        "ops[0]: layernorm: weight must be a row vector ([N], broadcast row), got a full value");
  CHECK(error_of(ops(R"({"name": "y", "op": "softmax", "args": ["w"]})")) ==
        "ops[0]: row_max reduces a full [M,N] value along its rows; its operand is row");
  // Keys: only the op's own attributes.
  CHECK(error_of(ops(R"({"name": "y", "op": "softmax", "args": ["x"], "eps": 1e-5})")) ==
        "ops[0].eps: unknown key 'eps' in op softmax (allowed: name, op, args)");
  CHECK(error_of(ops(R"({"name": "y", "op": "layernorm", "args": ["x", "w", "b"], "c": 1})")) ==
        "ops[0].c: unknown key 'c' in op layernorm (allowed: name, op, args, eps)");
  // An unknown op: the list of known ones has the composites too.
  CHECK(error_of(ops(R"({"name": "y", "op": "rms_norm", "args": ["x", "w"]})"))
            .find("ops[0].op: unknown op 'rms_norm' (known ops: add, ") == 0);
  CHECK(error_of(ops(R"({"name": "y", "op": "rms_norm", "args": ["x", "w"]})"))
            .find("div_n, softmax, log_softmax, rmsnorm, layernorm)") != std::string::npos);

  // The chain shorthand.
  const auto chain = [](std::string_view steps) { return with_norm_inputs(fmt::format(R"("chain": [{}])", steps)); };
  CHECK(error_of(chain(R"("rmsnorm")")) ==
        R"(chain[0]: rmsnorm needs a second operand: write {"op": "rmsnorm", "arg": INPUT})");
  CHECK(error_of(chain(R"("relu", "layernorm")")) ==
        R"(chain[1]: layernorm needs 2 more operands: write {"op": "layernorm", "args": [INPUT, INPUT]})");
  CHECK(error_of(chain(R"("add_scalar")")) ==
        R"(chain[0]: add_scalar needs its 'c': write {"op": "add_scalar", "c": ...} or {"add_scalar": ...})");
  CHECK(error_of(chain(R"({"op": "layernorm", "args": "w"})")) ==
        "chain[0].args: layernorm takes 2 inputs after the current value, as \"args\": [INPUT, INPUT], "
        "got string \"w\"");
  CHECK(error_of(chain(R"({"layernorm": ["w", "bb"]})")) ==
        "chain[0].layernorm[1]: 'bb' is not a declared input (a chain step's operands after the current value are "
        "declared inputs)");
  CHECK(error_of(chain(R"({"op": "layernorm", "arg": "w"})")) ==
        "chain[0].arg: unknown key 'arg' in chain op layernorm (allowed: op, args, eps)");
  CHECK(error_of(chain(R"({"op": "rmsnorm", "arg": "w", "eps": 1e39})")) ==
        "chain[0].eps: rmsnorm: eps must be a positive number finite in float32 (added in fp32), got 1e+39");
  CHECK(error_of(chain(R"("relu", {"softmax": true})")) ==
        R"(chain[1].softmax: softmax takes no value: write the step as "softmax")");
  CHECK(error_of(chain(R"({"add_scalar": -1e39})")) ==
        "chain[0].add_scalar: add_scalar: c -1e+39 is not finite in float32 (|c| <= 3.4028235e+38)");
  CHECK(error_of(chain(R"({"rmsnorm": "x"})")) ==
        "chain[0]: rmsnorm: weight must be a row vector ([N], broadcast row), got a full value");
}

TEST_CASE("control characters in names: refused, and quoted escaped and whole") {
  using namespace std::string_literals;
  // Built in memory, so that every byte is exactly what the test says.
  Json j = {{"epifuse", 1}, {"inputs", {{"x", {{"dtype", "f32"}}}}}, {"chain", {"relu"}}};
  // A chain name is display text, but no control character: C0, DEL, C1 (U+009B is CSI).
  for (const std::string& name : {"a\x1b[2Jb"s, "a\0b"s, "a\x7f"s, "a\xc2\x9b" "31m"s}) {
    CAPTURE(name);
    j["name"] = name;
    CHECK_THROWS_WITH_AS(spec_from_json(j), doctest::Contains("name: the chain name must not contain control characters"),
                         UserError);
  }
  j["name"] = "gemm + bias, \xc3\xa9t\xc3\xa9";  // printable text, UTF-8 beyond ASCII included
  CHECK_NOTHROW((void)spec_from_json(j));
  // An input name is an identifier; the message quotes it whole and inert, its
  // path in JSON's escapes, the name in \xNN (a NUL no longer cuts what() short).
  j["inputs"]["b\x7f\xc2\x9b\0z"s] = {{"dtype", "f32"}};
  CHECK_THROWS_WITH_AS(spec_from_json(j),
                       R"(inputs["b\u007f\u009b\u0000z"]: input name 'b\x7f\xc2\x9b\x00z' must be an identifier ([A-Za-z_][A-Za-z0-9_]*))",
                       UserError);
}

TEST_CASE("an explicit dropout stream is read, checked and written only where it differs from the default") {
  const std::string doc = R"({"epifuse": 1, "mainloop": "elementwise", "inputs": {"x": {"dtype": "f32"}},
    "ops": [{"name": "a", "op": "dropout", "args": ["x"], "p": 0.1, "stream": 3},
            {"name": "b", "op": "dropout", "args": ["a"], "p": 0.1},
            {"name": "c", "op": "dropout", "args": ["b"], "p": 0.1, "stream": 0}],
    "outputs": {"c": {"dtype": "f32"}}})";
  const KernelSpec spec = spec_from_json_text(doc);
  CHECK(spec.graph.node(spec.graph.find("a")).stream == 3);
  CHECK(spec.graph.node(spec.graph.find("b")).stream == 4);
  CHECK(spec.graph.node(spec.graph.find("c")).stream == 0);
  const auto j = spec_to_json(spec);
  CHECK(signature(spec_from_json(j)) == signature(spec));
  CHECK(j["ops"][0]["stream"] == 3);
  CHECK_FALSE(j["ops"][1].contains("stream"));
  CHECK(j["ops"][2]["stream"] == 0);
  std::string bad = doc;
  bad.replace(bad.find("\"stream\": 3"), 11, "\"stream\": 2.0");
  CHECK(error_of(bad).find("ops[0].stream: a dropout stream is an integer in [0, 256)") == 0);
  bad = doc;
  bad.replace(bad.find("\"stream\": 3"), 11, "\"stream\": 300");
  CHECK(error_of(bad).find("ops[0].stream: dropout: stream must be in [0, 256)") == 0);
}
