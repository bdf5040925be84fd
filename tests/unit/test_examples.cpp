// Golden values for every chain in examples/chains, run by the reference evaluator
// on small integer-valued inputs.
//
// How the expected values were computed, independently of epifuse: by the numpy
// script at the end of this file (its own Philox4x32-10, checked against the
// Random123 known answers, gives the dropout keep mask; GEMMs in float64; the
// epilogue in float32 where the chain is pure arithmetic, float64 for tanh/exp, the
// softmaxes and the norms; then rounding to the output dtype). Pure-arithmetic chains
// (gemm, bias, relu, dropout, scale, add) must match exactly; chains with
// gelu/sigmoid/silu, exp or rsqrt may differ by the last bits of fp32 math: within
// 1e-6 relative for f32 outputs and one unit in the last place for f16/bf16 outputs.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "epifuse/json.hpp"
#include "epifuse/reference.hpp"
#include "epifuse/spec.hpp"

using namespace epifuse;
namespace fs = std::filesystem;

namespace {

const fs::path k_chains = fs::path(EPIFUSE_SOURCE_DIR) / "examples" / "chains";

enum class Match { exact, close };

// Binds each required operand from `values` (row-major, integer-valued), in the
// operand's own dtype and shape.
TensorMap bind_values(const KernelSpec& spec, const Shape& shape, const std::map<std::string, std::vector<float>>& values) {
  TensorMap out;
  for (const OperandDesc& d : required_inputs(spec, shape)) {
    auto it = values.find(d.name);
    REQUIRE_MESSAGE(it != values.end(), "the test gives no values for operand " << d.name);
    HostTensor t = HostTensor::zeros(d.dtype, d.shape);
    REQUIRE(static_cast<std::int64_t>(it->second.size()) == t.numel());
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, it->second[static_cast<std::size_t>(i)]);
    out.emplace(d.name, std::move(t));
  }
  return out;
}

// One unit in the last place of `dtype` at magnitude |v|.
double ulp(DType dtype, double v) {
  const int mantissa_bits = dtype == DType::f32 ? 23 : dtype == DType::f16 ? 10 : 7;
  const int min_exp = dtype == DType::f16 ? -14 : -126;
  const int e = v == 0 ? min_exp : std::max(min_exp, static_cast<int>(std::floor(std::log2(std::fabs(v)))));
  return std::ldexp(1.0, e - mantissa_bits);
}

void check_output(const HostTensor& y, DType dtype, const std::vector<std::int64_t>& shape,
                  const std::vector<double>& expected, Match match) {
  CHECK(y.dtype == dtype);
  REQUIRE(y.shape == shape);
  REQUIRE(static_cast<std::size_t>(y.numel()) == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double got = y.get(static_cast<std::int64_t>(i)), want = expected[i];
    CAPTURE(i);
    CAPTURE(got);
    CAPTURE(want);
    if (match == Match::exact) {
      CHECK(got == want);
    } else {
      const double tol = dtype == DType::f32 ? 1e-6 * std::max(1.0, std::fabs(want)) : ulp(dtype, want);
      CHECK(std::fabs(got - want) <= tol);
    }
  }
}

struct Example {
  KernelSpec spec;
  TensorMap outputs;
};

Example run(const std::string& file, Shape shape, const std::map<std::string, std::vector<float>>& values,
            std::uint64_t seed = 0) {
  Example e{load_spec(k_chains / file), {}};
  verify(e.spec);
  LaunchArgs args;
  args.seed = seed;
  e.outputs = evaluate(e.spec, shape, bind_values(e.spec, shape, values), args);
  return e;
}

// Shared inputs (the same numbers are in the script below).
const std::vector<float> A23 = {1, -2, 3, 0};             // a [M=2, K=2]
const std::vector<float> B23 = {2, -1, 0, 1, 3, -2};      // b [K=2, N=3]
const std::vector<float> B23b = {-1, 2, 1, 0, -2, 3};     // dual gemm b1
const std::vector<float> A43 = {1, 2, 0, -1, 0, 3, 2, 1, 1, 0, -2, 1};          // a [4, 3]
const std::vector<float> B34 = {1, 0, 2, -1, 2, 1, 0, 1, 0, 3, 1, 2};           // b [3, 4]
const std::vector<float> X44 = {1, -2, 0, 3, 2, 1, -1, 0, -2, 3, 1, 1, 0, 0, 2, -1};
const std::vector<float> R44 = {1, 0, -1, 2, 3, -2, 0, 1, 0, 1, 1, -3, 2, 2, -1, 0};
// Dropout seed 5, offset 0, p = 0.1, stream 0 on a 4x4 output keeps every element
// except linear indices 1 and 14 (script below).
constexpr std::uint64_t k_seed = 5;

