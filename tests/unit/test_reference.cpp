// The reference evaluator against hand-computed values: every op, special
// values, GEMM and dual GEMM on integer matrices, broadcasting, rounding at the
// store, and the input checks.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "epifuse/codegen.hpp"
#include "epifuse/compare.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/reference.hpp"

using namespace epifuse;

namespace {

const float inf = std::numeric_limits<float>::infinity();
const float nan_ = std::numeric_limits<float>::quiet_NaN();

HostTensor tensor(DType dt, std::vector<std::int64_t> shape, std::vector<float> values) {
  HostTensor t = HostTensor::zeros(dt, std::move(shape));
  REQUIRE(static_cast<std::int64_t>(values.size()) == t.numel());
  for (std::size_t i = 0; i < values.size(); ++i) t.set(static_cast<std::int64_t>(i), values[i]);
  return t;
}

std::vector<float> values(const HostTensor& t) {
  std::vector<float> v;
  for (std::int64_t i = 0; i < t.numel(); ++i) v.push_back(t.get(i));
  return v;
}

// Runs y = op(x) elementwise over the given points, f32 in and out.
std::vector<float> apply(const std::function<Value(Graph&, Value)>& op, std::vector<float> xs) {
  KernelSpec s;
  Value x = s.graph.input("x", DType::f32);
  s.graph.output("y", op(s.graph, x), DType::f32);
  const auto n = static_cast<std::int64_t>(xs.size());
  return values(evaluate(s, {1, n, 0}, {{"x", tensor(DType::f32, {1, n}, xs)}}, {}).at("y"));
}

// Bitwise equality, except that any NaN equals any NaN.
bool same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  std::uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

void check_points(const char* name, const std::function<Value(Graph&, Value)>& op,
                  std::vector<std::pair<float, float>> points) {
  std::vector<float> xs;
  for (auto [x, y] : points) xs.push_back(x);
  const auto ys = apply(op, xs);
  for (std::size_t i = 0; i < points.size(); ++i) {
    INFO(name << "(" << points[i].first << ") = " << ys[i] << ", want " << points[i].second);
    CHECK(same(ys[i], points[i].second));
  }
}

}  // namespace

// Expected values: Python's math module in double on the same fp32 inputs,
// rounded to fp32 (struct.pack('<f')), printed with float.hex():
//   gelu_tanh: 0.5*x*(1+math.tanh(0.7978845608028654*(x+0.044715*x**3)))
//   gelu_erf:  0.5*x*(1+math.erf(x/math.sqrt(2)))
//   sigmoid:   1/(1+math.exp(-x));  silu: x/(1+math.exp(-x));  tanh: math.tanh(x)
TEST_CASE("activations at chosen points match Python's math module") {
  check_points("gelu_tanh", [](Graph& g, Value x) { return g.gelu_tanh(x); },
               {{-3.0f, -0x1.dcc2ap-9f}, {-1.0f, -0x1.453d22p-3f}, {0.0f, 0.0f},
                {0.5f, 0x1.6202dap-2f}, {1.0f, 0x1.aeb0b8p-1f}, {3.0f, 0x1.7f88d0p+1f},
                // The naive formula cancels to 0 here; the reference computes it as
                // x/(1+exp(-2u)) (the same function): Python gives -0x1.47c8fep-123.
                {-10.0f, -0x1.47c8fep-123f}});
  check_points("gelu_erf", [](Graph& g, Value x) { return g.gelu_erf(x); },
               {{-3.0f, -0x1.096698p-8f}, {-1.0f, -0x1.44ed0cp-3f}, {0.5f, 0x1.62075ep-2f},
                {1.0f, 0x1.aec4bep-1f}, {3.0f, 0x1.7f7b4cp+1f}});
  check_points("sigmoid", [](Graph& g, Value x) { return g.sigmoid(x); },
               {{-3.0f, 0x1.848344p-5f}, {-1.0f, 0x1.136562p-2f}, {0.0f, 0.5f},
                {0.5f, 0x1.3eb2fep-1f}, {2.0f, 0x1.c2f7d6p-1f}});
  check_points("silu", [](Graph& g, Value x) { return g.silu(x); },
               {{-3.0f, -0x1.236272p-3f}, {-1.0f, -0x1.136562p-2f}, {0.5f, 0x1.3eb2fep-2f},
                {2.0f, 0x1.c2f7d6p+0f}});
  check_points("tanh", [](Graph& g, Value x) { return g.tanh(x); },
               {{-1.0f, -0x1.85efacp-1f}, {0.5f, 0x1.d9353ep-2f}, {2.0f, 0x1.ed9506p-1f}});
  check_points("relu", [](Graph& g, Value x) { return g.relu(x); },
               {{-2.5f, 0.0f}, {-0.0f, 0.0f}, {0.0f, 0.0f}, {1.25f, 1.25f}});
  // 0.1f*3 in fp32: Python f32(f32(0.1)*3.0) = 0x1.333334p-2.
  check_points("scale", [](Graph& g, Value x) { return g.scale(x, 3.0); },
               {{0.1f, 0x1.333334p-2f}, {-2.0f, -6.0f}});
  // alpha is a runtime fp32 scalar: float(0.1) * 10 in fp32 is 1.0000000149 -> 1.0f.
  check_points("scale", [](Graph& g, Value x) { return g.scale(x, 0.1); }, {{10.0f, 1.0f}});
}

