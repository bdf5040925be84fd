// GPU tier for strided epilogue tensors (Note [Strided epilogue tensors],
// docs/strided-batched.md step 2): a GEMM chain's full [M,N] input and outputs
// with rows ld >= N apart, on every mainloop the GPU reaches (mma.sync's fragment
// epilogue with and without its early loads, its staged epilogue and split-K;
// SIMT f32; the wave kernel's FMA form; on sm_90a wgmma's staged and fragment
// epilogues with prefetched inputs, a column sum beside a strided output, and the
// mma.sync general kernel an ld the vector stores cannot take sends a wgmma key
// to), single and dual GEMMs, ragged shapes, the smallest legal ld (N + 1), the
// smallest the vector stores take, and a larger one: the strided launch gives the
// dense launch's bits exactly, and both match the reference. run_on_device lays a
// strided input's gaps as NaN (a read shows in the output) and checks a strided
// output's gaps are still the poison it laid (a write throws). Skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>
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

using testing::gemm_tolerance;
using testing::gpu_jit;
using testing::hopper_jit;

int checked = 0;

// acc (* acc1) + bias [N] + res [M,N] -> relu (dropped where `p` > 0) -> y, and
// the pre-activation z: one full input, two full outputs.
KernelSpec chain(DType dt, MainloopKind kind = MainloopKind::gemm, double p = 0.0, Layout b = Layout::col,
                 GemmMath math = GemmMath::exact) {
  KernelSpec spec;
  spec.mainloop = {kind, dt, dt, Layout::row, b, math};
  Graph& g = spec.graph;
  Value z = g.add(g.accumulator(0), g.input("bias", dt, Broadcast::row));
  if (kind == MainloopKind::dual_gemm) z = g.mul(z, g.accumulator(1));
  z = g.add(z, g.input("res", dt));
  const Value y = g.relu(z);
  g.output("y", p > 0 ? g.dropout(y, p) : y, dt);
  g.output("z", z, dt);
  return spec;
}

// A dgrad: dacc = acc * saved, and its column sum (the fragment epilogue on wgmma).
KernelSpec dgrad(DType dt) {
  KernelSpec spec;
  spec.mainloop = {MainloopKind::gemm, dt, dt, Layout::row, Layout::col};
  Graph& g = spec.graph;
  const Value dacc = g.mul(g.accumulator(0), g.input("saved", dt));
  g.output("dacc", dacc, dt);
  g.output("db", g.col_sum(dacc), DType::f32);
  return spec;
}

// The lds a tensor of N columns is tried with: N + 1 (no vector access takes its
// rows), the smallest above N that 16-byte accesses take, and a larger one.
std::int64_t ld_for(std::int64_t n, int choice) {
  if (choice == 0) return n + 1;
  const std::int64_t base = choice == 1 ? n + 1 : n + 136;
  return (base + 7) / 8 * 8;
}

enum Strided : unsigned { inputs = 1, outputs = 2, both = 3 };