const std::set<std::string> k_covered = {
    "gemm", "gemm_bias_relu", "gemm_bias_relu_dropout", "gemm_tf32_bias_gelu", "add_mul", "bias_gelu_dropout_add",
    "bias_gelu_dropout_add_chain", "gating", "swiglu", "geglu", "softmax", "scaled_masked_softmax_dropout", "add_rmsnorm",
    "layernorm", "bias_gelu_dropout_add_backward"};
const std::vector<float> W4 = {1, -2, 0.5f, 3};  // a norm's weight [N=4]
const std::vector<float> B4 = {0, 1, -1, 2};     // a norm's bias

}  // namespace

TEST_CASE("examples: every chain in examples/chains has golden values here and a valid default shape") {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(k_chains)) {
    if (entry.path().extension() != ".json") continue;
    ++count;
    const std::string stem = entry.path().stem().string();
    CAPTURE(stem);
    CHECK(k_covered.count(stem) == 1);
    const KernelSpec spec = load_spec(entry.path());
    CHECK(spec.name == stem);
    REQUIRE(spec.default_shape.has_value());
    CHECK_NOTHROW(verify_shape(spec, *spec.default_shape));
  }
  CHECK(count == static_cast<int>(k_covered.size()));
}

TEST_CASE("examples: gemm") {
  // a @ b by hand: [[1*2-2*1, -1-6, 0+4], [6, -3, 0]].
  auto e = run("gemm.json", {2, 3, 2}, {{"a", A23}, {"b", B23}});
  check_output(e.outputs.at("y"), DType::f16, {2, 3}, {0, -7, 4, 6, -3, 0}, Match::exact);
}

TEST_CASE("examples: gemm_bias_relu") {
  // relu(a @ b + [1, -3, 2]) by hand from the gemm result above.
  auto e = run("gemm_bias_relu.json", {2, 3, 2}, {{"a", A23}, {"b", B23}, {"bias", {1, -3, 2}}});
  check_output(e.outputs.at("y"), DType::f16, {2, 3}, {1, 0, 6, 7, 0, 2}, Match::exact);
}

TEST_CASE("examples: gemm_bias_relu_dropout") {
  // Kept values are relu(...) * float(1/0.9) rounded to f16 (6 -> 6.66796875); by the script.
  auto e = run("gemm_bias_relu_dropout.json", {4, 4, 3}, {{"a", A43}, {"b", B34}, {"bias", {1, -1, 0, 2}}},
               k_seed);
  check_output(e.outputs.at("y"), DType::f16, {4, 4},
               {6.66796875, 0.0, 2.22265625, 3.333984375, 0.0, 8.890625, 1.111328125, 10.0, 5.5546875,
                3.333984375, 5.5546875, 3.333984375, 0.0, 0.0, 0.0, 2.22265625},
               Match::exact);
}

TEST_CASE("examples: gemm_tf32_bias_gelu") {
  // tf32 rounds each operand to 10 mantissa bits, to nearest, ties to even:
  // 1 + 2^-12 -> 1 and 1 + 3*2^-11 -> 1 + 2^-9 (a tie, to the even mantissa), so by hand
  // acc = [1 * (1 + 2^-9) + 3 * -1, 1 * 2 + 3 * 0.5] = [-2 + 2^-9, 3.5].
  const float a0 = 1.0f + std::ldexp(1.0f, -12), b00 = 1.0f + 3 * std::ldexp(1.0f, -11);
  auto e = run("gemm_tf32_bias_gelu.json", {1, 2, 2}, {{"a", {a0, 3}}, {"b", {b00, 2, -1, 0.5f}}, {"bias", {0.5f, -1}}});
  const double z0 = -1.5 + std::ldexp(1.0, -9), z1 = 2.5;
  check_output(e.outputs.at("z"), DType::f32, {1, 2}, {z0, z1}, Match::exact);
  auto gelu = [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); };
  check_output(e.outputs.at("y"), DType::f32, {1, 2}, {gelu(z0), gelu(z1)}, Match::close);
}

