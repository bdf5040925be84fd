// GPU tier for batched GEMMs (Note [Batched GEMM], docs/strided-batched.md step
// 4): for each mainloop the GPU reaches (mma.sync tiles, SIMT f32, and on
// sm_90a wgmma tiles with 3-D tensor maps), single and dual GEMMs, ragged
// shapes, dense, shared (batch stride 0) and spaced (a stride past the
// operand's size, the gaps NaN) operands: one batched launch gives the bits of
// a loop of single launches of the same tile. With dropout, batch b's mask is
// the single launch's over the batches stacked in rows (docs/design.md §4,
// batched elements: i = b*M*N + r*N + c), on integer-valued operands so the
// stacked launch's accumulators are exact whatever its tiles. Skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include <fmt/format.h>

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

// y = dropout(act(acc [* acc1] + bias + res), p): a shared row input, a batched full one.
KernelSpec chain(DType dt, Layout a, Layout b, MainloopKind kind = MainloopKind::gemm, double p = 0.0,
                 GemmMath math = GemmMath::exact) {
  KernelSpec spec;
  spec.mainloop = {kind, dt, dt, a, b, math};
  Graph& g = spec.graph;
  Value y = g.add(g.accumulator(0), g.input("bias", dt, Broadcast::row));
  if (kind == MainloopKind::dual_gemm) y = g.mul(g.silu(y), g.accumulator(1));
  y = g.relu(g.add(y, g.input("res", dt)));
  if (p > 0) y = g.dropout(y, p);
  g.output("y", y, dt);
  return spec;
}

Shape batched(Shape s, std::int64_t batch, std::int64_t stride_a = Shape::dense_batch,
              std::int64_t stride_b = Shape::dense_batch) {
  s.batch = batch;
  s.batch_stride_a = stride_a;
  s.batch_stride_b = stride_b;
  return s;
}

// Batch b of a [B, ...] host tensor; a shared one as it is.
HostTensor slice(const HostTensor& t, std::size_t rank, std::int64_t b) {
  if (t.shape.size() == rank) return t;
  HostTensor out = HostTensor::zeros(t.dtype, std::vector<std::int64_t>(t.shape.begin() + 1, t.shape.end()));
  std::memcpy(out.bytes.data(), t.bytes.data() + out.bytes.size() * static_cast<std::size_t>(b), out.bytes.size());
  return out;
}

// make_inputs rounded to integers (|v| <= 4): exact fp32 accumulators in any order.
TensorMap integer_inputs(const KernelSpec& spec, const Shape& s, std::uint64_t seed) {
  TensorMap in = make_inputs(spec, s, seed);
  for (auto& [name, t] : in)
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, std::round(2 * t.get(i)));
  return in;
}

std::string what(const KernelSpec& spec, const Shape& s, const std::optional<TileConfig>& tile) {
  return fmt::format("{} {} a {} b {} {}x{}x{} batch {} strides {},{} tile {}", to_string(spec.mainloop.kind),
                     to_string(spec.mainloop.a), to_string(spec.mainloop.a_layout), to_string(spec.mainloop.b_layout),
                     s.m, s.n, s.k, s.batch, s.batch_stride_a, s.batch_stride_b, tile ? to_string(*tile) : "default");
}

