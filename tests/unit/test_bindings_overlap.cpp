// Note [Overlapping bindings]: which outputs a launch refuses for sharing
// memory with an input or another output (the check runs before the driver, so
// made-up device addresses do here).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "epifuse/json.hpp"
#include "runtime/bindings_overlap.hpp"

using namespace epifuse;

namespace {

constexpr std::uint64_t k_base = 0x7f0000000000ull;

// x [M,N] f32 and bias [N] f32 in, y [M,N] f32 out.
KernelSpec bias_add() {
  return spec_from_json_text(R"({"epifuse": 1, "inputs": {"x": {"dtype": "f32"}, "bias": {"dtype": "f32", "broadcast": "row"}},
    "ops": [{"name": "y", "op": "add", "args": ["x", "bias"]}], "outputs": {"y": {"dtype": "f32"}}})");
}

std::string check(const KernelSpec& spec, const Shape& shape, std::vector<std::uint64_t> ins,
                  std::vector<std::uint64_t> outs, std::vector<std::string> in_names,
                  std::vector<std::string> out_names) {
  return overlapping_bindings(spec, shape, DeviceBindings{std::move(ins), std::move(outs)}, in_names, out_names);
}

}  // namespace

TEST_CASE("bindings: an output may be exactly a full input, never part of one, a vector input or another output") {
  const KernelSpec spec = bias_add();
  const Shape shape{64, 32, 0};
  const std::uint64_t x = k_base, bias = k_base + (1u << 20), y = k_base + (2u << 20);
  CHECK(check(spec, shape, {x, bias}, {y}, {"x", "bias"}, {"y"}).empty());
  CHECK(check(spec, shape, {x, x}, {y}, {"x", "bias"}, {"y"}).empty());  // inputs may share memory: only read
  CHECK(check(spec, shape, {x, bias}, {x}, {"x", "bias"}, {"y"}).empty());  // in place
  // One row further: the kernel reads rows it has written.
  const std::string shifted = check(spec, shape, {x, bias}, {x + 32 * 4}, {"x", "bias"}, {"y"});
  CHECK(shifted.find("output 'y' shares memory with input 'x'") != std::string::npos);
  CHECK(shifted.find("not the same view") != std::string::npos);
  // The last element of y is the first of bias.
  const std::string over_bias = check(spec, shape, {x, bias}, {bias - (64 * 32 - 1) * 4}, {"x", "bias"}, {"y"});
  CHECK(over_bias.find("input 'bias'") != std::string::npos);
  // One byte short of it: nothing shared.
  CHECK(check(spec, shape, {x, bias}, {bias - 64 * 32 * 4}, {"x", "bias"}, {"y"}).empty());
}

TEST_CASE("bindings: column blocks of one buffer (rows one pitch apart) are apart while their columns are") {
  const KernelSpec spec = bias_add();
  Shape shape{64, 32, 0};
  shape.ld_inputs = {96};  // x: columns 0-31 of a [64, 96] f32 buffer
  shape.ld_outputs = {96};
  const std::uint64_t buf = k_base, bias = k_base + (1u << 20);
  CHECK(check(spec, shape, {buf, bias}, {buf + 32 * 4}, {"x", "bias"}, {"y"}).empty());  // columns 32-63
  CHECK(check(spec, shape, {buf, bias}, {buf + 64 * 4}, {"x", "bias"}, {"y"}).empty());  // columns 64-95
  CHECK_FALSE(check(spec, shape, {buf, bias}, {buf + 16 * 4}, {"x", "bias"}, {"y"}).empty());  // 16-47
  // Columns 80-111: past the pitch, into the next row's first 16 columns, x's.
  CHECK_FALSE(check(spec, shape, {buf, bias}, {buf + 80 * 4}, {"x", "bias"}, {"y"}).empty());
  // Starting on x's last row's pitch: its 64th row is y's first and meets x's last.
  CHECK_FALSE(check(spec, shape, {buf, bias}, {buf + 63 * 96 * 4}, {"x", "bias"}, {"y"}).empty());
  CHECK(check(spec, shape, {buf, bias}, {buf + 63 * 96 * 4 + 32 * 4}, {"x", "bias"}, {"y"}).empty());
}

TEST_CASE("bindings: two outputs never share memory, and a GEMM's output never a GEMM operand's") {
  const KernelSpec two = spec_from_json_text(R"({"epifuse": 1, "inputs": {"x": {"dtype": "f16"}},
    "ops": [{"name": "h", "op": "relu", "args": ["x"]}, {"name": "y", "op": "sigmoid", "args": ["h"]}],
    "outputs": {"y": {"dtype": "f16"}, "h": {"dtype": "f16"}}})");
  const Shape shape{16, 16, 0};
  const std::uint64_t x = k_base, y = k_base + (1u << 20);
  const std::string same = check(two, shape, {x}, {y, y}, {"x"}, {"y", "h"});
  CHECK(same.find("outputs 'y' and 'h' share memory") != std::string::npos);
  CHECK(check(two, shape, {x}, {y, y + 16 * 16 * 2}, {"x"}, {"y", "h"}).empty());

  // y = A·B + residual, M = N = K = 64, f16: y written over A (a square
  // activation, an in-place linear) is refused; y over the residual is in place.
  const KernelSpec gemm = spec_from_json_text(R"({"epifuse": 1,
    "mainloop": {"kind": "gemm", "a": "f16", "b": "f16", "b_layout": "col"},
    "inputs": {"res": {"dtype": "f16"}},
    "ops": [{"name": "y", "op": "add", "args": ["acc", "res"]}], "outputs": {"y": {"dtype": "f16"}}})");
  const Shape mnk{64, 64, 64};
  const std::uint64_t a = k_base, b = k_base + (1u << 20), res = k_base + (2u << 20);
  const std::string over_a = check(gemm, mnk, {a, b, res}, {a}, {"a", "b", "res"}, {"y"});
  CHECK(over_a.find("GEMM operand 'a'") != std::string::npos);
  CHECK(check(gemm, mnk, {a, b, res}, {res}, {"a", "b", "res"}, {"y"}).empty());

  // Batched: the outputs of the batches are back to back, so a residual one
  // problem further on meets batch 1's output.
  Shape batched = mnk;
  batched.batch = 4;
  const std::uint64_t big = 4ull << 20;
  CHECK(check(gemm, batched, {a, a + big, a + 2 * big}, {a + 3 * big}, {"a", "b", "res"}, {"y"}).empty());
  CHECK_FALSE(
      check(gemm, batched, {a, a + big, a + 2 * big}, {a + 2 * big + 64 * 64 * 2}, {"a", "b", "res"}, {"y"}).empty());
}