TEST_CASE("examples: bias_gelu_dropout_add_backward") {
  // dx = dropout(dy) * gelu_tanh_deriv(h) with the forward's mask (stream 0:
  // elements 1 and 14 dropped), dbias its column sums, dres = dy (script:
  // gelu_tanh_deriv(a) = s + 2a s (1 - s) u', s = sigmoid(2u), in double).
  auto e = run("bias_gelu_dropout_add_backward.json", {4, 4}, {{"dy", X44}, {"h", R44}}, k_seed);
  check_output(e.outputs.at("dx"), DType::f32, {4, 4},
               {1.2032934427261353, 0.0, -0.0, 3.620331048965454, 2.247964859008789, -0.09566584974527359,
                -0.5555555820465088, 0.0, -1.1111111640930176, 3.6098804473876953, 1.2032934427261353,
                -0.01287129707634449, 0.0, 0.0, 0.0, -0.5555555820465088},
               Match::close);
  check_output(e.outputs.at("dbias"), DType::f32, {4},
               {2.340147018432617, 3.514214515686035, 0.6477378606796265, 3.0519042015075684}, Match::close);
  check_output(e.outputs.at("dres"), DType::f32, {4, 4}, std::vector<double>(X44.begin(), X44.end()), Match::exact);
}

TEST_CASE("examples: add_mul") {
  // (x + y) * 0.5 by hand.
  auto e = run("add_mul.json", {2, 3}, {{"x", {1, -2, 3, 0, 2, -1}}, {"y", {2, 2, -3, 1, 0, 3}}});
  check_output(e.outputs.at("out"), DType::f32, {2, 3}, {1.5, 0, 0, 0.5, 1, 1}, Match::exact);
}

TEST_CASE("examples: bias_gelu_dropout_add (f32) and its chain shorthand (bf16)") {
  const std::map<std::string, std::vector<float>> in = {{"x", X44}, {"bias", {0, 1, -1, 2}}, {"residual", R44}};
  // Dropped elements (1, 14) equal the residual exactly: 0 and -1.
  auto e = run("bias_gelu_dropout_add.json", {4, 4}, in, k_seed);
  check_output(e.outputs.at("y"), DType::f32, {4, 4},
               {1.9346578121185303, 0.0, -1.1764533519744873, 7.555555820465088, 5.1717753410339355,
                0.17177534103393555, -0.0504470095038414, 3.1717753410339355, -0.0504470095038414,
                5.444366455078125, 1.0, 0.32929205894470215, 2.0, 2.9346578121185303, -1.0,
                0.9346578121185303},
               Match::close);
  auto c = run("bias_gelu_dropout_add_chain.json", {4, 4}, in, k_seed);
  check_output(c.outputs.at("y"), DType::bf16, {4, 4},
               {1.9375, 0.0, -1.1796875, 7.5625, 5.15625, 0.171875, -0.050537109375, 3.171875,
                -0.050537109375, 5.4375, 1.0, 0.330078125, 2.0, 2.9375, -1.0, 0.93359375},
               Match::close);
  // Both spellings are the same computation up to dtypes: the same graph shape.
  CHECK(e.spec.graph.nodes().size() == c.spec.graph.nodes().size());
}

TEST_CASE("examples: gating") {
  // sigmoid(a@b0 + bias1) * (a@b1 + bias2), by the script.
  auto e = run("gating.json", {2, 3, 2},
               {{"a", A23}, {"b0", B23}, {"b1", B23b}, {"bias1", {0, 1, -1}}, {"bias2", {2, -1, 1}}});
  check_output(e.outputs.at("y"), DType::f16, {2, 3},
               {0.5, 0.012359619140625, -3.810546875, -0.99755859375, 0.59619140625, 1.076171875}, Match::close);
}

TEST_CASE("examples: swiglu") {
  // silu(a@b0) * (a@b1), by the script.
  auto e = run("swiglu.json", {2, 3, 2}, {{"a", A23}, {"b0", B23}, {"b1", B23b}});
  check_output(e.outputs.at("y"), DType::bf16, {2, 3}, {-0.0, -0.038330078125, -19.625, -18.0, -0.85546875, 0.0},
               Match::close);
}