// Special values: the reference's definition (src/reference/ops.hpp). NaN
// propagates everywhere; activations take their limits at +-inf, where the
// literal formulas would give -inf*0 = NaN: gelu(-inf) = silu(-inf) = +0.
TEST_CASE("NaN and infinities through the activations") {
  const std::vector<float> xs = {nan_, inf, -inf};
  struct Row {
    const char* name;
    std::function<Value(Graph&, Value)> op;
    std::vector<float> want;
  };
  const Row rows[] = {
      {"relu", [](Graph& g, Value x) { return g.relu(x); }, {nan_, inf, 0.0f}},
      {"gelu_tanh", [](Graph& g, Value x) { return g.gelu_tanh(x); }, {nan_, inf, 0.0f}},
      {"gelu_erf", [](Graph& g, Value x) { return g.gelu_erf(x); }, {nan_, inf, 0.0f}},
      {"sigmoid", [](Graph& g, Value x) { return g.sigmoid(x); }, {nan_, 1.0f, 0.0f}},
      {"silu", [](Graph& g, Value x) { return g.silu(x); }, {nan_, inf, 0.0f}},
      {"tanh", [](Graph& g, Value x) { return g.tanh(x); }, {nan_, 1.0f, -1.0f}},
  };
  for (const auto& row : rows) {
    const auto ys = apply(row.op, xs);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      INFO(row.name << "(" << xs[i] << ") = " << ys[i]);
      CHECK(same(ys[i], row.want[i]));
    }
  }
  // Large finite inputs reach the same limits (x^3 would overflow in fp32).
  const auto big = apply([](Graph& g, Value x) { return g.gelu_tanh(x); }, {1e30f, -1e30f, 3e38f});
  CHECK(big[0] == 1e30f);
  CHECK(big[1] == 0.0f);
  CHECK(big[2] == 3e38f);
}

TEST_CASE("exp, log, rsqrt and div: values and IEEE special cases") {
  const std::vector<float> xs = {nan_, inf, -inf, 0.0f, -0.0f, -1.0f, 1.0f, 4.0f};
  struct Row {
    const char* name;
    std::function<Value(Graph&, Value)> op;
    std::vector<float> want;
  };
  const Row rows[] = {
      {"exp", [](Graph& g, Value x) { return g.exp(x); }, {nan_, inf, 0.0f, 1.0f, 1.0f, 0.36787944f, 2.7182817f, 54.59815f}},
      {"log", [](Graph& g, Value x) { return g.log(x); }, {nan_, inf, nan_, -inf, -inf, nan_, 0.0f, 1.3862944f}},
      {"rsqrt", [](Graph& g, Value x) { return g.rsqrt(x); }, {nan_, 0.0f, nan_, inf, -inf, nan_, 1.0f, 0.5f}},
      // x / x: 0/0 and inf/inf are NaN
      {"div", [](Graph& g, Value x) { return g.div(g.scale(x, 3.0), x); }, {nan_, nan_, nan_, nan_, nan_, 3.0f, 3.0f, 3.0f}},
  };
  for (const auto& row : rows) {
    const auto ys = apply(row.op, xs);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      INFO(row.name << "(" << xs[i] << ") = " << ys[i]);
      CHECK(same(ys[i], row.want[i]));
    }
  }
  // 1/x at zero keeps the zero's sign; the quotient is the fp32 IEEE one.
  const auto inv = apply([](Graph& g, Value x) { return g.div(g.exp(g.scale(x, 0.0)), x); }, {0.0f, -0.0f, 3.0f});
  CHECK(inv[0] == inf);
  CHECK(inv[1] == -inf);
  CHECK(inv[2] == 1.0f / 3.0f);
}

// y = op(x) over rows of x (M rows of N), f32.
std::vector<float> apply_rows(const std::function<Value(Graph&, Value)>& op, std::int64_t m, std::vector<float> xs) {
  KernelSpec s;
  Value x = s.graph.input("x", DType::f32);
  s.graph.output("y", op(s.graph, x), DType::f32);
  const auto n = static_cast<std::int64_t>(xs.size()) / m;
  return values(evaluate(s, {m, n, 0}, {{"x", tensor(DType::f32, {m, n}, xs)}}, {}).at("y"));
}