// Every full input (`which` & inputs) and output (& outputs) strided with ld
// choice `choice` (outputs past the first one choice further, so two outputs
// differ); the strided launch against the dense one bit for bit, both against
// the reference. `wgmma`: an output ld the vector stores cannot take sends the
// launch to the mma.sync general kernel, so the dense launch it is compared with
// is the general one too (pointers one element off).
void same_bits(Jit& jit, const KernelSpec& spec, const Shape& dense, unsigned which, int choice,
               const std::optional<TileConfig>& tile, std::uint64_t seed, bool wgmma = false, LaunchArgs args = {}) {
  const Graph& g = spec.graph;
  Shape s = dense;
  bool general = false;
  s.ld_inputs.assign(g.inputs().size(), 0);
  s.ld_outputs.assign(g.outputs().size(), 0);
  for (std::size_t i = 0; i < g.inputs().size(); ++i)
    if ((which & inputs) && g.node(g.inputs()[i]).broadcast == Broadcast::full) s.ld_inputs[i] = ld_for(dense.n, choice);
  for (std::size_t j = 0, k = 0; j < g.outputs().size(); ++j) {
    if (!(which & outputs) || g.node(g.outputs()[j].value).broadcast != Broadcast::full) continue;
    s.ld_outputs[j] = ld_for(dense.n, (choice + static_cast<int>(k++)) % 3);
    general = general || s.ld_outputs[j] % 4 != 0;
  }
  const TensorMap in = make_inputs(spec, dense, seed);
  const TensorMap want = evaluate(spec, dense, in, args);
  const TensorMap base = run_on_device(jit, spec, dense, in, args, tile, wgmma && general ? 1 : 0);
  const TensorMap got = run_on_device(jit, spec, s, in, args, tile);
  for (std::size_t j = 0; j < g.outputs().size(); ++j) {
    const Output& o = g.outputs()[j];
    INFO(to_string(spec.mainloop.kind) << " " << to_string(spec.mainloop.a) << " " << dense.m << "x" << dense.n << "x"
                                       << dense.k << " ld in " << (s.ld_inputs.empty() ? 0 : s.ld_inputs.back())
                                       << " ld out " << s.ld_outputs[j] << " tile "
                                       << (tile ? to_string(*tile) : "default") << " output " << o.name);
    const HostTensor& x = base.at(o.name);
    const HostTensor& y = got.at(o.name);
    REQUIRE(x.bytes.size() == y.bytes.size());
    CHECK(std::memcmp(x.bytes.data(), y.bytes.data(), x.bytes.size()) == 0);
    // The dense kernel's values are checked where its chain is (test_dual_gemm.cpp,
    // test_gemm_col_sum.cpp): here a dual GEMM's and a column sum's bits suffice.
    if (spec.mainloop.kind == MainloopKind::dual_gemm || g.node(o.value).broadcast != Broadcast::full) continue;
    Tolerance t = gemm_tolerance(o.dtype, dense);
    t.atol += static_cast<double>(dense.k) * std::ldexp(1.0, -21) * 4.0;  // a dgrad's acc * saved, |saved| <= 2
    const Comparison c = compare(y, want.at(o.name), t);
    CHECK_MESSAGE(c.ok, c.message);
  }
  ++checked;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("strided epilogue tensors: mma.sync epilogues, SIMT f32 and the wave kernel, ragged shapes") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 9700;
    const Shape shapes[] = {{65, 130, 33}, {200, 136, 96}, {256, 264, 512}};
    // mma.sync: the fragment epilogue (32x32 warp tiles), with its early loads
    // (32x16), the staged one (64x64), split-K; on sm_90a too (its default there
    // is wgmma for large shapes).
    const TileConfig mma[] = {GemmTile{64, 64, 32, 2, 2, 3}, GemmTile{64, 64, 32, 2, 4, 3},
                              GemmTile{128, 128, 32, 2, 2, 4}};
    for (const KernelSpec& spec : {chain(DType::f16, MainloopKind::gemm, 0.25), chain(DType::bf16)})
      for (const TileConfig& tile : mma)
        for (const Shape& s : shapes)
          for (unsigned which : {inputs, outputs, both})
            for (int choice : {0, 1, 2}) same_bits(*jit, spec, s, which, choice, tile, ++seed, false, {77, 5});
    const KernelSpec f16 = chain(DType::f16, MainloopKind::gemm, 0.25);
    for (int choice : {0, 1, 2}) same_bits(*jit, f16, {64, 96, 2048}, both, choice, GemmTile{64, 64, 32, 2, 2, 3, 8, 4}, ++seed);
    // tf32 on mma.sync, and exact f32 on SIMT (its default tile).
    const KernelSpec tf32 = chain(DType::f32, MainloopKind::gemm, 0.0, Layout::row, GemmMath::tf32);
    const KernelSpec f32 = chain(DType::f32, MainloopKind::gemm, 0.25);
    for (const Shape& s : shapes)
      for (int choice : {0, 1, 2}) {
        same_bits(*jit, tf32, s, both, choice, GemmTile{128, 128, 32, 2, 2, 3}, ++seed);
        same_bits(*jit, f32, s, both, choice, std::nullopt, ++seed, false, {78, 6});
      }
    // The wave kernel's FMA form (the AMD template's text on NVIDIA).
    for (const Shape& s : shapes)
      for (int choice : {0, 1, 2})
        same_bits(*jit, f16, s, both, choice, WaveTile{64, 64, 32, 2, 2, 8, 1, 1}, ++seed, false, {79, 7});
    MESSAGE(checked << " strided launches checked");
  }

  TEST_CASE("strided epilogue tensors: a dual GEMM's input and outputs") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 9900;
    for (DType dt : {DType::bf16, DType::f32}) {
      const KernelSpec spec = chain(dt, MainloopKind::dual_gemm);
      const std::optional<TileConfig> tile =  // two accumulators: warp tiles of 64x32
          dt == DType::f32 ? std::nullopt : std::optional<TileConfig>(GemmTile{128, 128, 32, 2, 4, 4});
      for (const Shape& s : {Shape{65, 130, 33}, Shape{192, 256, 128}})
        for (unsigned which : {inputs, outputs, both})
          for (int choice : {0, 1, 2}) same_bits(*jit, spec, s, which, choice, tile, ++seed);
    }
  }

  TEST_CASE("strided epilogue tensors: wgmma's staged and fragment epilogues, and the general kernel an ld sends them to") {
    Jit* jit = hopper_jit();
    if (!jit) return;
    std::uint64_t seed = 10100;
    const TileConfig tiles[] = {WgmmaTile{128, 128, 64, 4, 8}, WgmmaTile{128, 256, 64, 4, 8, 2},
                                WgmmaTile{128, 128, 64, 6, 8, 1, 1}, WgmmaTile{64, 64, 64, 8, 8, 1, 1}};
    // Without dropout two 16-bit outputs take the fragment epilogue; dropout
    // keeps the staged one. Both prefetch the [M,N] input.
    for (const KernelSpec& spec : {chain(DType::f16), chain(DType::bf16, MainloopKind::gemm, 0.25)}) {
      for (const TileConfig& tile : tiles)
        for (const Shape& s : {Shape{300, 264, 128}, Shape{512, 512, 512}})
          for (unsigned which : {inputs, outputs, both})
            for (int choice : {0, 1, 2}) same_bits(*jit, spec, s, which, choice, tile, ++seed, true, {80, 8});
      MESSAGE(checked << " strided launches checked");
    }
    // tf32 (f32 outputs: the staged epilogue's f32 quads), a dgrad's column sum
    // beside its strided output, a dual GEMM.
    const KernelSpec tf32 = chain(DType::f32, MainloopKind::gemm, 0.0, Layout::col, GemmMath::tf32);
    const KernelSpec dg = dgrad(DType::bf16);
    const KernelSpec dual = chain(DType::bf16, MainloopKind::dual_gemm);
    for (int choice : {0, 1, 2}) {
      same_bits(*jit, tf32, {300, 264, 128}, both, choice, WgmmaTile{128, 128, 32, 4, 8}, ++seed, true);
      same_bits(*jit, dg, {520, 264, 256}, both, choice, WgmmaTile{128, 128, 64, 4, 8}, ++seed, true);
      same_bits(*jit, dual, {320, 384, 256}, both, choice, WgmmaTile{128, 128, 64, 4, 8}, ++seed, true);
    }
    // The untuned default at a size where it is wgmma.
    same_bits(*jit, chain(DType::bf16), {2048, 2048, 512}, both, 2, std::nullopt, ++seed, true);
    MESSAGE(checked << " strided launches checked");
  }
}