TEST_CASE("examples: geglu") {
  // gelu_tanh(a@b0) * (a@b1), by the script; B col-major in the chain, the same logical values.
  auto e = run("geglu.json", {2, 3, 2}, {{"a", A23}, {"b0", B23}, {"b1", B23b}});
  check_output(e.outputs.at("y"), DType::bf16, {2, 3}, {-0.0, -1.3877787807814457e-14, -20.0, -18.0, -0.0218505859375, 0.0},
               Match::close);
}

TEST_CASE("examples: softmax and scaled_masked_softmax_dropout") {
  // Row softmax of the integer rows, by the script; exp makes them close, not exact.
  auto e = run("softmax.json", {4, 4}, {{"x", X44}});
  check_output(e.outputs.at("y"), DType::bf16, {4, 4},
               {0.11376953125, 0.005645751953125, 0.041748046875, 0.83984375, 0.64453125, 0.2373046875,
                0.031982421875, 0.0869140625, 0.005279541015625, 0.78125, 0.10595703125, 0.10595703125,
                0.1025390625, 0.1025390625, 0.7578125, 0.03759765625},
               Match::close);
  // dropout(softmax(x * 0.0883883... + mask), 0.1): elements 1 and 14 dropped (k_seed).
  auto m = run("scaled_masked_softmax_dropout.json", {4, 4}, {{"x", X44}, {"mask", R44}}, k_seed);
  check_output(m.outputs.at("y"), DType::bf16, {4, 4},
               {0.2392578125, 0.0, 0.0296630859375, 0.7734375, 0.9609375, 0.00592041015625, 0.03662109375,
                0.10888671875, 0.1259765625, 0.53125, 0.4453125, 0.0081787109375, 0.5078125, 0.5078125, 0.0,
                0.06298828125},
               Match::close);
}

TEST_CASE("examples: add_rmsnorm stores the sum and its norm") {
  auto e = run("add_rmsnorm.json", {4, 4}, {{"x", X44}, {"residual", R44}, {"weight", W4}});
  // h = x + residual by hand (small integers: exact in bf16).
  check_output(e.outputs.at("h"), DType::bf16, {4, 4}, {2, -2, -1, 5, 5, -1, -1, 1, -2, 4, 2, -2, 2, 2, 1, -1},
               Match::exact);
  check_output(e.outputs.at("y"), DType::bf16, {4, 4},
               {0.6875, 1.375, -0.171875, 5.15625, 1.890625, 0.7578125, -0.189453125, 1.1328125, -0.7578125,
                -3.03125, 0.37890625, -2.265625, 1.265625, -2.53125, 0.31640625, -1.8984375},
               Match::close);
}

TEST_CASE("examples: layernorm") {
  auto e = run("layernorm.json", {4, 4}, {{"x", X44}, {"weight", W4}, {"bias", B4}});
  check_output(e.outputs.at("y"), DType::bf16, {4, 4},
               {0.27734375, 3.78125, -1.140625, 6.15625, 1.34375, 0.10546875, -1.671875, 0.66015625, -1.5390625,
                -1.5234375, -0.9296875, 2.421875, -0.2294921875, 1.4609375, -0.197265625, -1.4375},
               Match::close);
}

