// GPU tier for strided GEMM operands (Note [Strided operands], docs/strided-batched.md
// step 1): for each mainloop the GPU reaches (mma.sync tiles, SIMT f32, and on
// sm_90a wgmma tiles), each operand strided (A, B row- and column-major, a dual
// GEMM's B0 and B1), ragged shapes, the smallest legal ld (its rows' length + 1:
// the element path, or wgmma's mma.sync general kernel), the smallest the
// 16-byte loads and TMA take, and a larger one: the strided launch gives the
// dense copy's bits exactly, and both match the reference. The device buffers'
// gaps are NaN (run_on_device), so a read of one shows. Skips without a GPU.
#include <doctest/doctest.h>

#include <cstring>
#include <optional>
#include <vector>

#include "epifuse/compare.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/reference.hpp"
#include "gemm_checks.hpp"
#include "gpu_jit.hpp"

using namespace epifuse;

namespace {

using testing::dual_spec;
using testing::dual_tolerance;
using testing::gemm_spec;
using testing::gemm_tolerance;
using testing::gpu_jit;
using testing::hopper_jit;

int checked = 0;

// The lds an operand is tried with: its rows' length + 1, the smallest that
// keeps 16-byte rows, and a larger aligned one.
std::vector<std::int64_t> lds_for(const KernelSpec& spec, const Shape& s, int operand) {
  const std::int64_t extent = gemm_operand_extent(spec.mainloop, s, operand);
  const std::int64_t vec = 16 / static_cast<std::int64_t>(size_of(spec.mainloop.a));
  return {extent + 1, (extent + vec) / vec * vec, (extent + 136 + vec - 1) / vec * vec};
}

// `ld` on the operands `mask` names (bit 0 A, 1 B/B0, 2 B1); the strided launch
// against the dense one bit for bit, both against the reference. `wgmma`: a
// misaligned ld takes the mma.sync general kernel, so the dense launch it is
// compared with is the general one too (pointers one element off).
void same_bits(Jit& jit, const KernelSpec& spec, const Shape& dense, unsigned mask, std::int64_t pad_choice,
               const std::optional<TileConfig>& tile, std::uint64_t seed, bool wgmma = false) {
  Shape s = dense;
  bool misaligned = false;
  for (int op = 0; op < 3; ++op) {
    if (!(mask & (1u << op))) continue;
    const std::int64_t ld = lds_for(spec, dense, op)[static_cast<std::size_t>(pad_choice)];
    (op == 0 ? s.lda : op == 1 ? s.ldb : s.ldb1) = ld;
    const std::int64_t vec = 16 / static_cast<std::int64_t>(size_of(spec.mainloop.a));
    misaligned = misaligned || ld % vec != 0;
  }
  const TensorMap inputs = make_inputs(spec, dense, seed);
  const TensorMap want = evaluate(spec, dense, inputs, {});
  const TensorMap base = run_on_device(jit, spec, dense, inputs, {}, tile, wgmma && misaligned ? 1 : 0);
  const TensorMap got = run_on_device(jit, spec, s, inputs, {}, tile);
  const bool dual = spec.mainloop.kind == MainloopKind::dual_gemm;
  for (const Output& o : spec.graph.outputs()) {
    INFO(to_string(spec.mainloop.kind) << " " << to_string(spec.mainloop.a) << " a " << to_string(spec.mainloop.a_layout)
                                       << " b " << to_string(spec.mainloop.b_layout) << " " << dense.m << "x"
                                       << dense.n << "x" << dense.k << " ld " << s.lda << "," << s.ldb << "," << s.ldb1
                                       << " tile " << (tile ? to_string(*tile) : "default") << " output " << o.name);
    const HostTensor& x = base.at(o.name);
    const HostTensor& y = got.at(o.name);
    REQUIRE(x.bytes.size() == y.bytes.size());
    CHECK(std::memcmp(x.bytes.data(), y.bytes.data(), x.bytes.size()) == 0);
    const Tolerance t = dual ? dual_tolerance(o.name, o.dtype, dense, want) : gemm_tolerance(o.dtype, dense);
    const Comparison c = compare(y, want.at(o.name), t);
    CHECK_MESSAGE(c.ok, c.message);
  }
  ++checked;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("strided operands: mma.sync and SIMT f32, every operand and layout, ragged shapes") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 9100;
    const Shape shapes[] = {{65, 130, 33}, {200, 136, 96}, {256, 264, 512}};
    for (DType dt : {DType::f16, DType::bf16, DType::f32})
      for (Layout a : {Layout::row, Layout::col})
        for (Layout b : {Layout::row, Layout::col}) {
          const KernelSpec spec = gemm_spec(dt, a, b);  // f32 exact: the SIMT mainloop
          // An mma.sync tile on sm_90a too (its default there is wgmma for large shapes).
          const std::optional<TileConfig> tile =
              dt == DType::f32 ? std::nullopt : std::optional<TileConfig>(GemmTile{128, 128, 32, 2, 2, 4});
          for (const Shape& s : shapes)
            for (unsigned mask : {1u, 2u, 3u})
              for (std::int64_t pad : {0, 1, 2}) same_bits(*jit, spec, s, mask, pad, tile, ++seed);
        }
    // The default tile of each, and split-K on mma.sync (a long K over few tiles;
    // SIMT tiles have none).
    for (DType dt : {DType::f16, DType::f32}) {
      const KernelSpec spec = gemm_spec(dt, Layout::row, Layout::col);
      const std::optional<TileConfig> split =
          dt == DType::f32 ? std::nullopt : std::optional<TileConfig>(GemmTile{64, 64, 32, 2, 2, 3, 8, 4});
      same_bits(*jit, spec, {64, 96, 2048}, 3u, 2, split, ++seed);
      same_bits(*jit, spec, {300, 264, 128}, 3u, 1, std::nullopt, ++seed);
    }
    MESSAGE(checked << " strided launches checked");
  }