TEST_CASE("row reductions and softmax: values, stability, -inf rows, NaN, and the builder's checks") {
  // Two rows: max, sum and mean per row, broadcast back over the row.
  const std::vector<float> xs = {1, 2, 3, 4, -1, -2, -3, 10};
  const auto mx = apply_rows([](Graph& g, Value x) { return g.add(g.row_max(x), g.scale(x, 0.0)); }, 2, xs);
  const auto sm = apply_rows([](Graph& g, Value x) { return g.add(g.row_sum(x), g.scale(x, 0.0)); }, 2, xs);
  const auto mn = apply_rows([](Graph& g, Value x) { return g.add(g.row_mean(x), g.scale(x, 0.0)); }, 2, xs);
  for (int c = 0; c < 4; ++c) {
    CHECK(mx[c] == 4.0f);
    CHECK(mx[4 + c] == 10.0f);
    CHECK(sm[c] == 10.0f);
    CHECK(sm[4 + c] == 4.0f);
    CHECK(mn[c] == 2.5f);
    CHECK(mn[4 + c] == 1.0f);
  }
  // softmax: as computed in double; rows sum to 1; huge magnitudes stay finite.
  const std::vector<float> big = {1e4f, -1e4f, 0.0f, 1e4f, 0.5f, 1.0f, 1.5f, 2.0f};
  const auto p = apply_rows([](Graph& g, Value x) { return g.softmax(x); }, 2, big);
  CHECK(p[0] == 0.5f);
  CHECK(p[1] == 0.0f);
  CHECK(p[3] == 0.5f);
  double z = 0;
  for (int c = 4; c < 8; ++c) z += std::exp(static_cast<double>(big[c]) - 2.0);
  for (int c = 4; c < 8; ++c) CHECK(p[c] == doctest::Approx(std::exp(static_cast<double>(big[c]) - 2.0) / z).epsilon(1e-6));
  const auto lp = apply_rows([](Graph& g, Value x) { return g.log_softmax(x); }, 1, {0.5f, 1.0f, 1.5f, 2.0f});
  for (int c = 0; c < 4; ++c) CHECK(lp[c] == doctest::Approx(std::log(p[4 + c])).epsilon(1e-6));
  // A row of all -inf gives NaN, as PyTorch's softmax does; NaN spreads over its row only.
  const auto special = apply_rows([](Graph& g, Value x) { return g.softmax(x); }, 2, {-inf, -inf, nan_, 1.0f});
  CHECK(std::isnan(special[0]));
  CHECK(std::isnan(special[1]));
  CHECK(std::isnan(special[2]));
  CHECK(std::isnan(special[3]));
  const auto one = apply_rows([](Graph& g, Value x) { return g.softmax(x); }, 2, {-inf, 0.0f, 3.0f, 3.0f});
  CHECK(one[0] == 0.0f);
  CHECK(one[1] == 1.0f);
  CHECK(one[2] == 0.5f);
  // Reductions take full values only; their result is a column vector.
  Graph g;
  const Value row = g.input("bias", DType::f32, Broadcast::row);
  CHECK_THROWS_WITH_AS(g.row_sum(row), doctest::Contains("row_sum reduces a full [M,N] value"), UserError);
  const Value x = g.input("x", DType::f32);
  CHECK(g.node(g.row_max(x)).broadcast == Broadcast::col);
  CHECK(g.node(g.softmax(x)).broadcast == Broadcast::full);
  // The row family generates them for elementwise graphs; a GEMM's chain
  // cannot reduce rows yet: a clear error, not a wrong kernel.
  KernelSpec spec;
  spec.graph.output("y", spec.graph.softmax(spec.graph.input("x", DType::f32)), DType::f32);
  CHECK(emit_kernel(spec, {4, 64, 0}).text.find("red.max(") != std::string::npos);
  KernelSpec gemm;
  gemm.mainloop.kind = MainloopKind::gemm;
  gemm.graph.output("y", gemm.graph.softmax(gemm.graph.accumulator()), DType::f32);
  CHECK_THROWS_WITH_AS(emit_kernel(gemm, {64, 64, 64}), doctest::Contains("cannot reduce rows"), UserError);
}