// The script that computed the expected values (python3 with numpy; run it to
// regenerate). It prints each array in the order the tests above use.
/*
import numpy as np

M32 = 0xFFFFFFFF
def philox(ctr, key):
    c = list(ctr); k0, k1 = key
    for r in range(10):
        p0 = 0xD2511F53 * c[0]; p1 = 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c[3] ^ k1) & M32, p0 & M32]
        k0 = (k0 + 0x9E3779B9) & M32; k1 = (k1 + 0xBB67AE85) & M32
    return c
# Random123 known answers (docs/design.md §4).
assert philox([0,0,0,0],[0,0]) == [0x6627e8d5,0xe169c58d,0xbc57ac4c,0x9b00dbd8]
assert philox([M32]*4,[M32]*2) == [0x408f276d,0x41c83b0e,0xa20bc7c6,0x6d5451fd]
assert philox([0x243f6a88,0x85a308d3,0x13198a2e,0x03707344],[0xa4093822,0x299f31d0]) == [0xd16cfe09,0x94fdcceb,0x5001e420,0x24126ea1]

def keep_mask(M, N, p, seed, offset=0, stream=0):
    thr = round(p * 2**24)
    out = np.zeros((M, N), dtype=bool)
    for i in range(M * N):
        q = i >> 2
        ctr = [q & M32, ((q >> 32) & 0xFFFF) | (stream << 16), offset & M32, offset >> 32]
        draw = philox(ctr, [seed & M32, seed >> 32])[i & 3]
        out[i // N, i % N] = (draw >> 8) >= thr
    return out

def gelu_tanh(x): return 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))
def sigmoid(x): return 1 / (1 + np.exp(-x))
def bf16(x):  # nearest-even bfloat16, as float64
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
def f16(x): return np.asarray(x, dtype=np.float64).astype(np.float32).astype(np.float16).astype(np.float64)
def f32(x): return np.asarray(x, dtype=np.float32)
def show(name, a): print(f"{name} = {{{', '.join(repr(float(v)) for v in np.asarray(a, dtype=np.float64).ravel())}}};")

A23  = np.array([[1, -2], [3, 0]], float)
B23  = np.array([[2, -1, 0], [1, 3, -2]], float)
B23b = np.array([[-1, 2, 1], [0, -2, 3]], float)
BIAS3 = np.array([1, -3, 2], float)
show("gemm_y", f16(A23 @ B23))
show("gemm_bias_relu_y", f16(np.maximum(A23 @ B23 + BIAS3, 0)))

A43 = np.array([[1, 2, 0], [-1, 0, 3], [2, 1, 1], [0, -2, 1]], float)
B34 = np.array([[1, 0, 2, -1], [2, 1, 0, 1], [0, 3, 1, 2]], float)
BIAS4 = np.array([1, -1, 0, 2], float)
mask = keep_mask(4, 4, 0.1, 5)          # [1,0,1,1, 1,1,1,1, 1,1,1,1, 1,1,0,1]
scale = np.float32(1 / (1 - 0.1))       # float(1/(1-p))
r = f32(np.maximum(A43 @ B34 + BIAS4, 0))
show("gemm_bias_relu_dropout_y", f16(np.where(mask, r * scale, np.float32(0))))

X23 = np.array([[1, -2, 3], [0, 2, -1]], float); Y23 = np.array([[2, 2, -3], [1, 0, 3]], float)
show("add_mul_out", f32((X23 + Y23) * 0.5))

X44 = np.array([[1, -2, 0, 3], [2, 1, -1, 0], [-2, 3, 1, 1], [0, 0, 2, -1]], float)
BIAS4e = np.array([0, 1, -1, 2], float)
R44 = np.array([[1, 0, -1, 2], [3, -2, 0, 1], [0, 1, 1, -3], [2, 2, -1, 0]], float)
g = f32(gelu_tanh(f32(X44 + BIAS4e).astype(np.float64)))
d = np.where(mask, g * scale, np.float32(0)).astype(np.float32)
show("bgda_y", (d + f32(R44)).astype(np.float32))
show("bgda_chain_y", bf16((d + f32(R44)).astype(np.float64)))

BIAS1 = np.array([0, 1, -1], float); BIAS2 = np.array([2, -1, 1], float)
show("gating_y", f16(sigmoid(A23 @ B23 + BIAS1) * (A23 @ B23b + BIAS2)))
acc0 = A23 @ B23; acc1 = A23 @ B23b
show("swiglu_y", bf16(acc0 * sigmoid(acc0) * acc1))
# gelu_tanh as x*sigmoid(2u): 1 + tanh(u) cancels at acc0 = -7 (u = -17.8) in double too.
def gelu_tanh_nc(x): u = 0.7978845608028654 * (x + 0.044715 * x**3); return x * sigmoid(2 * u)
show("geglu_y", bf16(gelu_tanh_nc(acc0) * acc1))

W4 = np.array([1, -2, 0.5, 3], float); B4 = np.array([0, 1, -1, 2], float)
def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True)); return e / e.sum(axis=1, keepdims=True)
show("softmax_y", bf16(softmax(X44)))
z = f32(f32(np.float32(0.08838834764831845) * f32(X44)) + f32(R44)).astype(np.float64)
show("scaled_masked_softmax_dropout_y", bf16(np.where(mask, f32(softmax(z)) * scale, np.float32(0))))
h = X44 + R44
show("add_rmsnorm_h", bf16(h))
show("add_rmsnorm_y", bf16(h / np.sqrt((h * h).mean(axis=1, keepdims=True) + 1e-6) * W4))
m = X44.mean(axis=1, keepdims=True)
show("layernorm_y", bf16((X44 - m) / np.sqrt(((X44 - m) ** 2).mean(axis=1, keepdims=True) + 1e-5) * W4 + B4))
*/