  TEST_CASE("strided operands: a dual GEMM's A, B0 and B1") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 9300;
    for (DType dt : {DType::bf16, DType::f32})
      for (Layout b : {Layout::row, Layout::col}) {
        const KernelSpec spec = dual_spec(dt, Layout::row, b);
        const std::optional<TileConfig> tile =  // two accumulators: warp tiles of 64x32
            dt == DType::f32 ? std::nullopt : std::optional<TileConfig>(GemmTile{128, 128, 32, 2, 4, 4});
        for (const Shape& s : {Shape{65, 130, 33}, Shape{192, 256, 128}})
          for (unsigned mask : {2u, 4u, 7u})
            for (std::int64_t pad : {0, 1, 2}) same_bits(*jit, spec, s, mask, pad, tile, ++seed);
      }
  }

  TEST_CASE("strided operands: wgmma tiles (TMA strides), and the mma.sync general kernel for an ld TMA cannot take") {
    Jit* jit = hopper_jit();
    if (!jit) return;
    std::uint64_t seed = 9500;
    const TileConfig tiles[] = {WgmmaTile{128, 128, 64, 4, 8}, WgmmaTile{128, 256, 64, 4, 8, 2},
                                WgmmaTile{128, 128, 64, 6, 8, 1, 1}, WgmmaTile{64, 64, 64, 8, 8, 1, 1}};
    for (Layout a : {Layout::row, Layout::col})
      for (Layout b : {Layout::row, Layout::col}) {
        const KernelSpec spec = gemm_spec(DType::f16, a, b);
        for (const TileConfig& tile : tiles)
          for (const Shape& s : {Shape{300, 264, 128}, Shape{512, 512, 512}})
            for (unsigned mask : {1u, 2u, 3u})
              for (std::int64_t pad : {0, 1, 2}) same_bits(*jit, spec, s, mask, pad, tile, ++seed, true);
      }
    // tf32 (A row-major, B col-major) and a dual GEMM's B0 and B1.
    const KernelSpec tf32 = gemm_spec(DType::f32, Layout::row, Layout::col, 0.0, RngMode::philox4, Broadcast::row,
                                      GemmMath::tf32);
    for (std::int64_t pad : {0, 1, 2})
      same_bits(*jit, tf32, {300, 264, 128}, 3u, pad, WgmmaTile{128, 128, 32, 4, 8}, ++seed, true);
    const KernelSpec dual = dual_spec(DType::bf16, Layout::row, Layout::col);
    for (unsigned mask : {2u, 4u, 7u})
      for (std::int64_t pad : {0, 1, 2})
        same_bits(*jit, dual, {320, 384, 256}, mask, pad, WgmmaTile{128, 128, 64, 4, 8}, ++seed, true);
    // The untuned default at a size where it is wgmma.
    same_bits(*jit, gemm_spec(DType::bf16, Layout::row, Layout::col), {2048, 2048, 512}, 3u, 2, std::nullopt, ++seed);
  }
}