TEST_CASE("add_scalar adds c rounded to float, as the code's float literal does") {
  const auto plus = [](double c) -> std::function<Value(Graph&, Value)> {
    return [c](Graph& g, Value x) { return g.add_scalar(x, c); };
  };
  const std::vector<float> xs = {1.0f, -3.5f, 0.0f, -0.0f, 1e-8f, inf, -inf, nan_};
  for (double c : {0.5, -0.1, 1e-6, 3e38}) {
    const std::function<Value(Graph&, Value)> op = plus(c);
    const auto ys = apply(op, xs);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      INFO("add_scalar(" << xs[i] << ", " << c << ") = " << ys[i]);
      CHECK(same(ys[i], xs[i] + static_cast<float>(c)));
    }
  }
  // c = 2^-24 + 2^-50 is 2^-24 in float: 1 + 2^-24 is a tie and rounds to 1,
  // where the double sum, above the tie, would round up to 1 + 2^-23.
  CHECK(apply(plus(0x1p-24 + 0x1p-50), {1.0f})[0] == 1.0f);
  // Signed zeros: -0 + -0 stays -0, -0 + +0 is +0.
  CHECK(std::signbit(apply(plus(-0.0), {-0.0f})[0]));
  CHECK(!std::signbit(apply(plus(0.0), {-0.0f})[0]));
}

// Rows of non-zero values at three scales (the middle one small enough that
// eps dominates its mean square), from a fixed seed.
std::vector<float> nonzero_rows(std::uint32_t seed, std::int64_t n, const std::vector<double>& row_scales) {
  std::mt19937 rng(seed);
  std::vector<float> out;
  for (double scale : row_scales)
    for (std::int64_t c = 0; c < n; ++c) {
      const double magnitude = 0.1 + 2.9 * (static_cast<double>(rng()) / 4294967296.0);
      out.push_back(static_cast<float>((rng() & 1 ? -1 : 1) * magnitude * scale));
    }
  return out;
}

TEST_CASE("rmsnorm and layernorm against double-precision computations on random data") {
  const std::int64_t m = 3, n = 37;
  const std::vector<float> xs = nonzero_rows(13, n, {1.0, 1e-3, 300.0});
  const std::vector<float> w = nonzero_rows(14, n, {1.0}), b = nonzero_rows(15, n, {1.0});
  const auto run = [&](bool layer, double eps) {
    KernelSpec s;
    Graph& g = s.graph;
    const Value x = g.input("x", DType::f32);
    const Value wv = g.input("w", DType::f32, Broadcast::row);
    const Value bv = layer ? g.input("b", DType::f32, Broadcast::row) : Value{};
    g.output("y", layer ? g.layernorm(x, wv, bv, eps) : g.rmsnorm(x, wv, eps), DType::f32);
    TensorMap in = {{"x", tensor(DType::f32, {m, n}, xs)}, {"w", tensor(DType::f32, {n}, w)}};
    if (layer) in.emplace("b", tensor(DType::f32, {n}, b));
    return values(evaluate(s, {m, n, 0}, in, {}).at("y"));
  };
  for (double eps : {1e-6, 1e-5, 0.25}) {
    CAPTURE(eps);
    const auto rms = run(false, eps), ln = run(true, eps);
    for (std::int64_t r = 0; r < m; ++r) {
      const float* row = xs.data() + r * n;
      double sq = 0, sum = 0;
      for (std::int64_t c = 0; c < n; ++c) {
        sq += double{row[c]} * row[c];
        sum += row[c];
      }
      const double inv_rms = 1.0 / std::sqrt(sq / n + eps), mean = sum / n;
      double var = 0;
      for (std::int64_t c = 0; c < n; ++c) var += (row[c] - mean) * (row[c] - mean);
      const double inv_std = 1.0 / std::sqrt(var / n + eps);
      for (std::int64_t c = 0; c < n; ++c) {
        CAPTURE(r);
        CAPTURE(c);
        // A few fp32 roundings on the way: within 2e-6 of the terms' magnitudes
        // (layernorm's x - mean rounds at |x| + |mean|).
        const double want_rms = row[c] * inv_rms * w[c];
        CHECK(std::fabs(rms[r * n + c] - want_rms) <= 2e-6 * std::fabs(want_rms));
        const double want_ln = (row[c] - mean) * inv_std * w[c] + b[c];
        const double size = (std::fabs(row[c]) + std::fabs(mean)) * inv_std * std::fabs(w[c]) + std::fabs(b[c]);
        CHECK(std::fabs(ln[r * n + c] - want_ln) <= 2e-6 * size);
      }
    }
  }
}