// One batched launch against a loop of single launches, bit for bit. Without
// dropout each single launch is batch b's problem; with it, the problem of the
// batches stacked in rows up to b (A and the full input zero above batch b's
// rows), whose last M rows draw batch b's mask. `single_misalign`: the single
// launches take the general kernel, as a wgmma key's batched launch with a
// shared operand does.
void same_as_loop(Jit& jit, const KernelSpec& spec, const Shape& s, const std::optional<TileConfig>& requested,
                  std::uint64_t seed, std::size_t single_misalign = 0) {
  // The batched launch's tile for every launch (a default is chosen for the whole batch).
  const std::optional<TileConfig> tile = requested ? requested : jit.compile(spec, s)->source().tile;
  const bool dropout = spec.graph.dropout_count() > 0;
  const LaunchArgs args{seed * 7 + 1, 12, 0};
  const TensorMap inputs = dropout ? integer_inputs(spec, s, seed) : make_inputs(spec, s, seed);
  const TensorMap got = run_on_device(jit, spec, s, inputs, args, tile);
  const HostTensor& y = got.at("y");
  REQUIRE(y.shape == std::vector<std::int64_t>{s.batch, s.m, s.n});
  const std::size_t per = y.bytes.size() / static_cast<std::size_t>(s.batch);
  const auto names = mainloop_operand_names(spec.mainloop.kind);
  for (std::int64_t b = 0; b < s.batch; ++b) {
    INFO(what(spec, s, tile) << " batch " << b);
    Shape one{s.m, s.n, s.k};
    one.lda = s.lda;
    one.ldb = s.ldb;
    TensorMap in;
    if (!dropout) {
      for (const auto& d : required_inputs(spec, one)) in.emplace(d.name, slice(inputs.at(d.name), d.shape.size(), b));
    } else {
      one.m = (b + 1) * s.m;
      for (const auto& d : required_inputs(spec, one)) {
        const HostTensor& t = inputs.at(d.name);
        if (d.name != "a" && d.name != "res") {  // B operands and the bias: batch b's (or the shared one)
          in.emplace(d.name, slice(t, d.shape.size(), b));
          continue;
        }
        HostTensor x = HostTensor::zeros(t.dtype, d.shape);  // rows of batch b under b batches of zeros
        const HostTensor part = slice(t, d.shape.size(), b);
        std::memcpy(x.bytes.data() + x.bytes.size() - part.bytes.size(), part.bytes.data(), part.bytes.size());
        in.emplace(d.name, std::move(x));
      }
    }
    const HostTensor single = run_on_device(jit, spec, one, in, args, tile, single_misalign).at("y");
    REQUIRE(single.bytes.size() >= per);
    CHECK(std::memcmp(single.bytes.data() + single.bytes.size() - per, y.bytes.data() + per * static_cast<std::size_t>(b),
                      per) == 0);
  }
  // And the reference, within the accumulation's bound (a single GEMM's chain;
  // exact with integer operands).
  if (spec.mainloop.kind == MainloopKind::gemm) {
    const TensorMap want = evaluate(spec, s, inputs, args);
    const Comparison c = compare(y, want.at("y"), gemm_tolerance(y.dtype, s));
    CHECK_MESSAGE(c.ok, what(spec, s, tile) << ": " << c.message);
  }
  ++checked;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("batched GEMM: mma.sync and SIMT f32 against a loop of single launches, ragged shapes, dropout") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 9700;
    const Shape shapes[] = {{65, 130, 33}, {200, 136, 96}, {128, 256, 64}};
    for (DType dt : {DType::f16, DType::bf16, DType::f32})
      for (Layout a : {Layout::row, Layout::col})
        for (Layout b : {Layout::row, Layout::col})
          for (double p : {0.0, 0.2}) {
            const KernelSpec spec = chain(dt, a, b, MainloopKind::gemm, p);  // f32 exact: SIMT
            // An mma.sync tile on sm_90a too (its default there is wgmma for large shapes).
            const std::optional<TileConfig> tile =
                dt == DType::f32 ? std::nullopt : std::optional<TileConfig>(GemmTile{64, 64, 32, 2, 2, 3});
            for (const Shape& s : shapes) {
              const std::int64_t size_a = s.m * s.k, size_b = s.k * s.n;
              same_as_loop(*jit, spec, batched(s, 3), tile, ++seed);
              same_as_loop(*jit, spec, batched(s, 4, size_a + 40, 0), tile, ++seed);  // spaced A, one B
              same_as_loop(*jit, spec, batched(s, 2, 0, size_b + 8), tile, ++seed);   // one A, spaced B
            }
          }
    // The staged epilogue's tile, and each default tile (chosen for the whole batch).
    for (DType dt : {DType::f16, DType::f32}) {
      const KernelSpec spec = chain(dt, Layout::row, Layout::col, MainloopKind::gemm, 0.1);
      if (dt != DType::f32) same_as_loop(*jit, spec, batched({300, 264, 128}, 3), GemmTile{128, 128, 32, 2, 2, 4}, ++seed);
      same_as_loop(*jit, spec, batched({96, 200, 64}, 6), std::nullopt, ++seed);
    }
    MESSAGE(checked << " batched launches checked");
  }

  TEST_CASE("batched GEMM: a dual GEMM's A, B0 and B1") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 9800;
    for (DType dt : {DType::bf16, DType::f32})
      for (Layout b : {Layout::row, Layout::col})
        for (double p : {0.0, 0.3}) {
          const KernelSpec spec = chain(dt, Layout::row, b, MainloopKind::dual_gemm, p);
          const std::optional<TileConfig> tile =  // two accumulators: warp tiles of 64x32
              dt == DType::f32 ? std::nullopt : std::optional<TileConfig>(GemmTile{128, 128, 32, 2, 4, 4});
          for (const Shape& s : {Shape{65, 130, 33}, Shape{192, 256, 128}}) {
            same_as_loop(*jit, spec, batched(s, 3), tile, ++seed);
            Shape shared_b1 = batched(s, 3);
            shared_b1.batch_stride_b1 = 0;
            same_as_loop(*jit, spec, shared_b1, tile, ++seed);
          }
        }
  }

  TEST_CASE("batched GEMM: wgmma tiles (3-D tensor maps), and the mma.sync general kernel for a shared operand") {
    Jit* jit = hopper_jit();
    if (!jit) return;
    std::uint64_t seed = 9900;
    const TileConfig tiles[] = {WgmmaTile{128, 128, 64, 4, 8}, WgmmaTile{128, 256, 64, 4, 8, 2},
                                WgmmaTile{128, 128, 64, 6, 8, 1, 1}, WgmmaTile{64, 64, 64, 8, 8, 1, 1}};
    for (Layout a : {Layout::row, Layout::col})
      for (Layout b : {Layout::row, Layout::col})
        for (double p : {0.0, 0.2}) {
          const KernelSpec spec = chain(DType::f16, a, b, MainloopKind::gemm, p);
          for (const TileConfig& tile : tiles) {
            MESSAGE("a " << to_string(a) << " b " << to_string(b) << " p " << p << " tile " << to_string(tile));
            for (const Shape& s : {Shape{300, 264, 128}, Shape{512, 512, 512}}) {
              same_as_loop(*jit, spec, batched(s, 4), tile, ++seed);
              same_as_loop(*jit, spec, batched(s, 3, s.m * s.k + 64, s.k * s.n + 128), tile, ++seed);  // spaced
              same_as_loop(*jit, spec, batched(s, 3, Shape::dense_batch, 0), tile, ++seed, 1);  // shared B: general
            }
          }
        }
    // tf32 (A row-major, B col-major), a dual GEMM, and the default tile for a
    // batch of 1024^2 problems (wgmma, chosen for the whole batch).
    const KernelSpec tf32 = chain(DType::f32, Layout::row, Layout::col, MainloopKind::gemm, 0.1, GemmMath::tf32);
    same_as_loop(*jit, tf32, batched({300, 264, 128}, 3), WgmmaTile{128, 128, 32, 4, 8}, ++seed);
    const KernelSpec dual = chain(DType::bf16, Layout::row, Layout::col, MainloopKind::dual_gemm, 0.1);
    same_as_loop(*jit, dual, batched({320, 384, 256}, 3), WgmmaTile{128, 128, 64, 4, 8}, ++seed);
    const KernelSpec big = chain(DType::bf16, Layout::row, Layout::col, MainloopKind::gemm, 0.1);
    const Shape s = batched({1024, 1024, 256}, 8);
    CHECK(std::holds_alternative<WgmmaTile>(jit->compile(big, s)->source().tile));
    same_as_loop(*jit, big, s, std::nullopt, ++seed);
  }
}
