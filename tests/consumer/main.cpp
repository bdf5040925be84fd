// A program that links epifuse as an outside project does (tests/consumer/
// CMakeLists.txt, tools/test_install.sh): it builds a chain with the C++ builder
// and checks the CPU reference against numbers computed here by hand, parses a
// JSON chain from a string and checks its result, and checks that a bad chain
// arrives as an epifuse::JsonError. Prints one line per check; exits 1 on any
// mismatch.
#include <cmath>
#include <cstdio>
#include <string>

#include "epifuse/epifuse.hpp"

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("consumer: %s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

bool approx_equal(double got, double want) { return std::fabs(got - want) <= 1e-5 * std::fmax(1.0, std::fabs(want)); }

// gelu_tanh(v) = 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))), in double.
double gelu_tanh(double v) { return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }

// y = dropout(gelu_tanh(x + bias), p = 0.25): every element is either 0 or
// gelu_tanh(x + bias) / 0.75, and about 3/4 of them are kept.
void builder_chain() {
  using namespace epifuse;
  KernelSpec spec;
  spec.name = "consumer_bias_gelu_dropout";
  Graph& g = spec.graph;
  const Value x = g.input("x", DType::f32);
  const Value bias = g.input("bias", DType::f32, Broadcast::row);
  g.output("y", g.dropout(g.gelu_tanh(g.add(x, bias)), 0.25), DType::f32);
  verify(spec);

  const Shape shape{4, 64};
  TensorMap inputs;
  inputs["x"] = HostTensor::zeros(DType::f32, {shape.m, shape.n});
  inputs["bias"] = HostTensor::zeros(DType::f32, {shape.n});
  for (std::int64_t i = 0; i < shape.m * shape.n; ++i) inputs["x"].set(i, 0.5f * static_cast<float>(i % shape.n % 9 - 4));
  for (std::int64_t j = 0; j < shape.n; ++j) inputs["bias"].set(j, 0.25f * static_cast<float>(j % 3));
  LaunchArgs args;
  args.seed = 42;
  const HostTensor y = evaluate(spec, shape, inputs, args).at("y");

  int kept = 0, wrong = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    const double v = inputs["x"].get(i) + inputs["bias"].get(i % shape.n);
    const double want = gelu_tanh(v) / 0.75;
    if (y.get(i) == 0.0f && want != 0.0) continue;  // dropped
    if (approx_equal(y.get(i), want)) ++kept;
    else if (++wrong <= 3) std::printf("consumer:      y[%lld] = %.9g, want 0 or %.9g\n", static_cast<long long>(i), y.get(i), want);
  }
  check(wrong == 0, "builder chain: every y is 0 or gelu_tanh(x + bias) / (1 - p)");
  check(kept > 0.6 * y.numel() && kept < 0.9 * y.numel(),
        "builder chain: " + std::to_string(kept) + " of " + std::to_string(y.numel()) + " kept (p = 0.25)");
  // x[0,5] + bias[5] = 0.5 + 0.5 = 1, and gelu_tanh(1) = 0.84119199...
  check(std::fabs(gelu_tanh(1.0) - 0.8411919906) < 1e-9 &&
            (y.get(5) == 0.0f || approx_equal(y.get(5), 0.8411919906 / 0.75)),
        "builder chain: y[0,5] is 0 or gelu_tanh(1) / 0.75 = 1.12158932");
  // The mask is a function of (seed, offset, element): the same launch gives the same y.
  const HostTensor again = evaluate(spec, shape, inputs, args).at("y");
  check(again.bytes == y.bytes, "builder chain: the same seed gives the same y");
}

// y = scale(relu(x + bias), 2) from the chain shorthand, on values chosen so
// that y is exact: y[i, j] = 2 * max(0, x + bias).
void json_chain() {
  using namespace epifuse;
  const KernelSpec spec = spec_from_json_text(R"({
    "epifuse": 1,
    "name": "consumer_json",
    "mainloop": "elementwise",
    "inputs": {"x": {"dtype": "f32"}, "bias": {"dtype": "f32", "broadcast": "row"}},
    "chain": ["bias", "relu", {"scale": 2}],
    "out": "f32"
  })", "consumer.json");
  const Shape shape{2, 3};
  TensorMap inputs;
  inputs["x"] = HostTensor::zeros(DType::f32, {2, 3});
  inputs["bias"] = HostTensor::zeros(DType::f32, {3});
  const float x[6] = {-2, -1, 0, 1, 2, 3}, bias[3] = {0.5f, 1.5f, -0.25f};
  for (int i = 0; i < 6; ++i) inputs["x"].set(i, x[i]);
  for (int j = 0; j < 3; ++j) inputs["bias"].set(j, bias[j]);
  const HostTensor y = evaluate(spec, shape, inputs, LaunchArgs{}).at("y");
  const float want[6] = {0, 1, 0, 3, 7, 5.5f};
  bool equal = y.numel() == 6;
  for (int i = 0; equal && i < 6; ++i) equal = y.get(i) == want[i];
  check(equal, "JSON chain: y = 2 * relu(x + bias) = [0, 1, 0, 3, 7, 5.5]");

  try {
    (void)spec_from_json_text(R"({"epifuse": 1, "inputs": {"x": {"dtype": "f32"}}, "chain": ["gelu"]})", "bad.json");
    check(false, "JSON chain: an unknown op is refused");
  } catch (const JsonError& e) {
    check(e.path() == "chain[0]", std::string("JSON chain: an unknown op is a JsonError at chain[0] (") + e.what() + ")");
  }
}

}  // namespace

int main() {
  std::printf("consumer: epifuse %s\n", EPIFUSE_VERSION);
  try {
    builder_chain();
    json_chain();
  } catch (const epifuse::Error& e) {
    std::fprintf(stderr, "consumer: FAIL: %s\n", e.what());
    return 1;
  }
  std::printf("consumer: %s\n", failures == 0 ? "all checks passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