TEST_CASE("binary ops, NaN through max and min, broadcasting") {
  KernelSpec s;
  Graph& g = s.graph;
  Value x = g.input("x", DType::f32);
  Value row = g.input("row", DType::f32, Broadcast::row);
  Value col = g.input("col", DType::f32, Broadcast::col);
  Value sc = g.input("s", DType::f32, Broadcast::scalar);
  g.output("add", g.add(x, row), DType::f32);
  g.output("sub", g.sub(x, col), DType::f32);
  g.output("mul", g.mul(x, sc), DType::f32);
  g.output("max", g.max(x, row), DType::f32);
  g.output("min", g.min(x, col), DType::f32);
  const TensorMap in = {
      {"x", tensor(DType::f32, {2, 3}, {1, -2, nan_, 4, 0.1f, -0.0f})},
      {"row", tensor(DType::f32, {3}, {10, 20, 30})},
      {"col", tensor(DType::f32, {2}, {100, nan_})},
      {"s", tensor(DType::f32, {}, {0.5f})},
  };
  const auto out = evaluate(s, {2, 3, 0}, in, {});
  auto check = [&](const char* name, std::vector<float> want) {
    const auto got = values(out.at(name));
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO(std::string(name) << "[" << i << "] = " << got[i] << ", want " << want[i]);
      CHECK(same(got[i], want[i]));
    }
  };
  // 0.1f + 20 in fp32 = 0x1.41999ap+4 (Python: f32(f32(0.1) + 20.0)).
  check("add", {11, 18, nan_, 14, 0x1.41999ap+4f, 30});
  check("sub", {-99, -102, nan_, nan_, nan_, nan_});
  check("mul", {0.5f, -1, nan_, 2, 0.05f, -0.0f});
  check("max", {10, 20, nan_, 10, 20, 30});
  check("min", {1, -2, nan_, nan_, nan_, nan_});
}

TEST_CASE("max/min of signed zeros, cast, and rounding once at the store") {
  const auto mx = apply([](Graph& g, Value x) { return g.max(x, g.scale(x, -1.0)); }, {0.0f, -0.0f});
  CHECK(!std::signbit(mx[0]));
  CHECK(!std::signbit(mx[1]));
  const auto mn = apply([](Graph& g, Value x) { return g.min(x, g.scale(x, -1.0)); }, {0.0f, -0.0f});
  CHECK(std::signbit(mn[0]));
  CHECK(std::signbit(mn[1]));

  // cast rounds in the middle of the chain: (1 + 2^-11) -> f16 = 1, then + 2^-11.
  KernelSpec s;
  Value x = s.graph.input("x", DType::f32);
  Value d = s.graph.input("d", DType::f32);
  s.graph.output("with_cast", s.graph.add(s.graph.cast(x, DType::f16), d), DType::f32);
  s.graph.output("no_cast", s.graph.add(x, d), DType::f32);
  s.graph.output("f16", s.graph.add(x, d), DType::f16);
  s.graph.output("bf16", s.graph.add(x, d), DType::bf16);
  const TensorMap in = {{"x", tensor(DType::f32, {1, 1}, {1.0f + 0x1p-11f})},
                        {"d", tensor(DType::f32, {1, 1}, {0x1p-11f})}};
  const auto out = evaluate(s, {1, 1, 0}, in, {});
  CHECK(out.at("with_cast").get(0) == 1.0f + 0x1p-11f);
  CHECK(out.at("no_cast").get(0) == 1.0f + 0x1p-10f);
  CHECK(out.at("f16").dtype == DType::f16);
  CHECK(out.at("f16").get(0) == 1.0f + 0x1p-10f);  // representable in f16
  CHECK(out.at("bf16").get(0) == 1.0f);            // 1 + 2^-10 rounds to 1 in bf16
}

TEST_CASE("GEMM on integer matrices against a hand computation") {
  // a = [[1,2,3],[4,5,6]], b = [[7,8],[9,10],[11,12]]: a@b = [[58,64],[139,154]].
  // Layouts are device layouts: the host arrays stay logical row-major.
  for (Layout la : {Layout::row, Layout::col}) {
    for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
      KernelSpec s;
      s.mainloop = {MainloopKind::gemm, dt, dt, la, Layout::col};
      Value acc = s.graph.accumulator();
      Value bias = s.graph.input("bias", DType::f32, Broadcast::row);
      Value colv = s.graph.input("colv", DType::f16, Broadcast::col);
      Value sc = s.graph.input("s", DType::bf16, Broadcast::scalar);
      s.graph.output("acc", acc, DType::f32);
      s.graph.output("y", s.graph.add(s.graph.add(s.graph.add(acc, bias), colv), sc), DType::f32);
      const TensorMap in = {
          {"a", tensor(dt, {2, 3}, {1, 2, 3, 4, 5, 6})},
          {"b", tensor(dt, {3, 2}, {7, 8, 9, 10, 11, 12})},
          {"bias", tensor(DType::f32, {2}, {1000, 2000})},
          {"colv", tensor(DType::f16, {2}, {100, 200})},
          {"s", tensor(DType::bf16, {}, {0.5f})},
      };
      const auto out = evaluate(s, {2, 2, 3}, in, {});
      CHECK(values(out.at("acc")) == std::vector<float>{58, 64, 139, 154});
      // + bias by column, + colv by row, + scalar
      CHECK(values(out.at("y")) == std::vector<float>{1158.5f, 2164.5f, 1339.5f, 2354.5f});
    }
  }
}

