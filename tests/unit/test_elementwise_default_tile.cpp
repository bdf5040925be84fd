// The elementwise family's default tile for kernels without column sums
// (Note [Two vectors a thread]): the tile a chain gets without `epifuse tune`,
// pinned for a few chains, shapes and devices. The timings behind the choice
// are in docs/perf/elementwise.md ("Changes that were kept").
#include <doctest/doctest.h>

#include <string>

#include "codegen/elementwise/elementwise.hpp"
#include "codegen/family.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/device_info.hpp"
#include "epifuse/errors.hpp"

using namespace epifuse;

namespace {

// y = dropout(gelu_tanh(x + bias)) + residual, every tensor `dt`.
KernelSpec bias_gelu_dropout_add(DType dt, double p = 0.1) {
  KernelSpec s;
  Graph& g = s.graph;
  Value x = g.input("x", dt);  // inputs 0, 1, 2 (an ld's index)
  Value bias = g.input("bias", dt, Broadcast::row);
  Value residual = g.input("residual", dt);
  Value d = g.dropout(g.unary(OpKind::gelu_tanh, g.add(x, bias)), p, RngMode::philox4, 0);
  g.output("y", g.add(d, residual), dt);
  return s;
}

// y = (x + y) * 0.5: no draws.
KernelSpec add_scale(DType dt) {
  KernelSpec s;
  Graph& g = s.graph;
  Value x = g.input("x", dt);
  Value y = g.input("y", dt);
  g.output("out", g.scale(g.add(x, y), 0.5), dt);
  return s;
}

// An H100 SXM feeds each SM 12.8 DRAM bytes a clock at its peak, an H200 18.4.
const DeviceInfo h100{132, 227 * 1024, 50ull << 20, 3'352'000'000'000ull, 1'980'000};
const DeviceInfo h200{132, 227 * 1024, 60ull << 20, 4'810'000'000'000ull, 1'980'000};

ElementwiseTile tile_on(const KernelSpec& spec, const DeviceInfo& d, const Shape& shape,
                        std::string_view target = "sm_90a") {
  return std::get<ElementwiseTile>(emit_kernel(spec, shape, std::nullopt, KernelPath::fastest, target, d).tile);
}

}  // namespace

TEST_SUITE("elementwise") {
  TEST_CASE("default tile: 16-bit chains with dropout take two 16-byte vectors where the GPU feeds 16 bytes an SM a clock") {
    const Shape big{16384, 8192, 0};
    CHECK(feeds_16_bytes_an_sm_clock("sm_90a", h200));
    CHECK_FALSE(feeds_16_bytes_an_sm_clock("sm_90a", h100));
    CHECK_FALSE(feeds_16_bytes_an_sm_clock("gfx942", h200));
    CHECK_FALSE(feeds_16_bytes_an_sm_clock("sm_90a", DeviceInfo{132, 227 * 1024, 50ull << 20}));  // unknown

    for (DType dt : {DType::bf16, DType::f16}) {
      CAPTURE(to_string(dt));
      CHECK(tile_on(bias_gelu_dropout_add(dt), h200, big) == ElementwiseTile{256, 16, 0});
      CHECK(tile_on(bias_gelu_dropout_add(dt), h200, {131072, 1024, 0}) == ElementwiseTile{256, 16, 0});
      // The H100 and AMD GPUs keep one vector; so does a device that does not say its bandwidth.
      CHECK(tile_on(bias_gelu_dropout_add(dt), h100, big) == ElementwiseTile{256, 8, 0});
      CHECK(tile_on(bias_gelu_dropout_add(dt), h200, big, "gfx942") == ElementwiseTile{256, 8, 0});
      CHECK(tile_on(bias_gelu_dropout_add(dt), DeviceInfo{132, 227 * 1024, 50ull << 20}, big) ==
            ElementwiseTile{256, 8, 0});
    }
    // No draws, f32 tensors, or dropout that draws nothing: one vector.
    CHECK(tile_on(add_scale(DType::bf16), h200, big) == ElementwiseTile{256, 8, 0});
    CHECK(tile_on(bias_gelu_dropout_add(DType::f32), h200, big) == ElementwiseTile{256, 4, 0});
    CHECK(tile_on(bias_gelu_dropout_add(DType::bf16, 0.0), h200, big) == ElementwiseTile{256, 8, 0});
    // Fewer than 4 blocks of 256 x 16 elements an SM (2^21 elements on 132 SMs), or rows
    // that are not whole 16-element vectors: one vector.
    CHECK(tile_on(bias_gelu_dropout_add(DType::bf16), h200, {1024, 1024, 0}) == ElementwiseTile{256, 8, 0});
    CHECK(tile_on(bias_gelu_dropout_add(DType::bf16), h200, {1024, 2048, 0}) == ElementwiseTile{256, 8, 0});
    CHECK(tile_on(bias_gelu_dropout_add(DType::bf16), h200, {1024, 4096, 0}) == ElementwiseTile{256, 16, 0});
    CHECK(tile_on(bias_gelu_dropout_add(DType::bf16), h200, {2048, 4096, 0}) == ElementwiseTile{256, 16, 0});
    CHECK(tile_on(bias_gelu_dropout_add(DType::bf16), h200, {1024, 8448, 0}) == ElementwiseTile{256, 16, 0});
    CHECK(tile_on(bias_gelu_dropout_add(DType::bf16), h200, {1024, 8440, 0}) == ElementwiseTile{256, 8, 0});
    // A tile asked for is the tile.
    CHECK(std::get<ElementwiseTile>(emit_kernel(bias_gelu_dropout_add(DType::bf16), big, ElementwiseTile{128, 8, 4},
                                                KernelPath::fastest, "sm_90a", h200)
                                        .tile) == ElementwiseTile{128, 8, 4});
    // The assumed device (no GPU: `epifuse emit`) is the H100, so emitted sources do not move.
    CHECK(std::get<ElementwiseTile>(emit_kernel(bias_gelu_dropout_add(DType::bf16), big).tile) ==
          ElementwiseTile{256, 8, 0});
  }

  TEST_CASE("default tile: a strided view keeps two vectors where its rows start on 16 bytes, else narrows") {
    Shape strided{16384, 8192, 0};
    strided.ld_inputs = {8256, 0, 8256};  // x and residual, rows 8,256 elements apart
    CHECK(tile_on(bias_gelu_dropout_add(DType::bf16), h200, strided).vec == 16);
    strided.ld_inputs = {8200, 0, 0};  // 16,400 bytes: each of a vector's two 16-byte accesses aligned
    CHECK(tile_on(bias_gelu_dropout_add(DType::bf16), h200, strided).vec == 16);
    strided.ld_inputs = {8196, 0, 0};  // 16,392 bytes: 8-byte accesses, four elements (one Philox call)
    CHECK(tile_on(bias_gelu_dropout_add(DType::bf16), h200, strided).vec == 4);
  }
}
