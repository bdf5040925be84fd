// GPU tier for the dual GEMM (docs/dual-gemm.md): A * B0 and A * B1 into two
// accumulators, any chain over acc0 and acc1, on the mma.sync, FFMA and wgmma
// kernels. Every operand dtype and layout, odd shapes, every tile candidate,
// misaligned operands, decode shapes, dropout masks position by position, all
// against the reference evaluator on random non-zero data. Skips without a GPU;
// the wgmma cases need an sm_90a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "backend/cuda_driver.hpp"
#include "epifuse/compare.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/reference.hpp"
#include "gemm_checks.hpp"
#include "gpu_jit.hpp"

using namespace epifuse;

namespace {

using testing::gpu_jit;

// Specs and checks: tests/gemm_checks.hpp.
using testing::Chain;
using testing::check_dual;
using testing::check_mask;
using testing::dual_spec;
using testing::dual_tolerance;

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("dual gemm: f16, bf16, exact f32 and tf32, all four layouts, odd shapes, three chains") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 12000;
    for (const GemmMath math : {GemmMath::exact, GemmMath::tf32})
      for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
        if (math == GemmMath::tf32 && dt != DType::f32) continue;
        for (Layout a : {Layout::row, Layout::col})
          for (Layout b : {Layout::row, Layout::col})
            for (const Shape& s : {Shape{128, 256, 256}, Shape{67, 133, 41}, Shape{1, 8, 16}}) {
              const Chain chain = static_cast<Chain>(seed % 3);
              check_dual(*jit, dual_spec(dt, a, b, chain, 0.0, RngMode::philox4, math), s, ++seed);
            }
      }
  }

  TEST_CASE("dual gemm: every tile candidate, on the 16-byte path and the element path") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 12500;
    for (DType dt : {DType::f16, DType::f32})
      for (const Shape& s : {Shape{300, 264, 96}, Shape{130, 70, 33}}) {
        const KernelSpec spec = dual_spec(dt, Layout::row, Layout::row);
        const std::vector<TileConfig> tiles = tile_candidates(spec, s, jit->target());
        (void)jit->compile_all(spec, s, tiles);
        for (const TileConfig& tile : tiles) check_dual(*jit, spec, s, ++seed, tile);
      }
  }

  TEST_CASE("dual gemm: misaligned operands take element loads; decode shapes; K = 0") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 13000;
    for (Layout a : {Layout::row, Layout::col})
      for (std::size_t mis : {1u, 3u}) check_dual(*jit, dual_spec(DType::bf16, a, Layout::col), {96, 128, 64}, ++seed, std::nullopt, mis);
    // Decode: a few rows against a wide N (the narrow tiles fill the GPU along N).
    const KernelSpec swiglu = dual_spec(DType::f16, Layout::row, Layout::row, Chain::swiglu);
    for (const std::int64_t m : {16LL, 128LL}) {
      const Shape s{m, 11008, 512};
      check_dual(*jit, swiglu, s, ++seed);
      for (const GemmTile t : {GemmTile{16, 64, 64, 1, 2, 4, 8}, GemmTile{32, 64, 64, 1, 2, 4, 8}})
        check_dual(*jit, swiglu, s, ++seed, t);
    }
    check_dual(*jit, dual_spec(DType::f16, Layout::row, Layout::row), {33, 70, 0}, ++seed);
  }

  TEST_CASE("dual gemm: dropout masks equal the reference's, philox4 and triton, n4 and n1") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 13500;
    for (RngMode rng : {RngMode::philox4, RngMode::triton}) {
      const KernelSpec spec = dual_spec(DType::f16, Layout::row, Layout::col, Chain::gating, 0.3, rng);
      for (const Shape& s : {Shape{256, 512, 64}, Shape{130, 131, 40}})
        for (const TileConfig& tile : tile_candidates(spec, s, jit->target())) {
          check_mask(*jit, spec, s, ++seed, tile);
          check_dual(*jit, spec, s, ++seed, tile, 0, LaunchArgs{0x0123456789abcdefULL, 77});
        }
    }
  }

  TEST_CASE("dual gemm sm90: every dual wgmma tile, f16 and bf16, all four layouts, ragged edges" * doctest::test_suite("gpu_sm90")) {
    Jit* jit = gpu_jit();
    if (!jit || jit->target() != "sm_90a") {
      MESSAGE("dual wgmma tests skipped: no sm_90a GPU");
      return;
    }
    std::uint64_t seed = 14000;
    const std::vector<TileConfig> tiles = {WgmmaTile{128, 128, 64, 4, 8}, WgmmaTile{128, 128, 64, 4, 8, 2},
                                           WgmmaTile{128, 64, 64, 6, 8}, WgmmaTile{128, 64, 64, 6, 8, 1, 1},
                                           WgmmaTile{128, 128, 64, 3, 1, 2}, WgmmaTile{128, 64, 64, 6, 8, 2, 1}};
    for (DType dt : {DType::f16, DType::bf16})
      for (Layout a : {Layout::row, Layout::col})
        for (Layout b : {Layout::row, Layout::col}) {
          const KernelSpec spec = dual_spec(dt, a, b, static_cast<Chain>(seed % 3));
          (void)jit->compile_all(spec, {256, 256, 128}, tiles);
          for (const TileConfig& t : tiles)
            for (const Shape& s : {Shape{256, 256, 128}, Shape{200, 136, 72}, Shape{1032, 1040, 200}})
              check_dual(*jit, spec, s, ++seed, t);
        }
    // Dropout on the staged wgmma epilogue, and the default tile of a large problem.
    const KernelSpec drop = dual_spec(DType::bf16, Layout::row, Layout::row, Chain::gating, 0.2);
    for (const TileConfig& t : tiles) check_mask(*jit, drop, {256, 512, 64}, ++seed, t);
    CHECK(std::holds_alternative<WgmmaTile>(jit->compile(drop, {4096, 4096, 4096})->source().tile));
    CHECK_THROWS_AS(jit->compile(drop, {256, 256, 64}, WgmmaTile{128, 256, 64, 4, 8}), UserError);
    // tf32 (A row-major, B col-major): the same tiles with BK 32, dropout included.
    const KernelSpec tf = dual_spec(DType::f32, Layout::row, Layout::col, Chain::swiglu, 0.0, RngMode::philox4,
                                    GemmMath::tf32);
    const KernelSpec tf_drop = dual_spec(DType::f32, Layout::row, Layout::col, Chain::gating, 0.2, RngMode::philox4,
                                         GemmMath::tf32);
    for (TileConfig t : tiles) {
      std::get<WgmmaTile>(t).bk = 32;
      for (const Shape& s : {Shape{256, 256, 128}, Shape{200, 136, 72}}) check_dual(*jit, tf, s, ++seed, t);
      check_mask(*jit, tf_drop, {256, 512, 64}, ++seed, t);
    }
    CHECK(std::holds_alternative<WgmmaTile>(jit->compile(tf, {4096, 4096, 4096})->source().tile));
  }

  TEST_CASE("dual gemm: packed weights, one [2N, K] buffer (nn.Linear's fused gate/up), bind as B0 and B1") {
    // B col-major: B0 and B1 are stored [N][K] (K contiguous), so nn.Linear's
    // packed weight [2N, K] holds B0 in rows [0, N) and B1 in rows [N, 2N): the
    // kernel takes b0 = W and b1 = W + N*K, no copy (docs/dual-gemm.md).
    Jit* jit = gpu_jit();
    if (!jit) return;
    auto& drv = backend::cuda();
    std::uint64_t seed = 15000;
    const KernelSpec spec = dual_spec(DType::bf16, Layout::row, Layout::col, Chain::swiglu);
    std::vector<std::optional<TileConfig>> tiles = {std::nullopt, GemmTile{16, 64, 64, 1, 2, 4, 8}};
    if (jit->target() == "sm_90a") tiles.push_back(WgmmaTile{128, 128, 64, 4, 8});
    for (const Shape& shape : {Shape{64, 256, 128}, Shape{256, 512, 192}})
      for (const auto& tile : tiles) {
        const TensorMap inputs = make_inputs(spec, shape, ++seed);
        const TensorMap want = evaluate(spec, shape, inputs, {});
        const auto kernel = jit->compile(spec, shape, tile);
        const KernelSource& ks = kernel->source();
        const HostTensor b0 = to_device_layout(spec, "b0", inputs.at("b0")), b1 = to_device_layout(spec, "b1", inputs.at("b1"));
        std::vector<backend::DeviceBuffer> buffers;
        buffers.emplace_back(b0.bytes.size() + b1.bytes.size());  // the packed weight
        buffers.back().upload(b0.bytes.data(), b0.bytes.size());
        buffers.back().upload(b1.bytes.data(), b1.bytes.size(), b0.bytes.size());
        const std::uint64_t packed = buffers.back().ptr();
        DeviceBindings bindings;
        for (const std::string& name : ks.inputs) {
          if (name == "b0" || name == "b1") {
            bindings.inputs.push_back(packed + (name == "b1" ? b0.bytes.size() : 0));
            continue;
          }
          const HostTensor t = to_device_layout(spec, name, inputs.at(name));
          buffers.emplace_back(t.bytes.size());
          buffers.back().upload(t.bytes.data(), t.bytes.size());
          bindings.inputs.push_back(buffers.back().ptr());
        }
        for (const std::string& name : ks.outputs) {
          buffers.emplace_back(want.at(name).bytes.size());
          buffers.back().fill_bytes(0xFF);
          bindings.outputs.push_back(buffers.back().ptr());
        }
        jit->launch(*kernel, bindings, shape, {});
        drv.synchronize();
        for (std::size_t k = 0; k < ks.outputs.size(); ++k) {
          HostTensor got = want.at(ks.outputs[k]);
          drv.copy_to_host(got.bytes.data(), bindings.outputs[k], got.bytes.size());
          const Tolerance t = dual_tolerance(ks.outputs[k], got.dtype, shape, want);
          INFO("output " << ks.outputs[k] << " tile " << to_string(ks.tile) << " shape " << shape.m << "x" << shape.n);
          const Comparison c = compare(got, want.at(ks.outputs[k]), t);
          CHECK_MESSAGE(c.ok, c.message);
        }
      }
  }
}