TEST_CASE("GEMM accumulates in double and rounds once") {
  // 1*2^24 + 1*1 + 1*(-2^24): fp32 accumulation in k order gives 0, double gives 1.
  KernelSpec s;
  s.mainloop = {MainloopKind::gemm, DType::f32, DType::f32};
  s.graph.output("y", s.graph.accumulator(), DType::f32);
  const TensorMap in = {{"a", tensor(DType::f32, {1, 3}, {1, 1, 1})},
                        {"b", tensor(DType::f32, {3, 1}, {0x1p24f, 1, -0x1p24f})}};
  CHECK(evaluate(s, {1, 1, 3}, in, {}).at("y").get(0) == 1.0f);
}

TEST_CASE("dual GEMM: the gating pattern on integer matrices") {
  // a@b0 = [[58,64],[139,154]]; a@b1 with b1 = [[1,0],[0,1],[1,1]] = [[4,5],[10,11]].
  KernelSpec s;
  s.mainloop = {MainloopKind::dual_gemm, DType::f16, DType::f16};
  Value a0 = s.graph.accumulator(0), a1 = s.graph.accumulator(1);
  s.graph.output("y", s.graph.mul(a0, a1), DType::f32);
  s.graph.output("acc1", a1, DType::f16);
  const TensorMap in = {{"a", tensor(DType::f16, {2, 3}, {1, 2, 3, 4, 5, 6})},
                        {"b0", tensor(DType::f16, {3, 2}, {7, 8, 9, 10, 11, 12})},
                        {"b1", tensor(DType::f16, {3, 2}, {1, 0, 0, 1, 1, 1})}};
  const auto out = evaluate(s, {2, 2, 3}, in, {});
  CHECK(values(out.at("y")) == std::vector<float>{232, 320, 1390, 1694});
  CHECK(values(out.at("acc1")) == std::vector<float>{4, 5, 10, 11});
  CHECK(mainloop_operand_names(MainloopKind::dual_gemm) == std::vector<std::string>{"a", "b0", "b1"});
}

TEST_CASE("evaluate checks every input and names it") {
  KernelSpec s;
  s.mainloop = {MainloopKind::gemm, DType::f16, DType::f16};
  Value bias = s.graph.input("bias", DType::f32, Broadcast::row);
  s.graph.output("y", s.graph.relu(s.graph.add(s.graph.accumulator(), bias)), DType::f16);
  const Shape shape{64, 128, 32};
  const auto req = required_inputs(s, shape);
  REQUIRE(req.size() == 3);
  CHECK(req[0].name == "a");
  CHECK(req[0].shape == std::vector<std::int64_t>{64, 32});
  CHECK(req[1].name == "b");
  CHECK(req[1].shape == std::vector<std::int64_t>{32, 128});
  CHECK(req[2].name == "bias");
  CHECK(req[2].shape == std::vector<std::int64_t>{128});

  const TensorMap good = make_inputs(s, shape, 5);
  CHECK_NOTHROW(evaluate(s, shape, good, {}));

  TensorMap bad = good;
  bad.at("bias") = HostTensor::zeros(DType::f32, {64});
  CHECK_THROWS_WITH_AS(evaluate(s, shape, bad, {}),
                       "input 'bias': expected shape [128] (row vector of N), got [64]", UserError);
  bad = good;
  bad.at("a") = HostTensor::zeros(DType::f16, {32, 64});
  CHECK_THROWS_WITH_AS(evaluate(s, shape, bad, {}),
                       "input 'a': expected shape [64,32] (GEMM operand A [M,K]), got [32,64]",
                       UserError);
  bad = good;
  bad.at("bias") = HostTensor::zeros(DType::f16, {128});
  CHECK_THROWS_WITH_AS(evaluate(s, shape, bad, {}), "input 'bias': expected dtype f32, got f16",
                       UserError);
  bad = good;
  bad.erase("b");
  CHECK_THROWS_WITH_AS(evaluate(s, shape, bad, {}),
                       "missing input 'b': expected f16 [32,128] (GEMM operand B [K,N])", UserError);
  bad = good;
  bad.emplace("bais", HostTensor::zeros(DType::f32, {128}));
  CHECK_THROWS_WITH_AS(evaluate(s, shape, bad, {}),
                       "unknown input 'bais': this kernel takes a, b, bias", UserError);
  bad = good;
  bad.at("bias").bytes.resize(10);
  CHECK_THROWS_AS(evaluate(s, shape, bad, {}), UserError);
  CHECK_THROWS_AS(evaluate(s, {64, 128, 0}, good, {}), UserError);  // K missing
}

