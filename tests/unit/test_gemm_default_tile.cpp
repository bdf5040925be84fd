// The GEMM families' default tile (Note [Default GEMM tile]): the tile a chain
// gets without `epifuse tune`, pinned for the shapes of the sweep behind it
// (docs/perf/default-tiles.md) on an H100's properties and on a smaller GPU's.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "codegen/family.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/device_info.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/tile.hpp"

using namespace epifuse;

namespace {

KernelSpec bias_gelu(DType t, Layout b, MainloopKind kind = MainloopKind::gemm) {
  KernelSpec spec;
  spec.mainloop = {kind, t, t, Layout::row, b};
  if (t == DType::f32) spec.mainloop.math = GemmMath::tf32;
  Graph& g = spec.graph;
  if (kind == MainloopKind::dual_gemm) {
    g.output("y", g.mul(g.silu(g.accumulator(0)), g.accumulator(1)), t);
  } else {
    g.output("y", g.gelu_tanh(g.add(g.accumulator(0), g.input("bias", t, Broadcast::row))), t);
  }
  return spec;
}

// bias + ReLU + dropout: a staged epilogue with one [M,N] tensor.
KernelSpec bias_relu_dropout() {
  KernelSpec spec = bias_gelu(DType::bf16, Layout::col);
  spec.graph = Graph{};
  Graph& g = spec.graph;
  g.output("y", g.dropout(g.relu(g.add(g.accumulator(0), g.input("bias", DType::bf16, Broadcast::row))), 0.1),
           DType::bf16);
  return spec;
}

std::string default_tile(const KernelSpec& spec, const Shape& shape, const DeviceInfo& device,
                         std::string_view target = "sm_90a") {
  return to_string(family_for(spec).resolve_tile(spec, shape, std::nullopt, target, device));
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("GEMM default tile: every default is a tile the family accepts when requested") {
    // The rule's clauses are pinned one shape at a time below; here, over a grid
    // of shapes (few rows, partial tiles, one and many waves), chains (fragment,
    // staged, column sums, tf32, exact f32, the dual GEMM in 16 bits and tf32),
    // batches and devices (an H100, a slice of 16 of its SMs, an A100, an sm_86
    // GPU's 99 KiB a block, an AMD GPU), the default passes the checks a tile a
    // user asks for passes, and so does every tuner candidate: neither the rule
    // nor the tuner hands out a tile the check refuses. The default is always
    // among the candidates, so a tune never settles on a tile slower than it.
    KernelSpec sums = bias_gelu(DType::bf16, Layout::col);
    sums.graph = Graph{};
    {
      Graph& g = sums.graph;
      const Value d = g.mul(g.accumulator(0), g.input("saved", DType::bf16));
      g.output("dacc", d, DType::bf16);
      g.output("dbias", g.col_sum(d), DType::f32);
    }
    KernelSpec exact = bias_gelu(DType::f32, Layout::row);
    exact.mainloop.math = GemmMath::exact;  // the SIMT mainloop
    const KernelSpec specs[] = {bias_gelu(DType::bf16, Layout::col), bias_gelu(DType::f16, Layout::row),
                                bias_relu_dropout(), sums, bias_gelu(DType::f32, Layout::col), exact,
                                bias_gelu(DType::bf16, Layout::col, MainloopKind::dual_gemm),
                                bias_gelu(DType::f32, Layout::row, MainloopKind::dual_gemm)};
    const DeviceInfo h100 = assumed_device("sm_90a");
    DeviceInfo slice = h100, a100 = h100, sm86 = h100;
    slice.multiprocessors = 16;
    a100.multiprocessors = 108;
    a100.shared_per_block = 163 * 1024;
    sm86.multiprocessors = 84;
    sm86.shared_per_block = 99 * 1024;
    const std::pair<std::string_view, DeviceInfo> devices[] = {
        {"sm_90a", h100}, {"sm_90a", slice}, {"sm_80", a100}, {"sm_86", sm86}, {"gfx90a", assumed_device("gfx90a")}};
    int checked = 0;
    for (const KernelSpec& spec : specs) {
      const KernelFamily& family = family_for(spec);
      for (const auto& [target, device] : devices)
        for (const std::int64_t m : {16, 40, 64, 96, 112, 128, 192, 200, 512, 1000, 4096})
          for (const std::int64_t n : {64, 200, 1024, 4096, 8448, 14336})
            for (const std::int64_t k : {64, 1000, 4096, 14336})
              for (const std::int64_t batch : {1, 4}) {
                Shape shape{m, n, k};
                shape.batch = batch;
                INFO(target << " " << to_string(spec.mainloop.kind) << " " << to_string(spec.mainloop.a) << " " << m
                            << "x" << n << "x" << k << " batch " << batch << ", " << device.multiprocessors << " SMs");
                TileConfig tile;
                REQUIRE_NOTHROW(tile = family.resolve_tile(spec, shape, std::nullopt, target, device));
                INFO("default " << to_string(tile));
                CHECK_NOTHROW((void)family.resolve_tile(spec, shape, tile, target, device));
                // So is every candidate the tuner would time, and the default is one of them.
                const std::vector<TileConfig> candidates = tile_candidates(spec, shape, target, device);
                CHECK(std::find(candidates.begin(), candidates.end(), tile) != candidates.end());
                for (const TileConfig& c : candidates) {
                  INFO("candidate " << to_string(c));
                  CHECK_NOTHROW((void)family.resolve_tile(spec, shape, c, target, device));
                }
                ++checked;
              }
    }
    CHECK(checked == 8 * 5 * 11 * 6 * 4 * 2);
    // And every default emits, on both paths (the whole kernel, and the general
    // path a misaligned launch takes), for a few shapes of each class.
    for (const KernelSpec& spec : specs)
      for (const auto& [target, device] : devices)
        for (const Shape& shape : {Shape{64, 8192, 4096}, Shape{96, 4096, 1000}, Shape{1000, 1000, 200},
                                   Shape{4096, 8448, 4096}})
          for (const KernelPath path : {KernelPath::fastest, KernelPath::general}) {
            INFO(target << " " << to_string(spec.mainloop.kind) << " " << to_string(spec.mainloop.a) << " "
                        << shape.m << "x" << shape.n << "x" << shape.k);
            CHECK_NOTHROW((void)emit_kernel(spec, shape, std::nullopt, path, target, device));
          }
    // On 99 KiB the 128x256 default (136 KiB in four stages) becomes 128x128 with its four stages.
    CHECK(default_tile(specs[0], {4096, 4096, 4096}, sm86, "sm_86") == "128x128x32w2x4s4g8");
    CHECK(default_tile(specs[0], {4096, 4096, 4096}, a100, "sm_80") == "128x256x32w2x4s4g8");
  }

  TEST_CASE("GEMM default tile: ping-pong 128x128 from a wave of tiles, the fuller wave below") {
    const DeviceInfo h100 = assumed_device("sm_90a");
    REQUIRE(h100.multiprocessors == 132);
    for (const Layout b : {Layout::row, Layout::col}) {
      const KernelSpec spec = bias_gelu(DType::bf16, b);
      CHECK(default_tile(spec, {4096, 4096, 4096}, h100) == "h128x128x64s6g8p");
      CHECK(default_tile(spec, {16384, 16384, 4096}, h100) == "h128x128x64s6g8p");
      CHECK(default_tile(spec, {2048, 16384, 256}, h100) == "h128x128x64s6g8p");
      // 64 tiles of 128x128 against 128 of 128x64: the narrow tile fills the wave.
      CHECK(default_tile(spec, {1024, 1024, 1024}, h100) == "h128x64x64s8g8");
      // Whole 64-row tiles, 24 to one wave of them: the ping-pong 64x64 tile.
      CHECK(default_tile(spec, {128, 4096, 4096}, h100) == "h64x64x64s8g8p");
      CHECK(default_tile(spec, {512, 1024, 1024}, h100) == "h64x64x64s8g8p");
      CHECK(default_tile(spec, {64, 1536, 8192}, h100) == "h64x64x64s8g8p");     // 24 tiles
      CHECK(default_tile(spec, {64, 1024, 4096}, h100) == "32x32x64w2x2s4g8");   // 16: mma.sync
      // Under 128 rows, where 64x64 tiles take more than a wave or the last row
      // tile is partial: the ping-pong 64x128, where its tiles fit one wave.
      CHECK(default_tile(spec, {64, 14336, 4096}, h100) == "h64x128x64s5g8p");   // 224 tiles of 64x64
      CHECK(default_tile(spec, {96, 4096, 4096}, h100) == "h64x128x64s5g8p");
      // 128 tiles of 128x128 fill a wave as well as 256 of 128x64: the wider one.
      CHECK(default_tile(spec, {256, 8192, 2048}, h100) == "h128x128x64s6g8");
      // Where the narrow tiles fill more: ping-pong 64x128 with a partial last
      // row tile, or eight row tiles and more at K >= 4096; else 128x64.
      CHECK(default_tile(spec, {192, 4096, 4096}, h100) == "h64x128x64s5g8p");
      CHECK(default_tile(spec, {160, 4096, 2048}, h100) == "h64x128x64s5g8p");
      CHECK(default_tile(spec, {1024, 1024, 4096}, h100) == "h64x128x64s5g8p");
      CHECK(default_tile(spec, {4096, 256, 4096}, h100) == "h64x128x64s5g8p");
      CHECK(default_tile(spec, {256, 4096, 4096}, h100) == "h128x64x64s8g8");
      // 96 tiles of 128x128 fill as much as 192 of 128x64: the wider one.
      CHECK(default_tile(spec, {320, 4096, 4096}, h100) == "h128x128x64s6g8");
      // Between one wave of 128x128 tiles and two, where the narrow tiles fill
      // more: ping-pong 64x128 up to K = 2048, ping-pong 128x128 beyond; where
      // 192-column tiles fill more still, those (their own test case below).
      CHECK(default_tile(spec, {896, 3520, 2048}, h100) == "h64x128x64s5g8p");    // 196 tiles
      CHECK(default_tile(spec, {1536, 2304, 4096}, h100) == "h128x128x64s6g8p");  // 216 tiles, K = 4096
      CHECK(default_tile(spec, {768, 3072, 768}, h100) == "h64x192x64s5g8p");     // 144 tiles
      CHECK(default_tile(spec, {2048, 1536, 2048}, h100) == "h64x192x64s5g8p");   // 192 tiles
      CHECK(default_tile(spec, {768, 4096, 4096}, h100) == "h128x192x64s5g8");    // K = 4096
      // 216 tiles of 128x128 fill as much as 432 of 128x64: ping-pong 128x128.
      CHECK(default_tile(spec, {1152, 3072, 1536}, h100) == "h128x128x64s6g8p");
      CHECK(default_tile(spec, {2048, 2048, 2048}, h100) == "h128x128x64s6g8p");
      // Fewer than 64 rows: mma.sync's small tiles.
      CHECK(default_tile(spec, {16, 4096, 4096}, h100) == "32x32x64w2x2s4g8");
      // Below 512^2 outputs in a partial 64-row tile: mma.sync as before.
      CHECK(default_tile(spec, {200, 1024, 1024}, h100) == "64x64x32w2x4s4g8");
      // Another architecture: mma.sync tiles.
      CHECK(default_tile(spec, {4096, 4096, 4096}, h100, "sm_80") == "128x256x32w2x4s4g8");
    }
    // A GPU with half the SMs: 64 tiles of 128x128 are most of its wave.
    DeviceInfo half = h100;
    half.multiprocessors = 66;
    CHECK(default_tile(bias_gelu(DType::bf16, Layout::col), {1024, 1024, 1024}, half) == "h128x128x64s6g8");
    CHECK(default_tile(bias_gelu(DType::bf16, Layout::col), {2048, 1024, 1024}, half) == "h128x128x64s6g8p");
    CHECK(default_tile(bias_gelu(DType::bf16, Layout::col), {512, 1024, 1024}, half) == "h128x64x64s8g8");
  }

  TEST_CASE("GEMM default tile: staged epilogues with more than one [M,N] tensor keep 128x256 from K = 4096 where it fills the GPU") {
    const DeviceInfo h100 = assumed_device("sm_90a");
    // A training forward with dropout: y and the saved pre-activation (staged).
    KernelSpec saved = bias_gelu(DType::bf16, Layout::col);
    {
      Graph& g = saved.graph;
      saved.graph = Graph{};
      const Value z = g.add(g.accumulator(0), g.input("bias", DType::bf16, Broadcast::row));
      g.output("y", g.dropout(g.gelu_tanh(z), 0.1), DType::bf16);
      g.output("saved_z", z, DType::bf16);
    }
    CHECK(default_tile(saved, {16384, 16384, 4096}, h100) == "h128x256x64s4g8");
    CHECK(default_tile(saved, {1024, 1024, 1024}, h100) == "h128x64x64s8g8");
    // Below K = 4096 the ping-pong 128x128 (at 3072^3 the 192-column tiles fill the waves better).
    CHECK(default_tile(saved, {2560, 10240, 2560}, h100) == "h128x128x64s6g8p");
    CHECK(default_tile(saved, {3072, 3072, 3072}, h100) == "h128x192x64s5g8");
    CHECK(default_tile(saved, {8192, 8192, 2048}, h100) == "h128x128x64s6g8p");
    // Without dropout its two 16-bit outputs take the fragment epilogue: ping-pong.
    KernelSpec saved_plain = saved;
    {
      Graph& g = saved_plain.graph;
      g = Graph{};
      const Value z = g.add(g.accumulator(0), g.input("bias", DType::bf16, Broadcast::row));
      g.output("y", g.gelu_tanh(z), DType::bf16);
      g.output("saved_z", z, DType::bf16);
    }
    CHECK(default_tile(saved_plain, {16384, 16384, 4096}, h100) == "h128x128x64s6g8p");
    // An f32 saved output keeps the staged epilogue.
    KernelSpec saved_f32 = saved;
    {
      Graph& g = saved_f32.graph;
      g = Graph{};
      const Value z = g.add(g.accumulator(0), g.input("bias", DType::bf16, Broadcast::row));
      g.output("y", g.gelu_tanh(z), DType::bf16);
      g.output("saved_z", z, DType::f32);
    }
    CHECK(default_tile(saved_f32, {16384, 16384, 4096}, h100) == "h128x256x64s4g8");
    // A residual read with dropout: two [M,N] tensors and the staged epilogue.
    KernelSpec residual = bias_gelu(DType::bf16, Layout::col);
    residual.graph = Graph{};
    residual.graph.output("y", residual.graph.add(residual.graph.dropout(residual.graph.accumulator(0), 0.1),
                                                  residual.graph.input("r", DType::bf16)),
                          DType::bf16);
    CHECK(default_tile(residual, {16384, 4096, 11008}, h100) == "h128x256x64s4g8");
    // Dropout alone (one [M,N] tensor, staged): 128x256 from K = 8192.
    KernelSpec dropped = residual;
    dropped.graph = Graph{};
    dropped.graph.output("y", dropped.graph.dropout(dropped.graph.accumulator(0), 0.1), DType::bf16);
    CHECK(default_tile(dropped, {12288, 4096, 12288}, h100) == "h128x256x64s4g8");
    CHECK(default_tile(dropped, {8192, 8192, 8192}, h100) == "h128x256x64s4g8");
    CHECK(default_tile(dropped, {16384, 16384, 4096}, h100) == "h128x128x64s6g8p");
    // Without dropout the fragment epilogue loads the residual ahead: the ping-pong tile
    // (Note [Prefetched epilogue inputs]), as for a dgrad's saved pre-activation.
    KernelSpec plain = residual;
    plain.graph = Graph{};
    plain.graph.output("y", plain.graph.add(plain.graph.accumulator(0), plain.graph.input("r", DType::bf16)), DType::bf16);
    CHECK(default_tile(plain, {16384, 4096, 11008}, h100) == "h128x128x64s6g8p");
    KernelSpec dgrad = residual;
    dgrad.graph = Graph{};
    {
      Graph& g = dgrad.graph;
      const Value dz = g.mul(g.accumulator(0), g.unary(OpKind::gelu_tanh_deriv, g.input("saved_z", DType::bf16)));
      g.output("dz", dz, DType::bf16);
      g.output("dbias", g.unary(OpKind::col_sum, dz), DType::bf16);
    }
    CHECK(default_tile(dgrad, {8192, 8192, 8192}, h100) == "h128x128x64s6g8p");
    // Except deep (K >= 8192) and large (2^40 multiply-adds): 128x256.
    CHECK(default_tile(dgrad, {16384, 16384, 4096}, h100) == "h128x128x64s6g8p");
    CHECK(default_tile(dgrad, {16384, 16384, 8192}, h100).starts_with("h128x256x64"));
    CHECK(default_tile(dgrad, {4096, 32768, 8192}, h100).starts_with("h128x256x64"));
    CHECK(default_tile(dgrad, {16384, 32768, 8192}, h100).starts_with("h128x256x64"));
    CHECK(default_tile(plain, {16384, 16384, 8192}, h100).starts_with("h128x256x64"));
    CHECK(default_tile(bias_gelu(DType::bf16, Layout::col), {16384, 32768, 8192}, h100) == "h128x128x64s6g8p");
    // A bias (an [N] row) is not one: the ping-pong tile.
    CHECK(default_tile(bias_gelu(DType::bf16, Layout::col), {16384, 4096, 11008}, h100) == "h128x128x64s6g8p");
  }

  TEST_CASE("GEMM default tile: staged epilogues between one wave and two, and at 64 rows") {
    const DeviceInfo h100 = assumed_device("sm_90a");
    const KernelSpec dropped = bias_relu_dropout();
    // Where the narrow tiles fill more: 128x64 up to K = 1024, the ping-pong 64x128
    // to K = 2048; where 192-column tiles fill more still, the cooperative 128x192.
    CHECK(default_tile(dropped, {896, 3520, 1024}, h100) == "h128x64x64s8g8");
    CHECK(default_tile(dropped, {896, 3520, 2048}, h100) == "h64x128x64s5g8p");
    CHECK(default_tile(dropped, {768, 3072, 768}, h100) == "h128x192x64s5g8");
    CHECK(default_tile(dropped, {1024, 2560, 1024}, h100) == "h128x192x64s5g8");
    CHECK(default_tile(dropped, {1536, 2048, 1024}, h100) == "h128x192x64s5g8");
    CHECK(default_tile(dropped, {1280, 2048, 2048}, h100) == "h128x192x64s5g8");
    CHECK(default_tile(dropped, {768, 4096, 4096}, h100) == "h128x192x64s5g8");
    CHECK(default_tile(dropped, {1152, 3072, 1536}, h100) == "h128x128x64s6g8p");
    // The fragment epilogue keeps the ping-pong 64x128 there, or takes the ping-pong 64x192.
    CHECK(default_tile(bias_gelu(DType::bf16, Layout::col), {896, 3520, 1024}, h100) == "h64x128x64s5g8p");
    CHECK(default_tile(bias_gelu(DType::bf16, Layout::col), {1024, 2560, 1024}, h100) == "h64x192x64s5g8p");
    // 64 rows: the ping-pong 64x64 where its tiles fit a wave; else, under 64
    // rows or past a wave of 64x128 tiles at K >= 4096, mma.sync's 64x64 tile
    // in six stages; more rows keep wgmma's ping-pong 64x128.
    CHECK(default_tile(dropped, {64, 8192, 4096}, h100) == "h64x64x64s8g8p");
    CHECK(default_tile(dropped, {64, 8192, 2048}, h100) == "h64x64x64s8g8p");
    CHECK(default_tile(dropped, {40, 8192, 4096}, h100) == "64x64x64w2x2s6g8");
    CHECK(default_tile(dropped, {64, 20480, 4096}, h100) == "64x64x64w2x2s6g8");
    CHECK(default_tile(dropped, {192, 4096, 4096}, h100) == "h64x128x64s5g8p");
    CHECK(default_tile(bias_gelu(DType::bf16, Layout::col), {64, 8192, 4096}, h100) == "h64x64x64s8g8p");
    // mma.sync's own default there (any architecture): six stages where they fit.
    CHECK(default_tile(bias_gelu(DType::bf16, Layout::col), {64, 8192, 4096}, h100, "sm_80") == "64x64x64w2x2s6g8");
    CHECK(default_tile(bias_gelu(DType::bf16, Layout::col), {64, 8192, 1024}, h100, "sm_80") == "64x64x64w2x2s3g8");
    DeviceInfo small = h100;
    small.shared_per_block = 48 * 1024;
    CHECK(default_tile(bias_gelu(DType::bf16, Layout::col), {64, 8192, 4096}, small, "sm_80") == "64x64x64w2x2s3g8");
  }

  TEST_CASE("GEMM default tile: fragment epilogues with more [M,N] tensors take a cluster of two from 16 waves") {
    const DeviceInfo h100 = assumed_device("sm_90a");
    KernelSpec saved = bias_gelu(DType::bf16, Layout::col);
    {
      Graph& g = saved.graph;
      g = Graph{};
      const Value z = g.add(g.accumulator(0), g.input("bias", DType::bf16, Broadcast::row));
      g.output("y", g.gelu_tanh(z), DType::bf16);
      g.output("saved_z", z, DType::bf16);
    }
    KernelSpec dgrad = saved;
    {
      Graph& g = dgrad.graph;
      g = Graph{};
      const Value dz = g.mul(g.accumulator(0), g.unary(OpKind::gelu_tanh_deriv, g.input("saved_z", DType::bf16)));
      g.output("dz", dz, DType::bf16);
      g.output("dbias", g.unary(OpKind::col_sum, dz), DType::bf16);
    }
    // Two tensors: K <= 2048 and 16 waves (2112 tiles of 128x128 on 132 SMs).
    for (const KernelSpec* spec : {&saved, &dgrad}) {
      CHECK(default_tile(*spec, {8192, 8192, 2048}, h100) == "h128x128x64s6g8c2p");
      CHECK(default_tile(*spec, {16384, 8192, 2048}, h100) == "h128x128x64s6g8c2p");
      CHECK(default_tile(*spec, {2048, 8192, 2048}, h100) == "h128x128x64s6g8p");     // 1024 tiles
      CHECK(default_tile(*spec, {4096, 4096, 4096}, h100) == "h128x128x64s6g8p");
      CHECK(default_tile(*spec, {8192, 16384, 4096}, h100) == "h128x128x64s6g8p");    // K = 4096
    }
    // One tensor: the ping-pong tile whatever K.
    CHECK(default_tile(bias_gelu(DType::bf16, Layout::col), {8192, 8192, 2048}, h100) == "h128x128x64s6g8p");
    // Four (the gated MLP's dgrad: two saved inputs, two outputs): any K.
    KernelSpec gated = dgrad;
    {
      Graph& g = gated.graph;
      g = Graph{};
      const Value gate = g.input("saved_gate", DType::bf16), up = g.input("saved_up", DType::bf16);
      const Value acc = g.accumulator(0);
      g.output("dgate", g.mul(g.mul(acc, up), g.unary(OpKind::silu_deriv, gate)), DType::bf16);
      g.output("dup", g.mul(acc, g.silu(gate)), DType::bf16);
    }
    CHECK(default_tile(gated, {8192, 11008, 4096}, h100) == "h128x128x64s6g8c2p");
    CHECK(default_tile(gated, {16384, 11008, 4096}, h100) == "h128x128x64s6g8c2p");
    CHECK(default_tile(gated, {8192, 5504, 2048}, h100) == "h128x128x64s6g8c2p");
    CHECK(default_tile(gated, {2048, 5504, 2048}, h100) == "h128x128x64s6g8p");      // 688 tiles
    // Deep and large keeps 128x256.
    CHECK(default_tile(gated, {16384, 32768, 8192}, h100).starts_with("h128x256x64"));
  }

  TEST_CASE("GEMM default tile: 192-column tiles where their waves hold more of the outputs than 128x128's") {
    const DeviceInfo h100 = assumed_device("sm_90a");
    const KernelSpec fragment = bias_gelu(DType::bf16, Layout::col);
    const KernelSpec staged = bias_relu_dropout();
    // 3072^3: 576 tiles of 128x128 hold 87% of 4.4 waves' slots, 384 of 128x192 97% of 2.9.
    CHECK(default_tile(staged, {3072, 3072, 3072}, h100) == "h128x192x64s5g8");
    CHECK(default_tile(fragment, {3072, 3072, 3072}, h100) == "h64x192x64s5g8p");
    CHECK(default_tile(fragment, {1536, 6144, 1536}, h100) == "h64x192x64s5g8p");
    // Both B layouts.
    CHECK(default_tile(bias_gelu(DType::bf16, Layout::row), {3072, 3072, 3072}, h100) == "h64x192x64s5g8p");
    // A fragment epilogue with few rows and a deep K: the cooperative 128x192.
    CHECK(default_tile(fragment, {768, 12288, 2048}, h100) == "h128x192x64s5g8");
    CHECK(default_tile(fragment, {768, 12288, 1024}, h100) == "h64x192x64s5g8p");
    CHECK(default_tile(fragment, {1536, 6144, 2048}, h100) == "h64x192x64s5g8p");
    // 93% against 97%: enough for a staged epilogue, not for a fragment one.
    CHECK(default_tile(staged, {14336, 1536, 2048}, h100) == "h128x192x64s5g8");
    CHECK(default_tile(fragment, {14336, 1536, 2048}, h100) == "h128x128x64s6g8p");
    // Where 128x128 tiles fill their waves: unchanged.
    for (const Shape& s : {Shape{4096, 4096, 4096}, Shape{8192, 8192, 2048}, Shape{2048, 8192, 2048}})
      CHECK(default_tile(fragment, s, h100) == "h128x128x64s6g8p");
    CHECK(default_tile(staged, {8192, 8192, 8192}, h100) == "h128x256x64s4g8");
    // tf32 (f32 outputs: a staged epilogue) takes the cooperative 128x192, also from K = 4096.
    const KernelSpec tf32 = bias_gelu(DType::f32, Layout::col);
    CHECK(default_tile(tf32, {3072, 3072, 3072}, h100) == "h128x192x32s5g8");
    CHECK(default_tile(tf32, {6144, 1536, 4096}, h100) == "h128x192x32s5g8");
    CHECK(default_tile(tf32, {4096, 4096, 4096}, h100) == "h128x256x32s4g8");
    // Not measured, so not taken: a batched launch, a dual GEMM, a fragment
    // epilogue with more than one [M,N] tensor or with column sums.
    // Nor a batched or strided problem: no GPU test has run one on them yet, so
    // they are not among its candidates either, and asking for one is an error.
    Shape batched{3072, 3072, 3072};
    batched.batch = 4;
    CHECK(default_tile(fragment, batched, h100) == "h128x128x64s6g8p");
    Shape strided{3072, 3072, 3072};
    strided.lda = 4096;
    CHECK(default_tile(fragment, strided, h100) == "h128x128x64s6g8p");
    Shape strided_out{3072, 3072, 3072};
    strided_out.ld_outputs = {4096};
    CHECK(default_tile(staged, strided_out, h100) == "h128x128x64s6g8p");
    for (const Shape& s : {batched, strided, strided_out}) {
      for (const TileConfig& c : tile_candidates(fragment, s, "sm_90a"))
        CHECK(std::get<WgmmaTile>(c).bn != 192);
      CHECK_THROWS_WITH_AS(emit_kernel(fragment, s, parse_tile("h128x192x64s5g8"), KernelPath::fastest, "sm_90a"),
                           doctest::Contains("dense and unbatched"), UserError);
    }
    CHECK(tile_candidates(fragment, {3072, 3072, 3072}, "sm_90a").size() == 11);
    CHECK(default_tile(bias_gelu(DType::bf16, Layout::col, MainloopKind::dual_gemm), {3072, 3072, 3072}, h100)
              .find("x192") == std::string::npos);
    KernelSpec residual = fragment;
    residual.graph = Graph{};
    residual.graph.output("y", residual.graph.add(residual.graph.accumulator(0), residual.graph.input("r", DType::bf16)),
                          DType::bf16);
    CHECK(default_tile(residual, {3072, 3072, 3072}, h100) == "h128x128x64s6g8p");
    KernelSpec summed = fragment;
    summed.graph.output("ysum", summed.graph.col_sum(summed.graph.accumulator(0)), DType::f32);
    CHECK(default_tile(summed, {3072, 3072, 3072}, h100) == "h128x128x64s6g8p");
    // A staged epilogue with column sums keeps the clause; their rows take shared
    // memory, and with two the ring gives up a stage.
    KernelSpec staged_sum = staged;
    staged_sum.graph.output("ysum", staged_sum.graph.col_sum(staged_sum.graph.accumulator(0)), DType::f32);
    CHECK(default_tile(staged_sum, {3072, 3072, 3072}, h100) == "h128x192x64s5g8");
    staged_sum.graph.output("ysum2", staged_sum.graph.col_sum(staged_sum.graph.accumulator(0)), DType::f32);
    CHECK(default_tile(staged_sum, {3072, 3072, 3072}, h100) == "h128x192x64s4g8");
    // A smaller GPU's waves: 108 SMs (3072^3: 576 tiles in 5.3 waves, 384 in 3.6) - no gain.
    DeviceInfo a100 = h100;
    a100.multiprocessors = 108;
    CHECK(default_tile(fragment, {3072, 3072, 3072}, a100) == "h128x128x64s6g8p");
    // Bad BN 192 tiles are user errors.
    CHECK_THROWS_WITH_AS(emit_kernel(fragment, {3072, 3072, 3072}, parse_tile("h128x192x64s4g8c2"), KernelPath::fastest, "sm_90a"),
                         doctest::Contains("BN 192 runs without a cluster"), UserError);
  }

  TEST_CASE("GEMM default tile: a batched launch of 2^40 multiply-adds and more takes the cooperative 128x256") {
    const DeviceInfo h100 = assumed_device("sm_90a");
    const KernelSpec spec = bias_gelu(DType::bf16, Layout::row);
    auto batched = [](Shape s, std::int64_t b) {
      s.batch = b;
      return s;
    };
    CHECK(default_tile(spec, batched({2048, 2048, 2048}, 256), h100) == "h128x256x64s4g8");
    CHECK(default_tile(spec, batched({2048, 2048, 2048}, 128), h100) == "h128x256x64s4g8");
    CHECK(default_tile(spec, batched({2048, 2048, 2048}, 64), h100) == "h128x128x64s6g8p");
    CHECK(default_tile(spec, batched({2048, 2048, 2048}, 32), h100) == "h128x128x64s6g8p");
    // The same work in one problem keeps ping-pong (8192^3 is 2^39; 16384^2 x 4096 is 2^40).
    CHECK(default_tile(spec, {16384, 16384, 4096}, h100) == "h128x128x64s6g8p");
  }

  TEST_CASE("GEMM default tile: the dual GEMM") {
    const DeviceInfo h100 = assumed_device("sm_90a");
    const KernelSpec swiglu = bias_gelu(DType::bf16, Layout::col, MainloopKind::dual_gemm);
    CHECK(default_tile(swiglu, {16384, 11008, 4096}, h100) == "h128x64x64s6g8p");
    CHECK(default_tile(swiglu, {1024, 1024, 1024}, h100) == "h128x64x64s6g8");
    // 86 tiles of 128x128 or 172 of 128x64: the same share of the waves.
    CHECK(default_tile(swiglu, {128, 11008, 4096}, h100) == "h128x128x64s4g8");
    CHECK(default_tile(swiglu, {64, 11008, 4096}, h100) == "h64x128x64s5g8p");
    CHECK(default_tile(swiglu, {16, 4096, 4096}, h100) == "32x32x64w2x2s4g8");
  }

  TEST_CASE("GEMM default tile: tf32 on mma.sync (MN-major B), split-K under a wave") {
    const DeviceInfo h100 = assumed_device("sm_90a");
    const KernelSpec tf32 = bias_gelu(DType::f32, Layout::row);
    CHECK(default_tile(tf32, {8192, 8192, 8192}, h100) == "128x256x32w2x4s4g8");
    CHECK(default_tile(tf32, {256, 8192, 2048}, h100) == "128x128x32w2x4s6g8");
    CHECK(default_tile(tf32, {1024, 1024, 1024}, h100) == "128x128x32w2x4s6g8k2");
    CHECK(default_tile(tf32, {128, 4096, 4096}, h100) == "128x128x32w2x4s6g8k4");
    // Where four splits of 128x128 would fill under half a wave (16 tiles), the
    // 64x64 tile in four splits; with a shallower K, as before.
    CHECK(default_tile(tf32, {128, 2048, 4096}, h100) == "64x64x64w2x2s3g8k4");
    CHECK(default_tile(tf32, {128, 2048, 2048}, h100) != "64x64x64w2x2s3g8k4");
    CHECK(default_tile(tf32, {16, 4096, 4096}, h100) == "64x64x64w2x2s3g8k4");
    // 32 tiles split in 4 where K leaves 16 BK steps a split (else 64x128 tiles
    // split in 2), in 2 where it leaves 8, or not at all.
    CHECK(default_tile(tf32, {512, 1024, 2048}, h100) == "128x128x32w2x4s6g8k4");
    CHECK(default_tile(tf32, {512, 1024, 1024}, h100) == "64x128x32w2x2s6g8k2");
    CHECK(default_tile(tf32, {512, 1024, 1536}, h100) == "64x128x32w2x2s6g8k2");
    CHECK(default_tile(tf32, {512, 1024, 512}, h100) == "128x128x32w2x4s6g8k2");
    CHECK(default_tile(tf32, {512, 1024, 256}, h100) == "128x128x32w2x4s6g8");
    // 576 tiles of 128x128 in five waves against 288 of 128x256 in three: 128x128.
    CHECK(default_tile(tf32, {1536, 6144, 1536}, h100) == "128x128x32w2x4s6g8");
    CHECK(default_tile(tf32, {3072, 3072, 3072}, h100) == "128x128x32w2x4s6g8");
    // 1600 in 13 against 800 in 7: within a tenth, 128x256.
    CHECK(default_tile(tf32, {2560, 10240, 2560}, h100) == "128x256x32w2x4s4g8");
    // 144 or 160 tiles of 128x128 (a second wave mostly idle): 64x64; from 176, as before.
    CHECK(default_tile(tf32, {768, 3072, 768}, h100) == "64x64x32w2x2s4g8");
    CHECK(default_tile(tf32, {1280, 2048, 2048}, h100) == "64x64x32w2x2s4g8");
    CHECK(default_tile(tf32, {2048, 1536, 2048}, h100) == "128x256x32w2x4s4g8");
    CHECK(default_tile(tf32, {2048, 2048, 2048}, h100) == "128x256x32w2x4s4g8");
    // Up to 64 rows the 64-row tile, unsplit where its tiles fill a wave.
    CHECK(default_tile(tf32, {16, 14336, 4096}, h100) == "64x64x64w2x2s3g8");
    // GPUs whose shared memory holds less: the largest ring that fits (the
    // 128 KiB of 128x128 in 4 stages once failed on sm_86's 99 KiB).
    DeviceInfo a100 = h100;
    a100.shared_per_block = 163 * 1024;
    CHECK(default_tile(tf32, {8192, 8192, 8192}, a100, "sm_80") == "128x128x32w2x4s4g8");
    DeviceInfo small = h100;
    small.shared_per_block = 99 * 1024;
    CHECK(default_tile(tf32, {8192, 8192, 8192}, small, "sm_86") == "128x128x32w2x4s3g8");
    CHECK(default_tile(tf32, {512, 1024, 1024}, small, "sm_86") == "64x128x32w2x2s3g8k2");
    CHECK(default_tile(tf32, {1024, 1024, 1024}, small, "sm_86") == "128x128x32w2x4s3g8k2");
    // K-major tf32 takes wgmma: ping-pong 128x128 between one wave and two,
    // and up to K = 3072; from K = 4096 the cooperative 128x256.
    CHECK(default_tile(bias_gelu(DType::f32, Layout::col), {8192, 8192, 8192}, h100) == "h128x256x32s4g8");
    // Between one wave of 128x128 tiles and two, where the narrow tiles fill
    // more: the ping-pong 64x128 up to K = 1024, ping-pong 128x128 beyond;
    // where 192-column tiles fill more still, the cooperative 128x192.
    CHECK(default_tile(bias_gelu(DType::f32, Layout::col), {896, 3520, 1024}, h100) == "h64x128x32s5g8p");
    CHECK(default_tile(bias_gelu(DType::f32, Layout::col), {896, 3520, 2048}, h100) == "h128x128x32s6g8p");
    CHECK(default_tile(bias_gelu(DType::f32, Layout::col), {768, 3072, 768}, h100) == "h128x192x32s5g8");
    CHECK(default_tile(bias_gelu(DType::f32, Layout::col), {1024, 2560, 1024}, h100) == "h128x192x32s5g8");
    CHECK(default_tile(bias_gelu(DType::f32, Layout::col), {2048, 1536, 2048}, h100) == "h128x192x32s5g8");
    // Under 64 rows as well, from 32K outputs.
    CHECK(default_tile(bias_gelu(DType::f32, Layout::col), {16, 4096, 4096}, h100) == "h64x128x32s5g8p");
    CHECK(default_tile(bias_gelu(DType::f32, Layout::col), {32, 1024, 1024}, h100) == "h64x128x32s5g8p");
    CHECK(default_tile(bias_gelu(DType::f32, Layout::col), {16, 1024, 1024}, h100) == "64x64x64w2x2s3g8k2");
    CHECK(default_tile(bias_gelu(DType::f32, Layout::col), {6144, 12288, 3072}, h100) == "h128x128x32s6g8p");
    CHECK(default_tile(bias_gelu(DType::f32, Layout::col), {4096, 14336, 4096}, h100) == "h128x256x32s4g8");
    CHECK(default_tile(bias_gelu(DType::f32, Layout::col), {12288, 4096, 12288}, h100) == "h128x256x32s4g8");
  }
}