TEST_CASE("make_inputs draws what is missing, per name, deterministically") {
  KernelSpec s;
  Value x = s.graph.input("x", DType::bf16);
  Value b = s.graph.input("b", DType::f16, Broadcast::col);
  s.graph.output("y", s.graph.add(x, b), DType::f32);
  const auto in = make_inputs(s, {8, 4, 0}, 1);
  CHECK(in.at("x").shape == std::vector<std::int64_t>{8, 4});
  CHECK(in.at("x").dtype == DType::bf16);
  CHECK(in.at("b").shape == std::vector<std::int64_t>{8});
  CHECK(make_inputs(s, {8, 4, 0}, 1).at("x").bytes == in.at("x").bytes);
  CHECK(make_inputs(s, {8, 4, 0}, 2).at("x").bytes != in.at("x").bytes);
  // A given input is kept, and the others do not change because of it.
  const HostTensor mine = HostTensor::zeros(DType::f16, {8});
  const auto partly = make_inputs(s, {8, 4, 0}, 1, {{"b", mine}});
  CHECK(partly.at("b").bytes == mine.bytes);
  CHECK(partly.at("x").bytes == in.at("x").bytes);
}

TEST_CASE("reference evaluator is fast enough for the test tiers") {
  using clock = std::chrono::steady_clock;
  KernelSpec s;  // bias-GELU-dropout-residual, docs/design.md §0
  Value x = s.graph.input("x", DType::f32);
  Value bias = s.graph.input("bias", DType::f32, Broadcast::row);
  Value res = s.graph.input("residual", DType::f32);
  Value y = s.graph.add(s.graph.dropout(s.graph.gelu_tanh(s.graph.add(x, bias)), 0.1), res);
  s.graph.output("y", y, DType::f32);
  const Shape es{1024, 1024, 0};
  const auto in = make_inputs(s, es, 3);
  auto t0 = clock::now();
  const auto fwd = evaluate(s, es, in, {1, 2});
  const double elementwise_s = std::chrono::duration<double>(clock::now() - t0).count();
  MESSAGE("elementwise [1024,1024] bias-gelu-dropout-residual: " << elementwise_s << " s");
  CHECK(elementwise_s < 2.0);  // generous: the machine is shared

  KernelSpec g;
  g.mainloop = {MainloopKind::gemm, DType::f16, DType::f16};
  g.graph.output("y", g.graph.relu(g.graph.accumulator()), DType::f16);
  const Shape gs{256, 256, 256};
  const auto gin = make_inputs(g, gs, 4);
  t0 = clock::now();
  (void)evaluate(g, gs, gin, {});
  const double gemm_s = std::chrono::duration<double>(clock::now() - t0).count();
  MESSAGE("gemm 256^3 + relu: " << gemm_s << " s");
  CHECK(gemm_s < 5.0);
}

TEST_CASE("column-major GEMM operands are stored transposed on the device; other tensors as they are") {
  KernelSpec s;
  s.mainloop = {MainloopKind::gemm, DType::f32, DType::f32, Layout::col, Layout::row};
  s.graph.output("y", s.graph.accumulator(0), DType::f32);
  HostTensor a = HostTensor::zeros(DType::f32, {2, 3});  // [[0 1 2] [3 4 5]]
  for (int i = 0; i < 6; ++i) a.set(i, static_cast<float>(i));
  const HostTensor at = to_device_layout(s, "a", a);
  CHECK(at.shape == std::vector<std::int64_t>{3, 2});
  const float want[] = {0, 3, 1, 4, 2, 5};  // column by column
  for (int i = 0; i < 6; ++i) CHECK(at.get(i) == want[i]);
  CHECK(to_device_layout(s, "b", a).bytes == a.bytes);  // b is row-major
  s.mainloop.b_layout = Layout::col;
  CHECK(to_device_layout(s, "b", a).shape == std::vector<std::int64_t>{3, 2});
  CHECK(to_device_layout(s, "bias", a).bytes == a.bytes);
}

TEST_CASE("a GEMM with K = 0 has a zero accumulator; operands past 2^48 elements are refused") {
  KernelSpec s;
  s.mainloop = {MainloopKind::gemm, DType::f16, DType::f16, Layout::row, Layout::row};
  s.graph.output("y", s.graph.add(s.graph.accumulator(0), s.graph.input("bias", DType::f32, Broadcast::row)),
                 DType::f32);
  const TensorMap in = make_inputs(s, {3, 5, 0}, 1);
  const HostTensor y = evaluate(s, {3, 5, 0}, in, {}).at("y");
  for (std::int64_t i = 0; i < y.numel(); ++i) CHECK(y.get(i) == in.at("bias").get(i % 5));
  CHECK_THROWS_WITH_AS(verify_shape(s, {1 << 20, 1 << 20, std::int64_t{1} << 30}), doctest::Contains("2^48"), UserError);
  CHECK_THROWS_WITH_AS(verify_shape(s, {4, 4, -1}), doctest::Contains("K must not be negative"), UserError);
}

TEST_CASE("M or N of 0 is an empty result, as in PyTorch; negative dimensions are refused") {
  KernelSpec g;
  g.mainloop = {MainloopKind::gemm, DType::f16, DType::f16, Layout::row, Layout::row};
  g.graph.output("y", g.graph.relu(g.graph.add(g.graph.accumulator(0), g.graph.input("bias", DType::f32, Broadcast::row))),
                 DType::f16);
  for (const Shape& s : {Shape{0, 5, 7}, Shape{3, 0, 7}, Shape{0, 0, 0}}) {
    CAPTURE(s.m);
    CAPTURE(s.n);
    const HostTensor y = evaluate(g, s, make_inputs(g, s, 1), {}).at("y");
    CHECK(y.numel() == 0);
    CHECK(y.shape == std::vector<std::int64_t>{s.m, s.n});
  }
  KernelSpec e;
  e.graph.output("y", e.graph.mul(e.graph.input("x", DType::bf16), e.graph.input("z", DType::bf16)), DType::bf16);
  const HostTensor y = evaluate(e, {0, 9, 0}, make_inputs(e, {0, 9, 0}, 2), {}).at("y");
  CHECK(y.numel() == 0);
  CHECK_THROWS_WITH_AS(verify_shape(e, {-1, 4, 0}), doctest::Contains("must not be negative"), UserError);
  CHECK_THROWS_WITH_AS(verify_shape(g, {4, -2, 4}), doctest::Contains("must not be negative"), UserError);
}

TEST_CASE("verify's interval: accumulators moved by their bound, and compare_within between the references") {
  // sigmoid(acc0) * acc1 in f32: moving acc1 by d moves y by sigmoid(acc0) * d.
  KernelSpec spec;
  spec.mainloop = {MainloopKind::dual_gemm, DType::f32, DType::f32, Layout::row, Layout::row};
  spec.graph.output("y", spec.graph.mul(spec.graph.sigmoid(spec.graph.accumulator(0)), spec.graph.accumulator(1)),
                    DType::f32);
  const Shape shape{3, 5, 64};
  const TensorMap inputs = make_inputs(spec, shape, 21);
  const double bound = accumulation_bound(spec, shape, inputs);
  double peak_a = 0, peak_b = 0;
  for (std::int64_t i = 0; i < inputs.at("a").numel(); ++i) peak_a = std::max(peak_a, std::fabs(double(inputs.at("a").get(i))));
  for (const char* b : {"b0", "b1"})
    for (std::int64_t i = 0; i < inputs.at(b).numel(); ++i) peak_b = std::max(peak_b, std::fabs(double(inputs.at(b).get(i))));
  CHECK(bound == doctest::Approx(64 * std::ldexp(1.0, -21) * peak_a * peak_b));
  CHECK(accumulation_bound(spec, {3, 5, 0}, make_inputs(spec, {3, 5, 0}, 1)) == 0.0);

  const HostTensor plain = evaluate(spec, shape, inputs, {}).at("y");
  EvalOptions up;
  up.accumulator_shift = {0.0f, 0.25f};
  const HostTensor moved = evaluate(spec, shape, inputs, {}, up).at("y");
  KernelSpec gate = spec;
  gate.graph = Graph{};
  gate.graph.output("s", gate.graph.sigmoid(gate.graph.accumulator(0)), DType::f32);
  const HostTensor s = evaluate(gate, shape, inputs, {}).at("s");
  for (std::int64_t i = 0; i < plain.numel(); ++i)
    CHECK(moved.get(i) - plain.get(i) == doctest::Approx(0.25 * s.get(i)).epsilon(1e-4));

  // Between two references passes; outside both (beyond the tolerance) fails.
  HostTensor between = plain, outside = plain;
  for (std::int64_t i = 0; i < plain.numel(); ++i) {
    between.set(i, 0.5f * (plain.get(i) + moved.get(i)));
    outside.set(i, moved.get(i) + 0.5f);
  }
  const Tolerance tol{1e-6, 1e-5};
  CHECK_FALSE(compare(between, plain, tol).ok);
  CHECK(compare_within(between, {&plain, &moved}, tol).ok);
  const Comparison bad = compare_within(outside, {&plain, &moved}, tol);
  CHECK_FALSE(bad.ok);
  CHECK(bad.mismatches == plain.numel());
  CHECK(compare_within(plain, {&plain}, tol).ok);
}
