// Batched GEMM (Note [Batched GEMM], docs/strided-batched.md step 4): what a
// batch count changes in the shape class, the parameters and the emitted
// kernel on every mainloop, what it leaves alone (batch 1 is the unbatched
// kernel, byte for byte), the wgmma kernel's 3-D tensor maps, the refusals,
// and the reference: a batched evaluation is a loop of single ones, batch b's
// dropout elements after b*M*N others. No GPU, no compiler.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "codegen/family.hpp"
#include "codegen/gemm/gemm.hpp"
#include "codegen/gemm/mainloop.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/reference.hpp"

using namespace epifuse;

namespace {

// y = dropout(relu(acc + bias + res)): a shared row input, a batched full one, draws.
KernelSpec gemm(DType dt, Layout a, Layout b, MainloopKind kind = MainloopKind::gemm) {
  KernelSpec spec;
  spec.mainloop = {kind, dt, dt, a, b, GemmMath::exact};
  Graph& g = spec.graph;
  Value y = g.add(g.accumulator(0), g.input("bias", dt, Broadcast::row));
  y = g.add(y, g.input("res", dt));
  if (kind == MainloopKind::dual_gemm) y = g.mul(y, g.accumulator(1));
  g.output("y", g.dropout(g.relu(y), 0.25), dt);
  return spec;
}

const ParamField* field(const KernelSource& ks, std::string_view name) {
  const auto it = std::find_if(ks.params.begin(), ks.params.end(), [&](const ParamField& f) { return f.name == name; });
  return it == ks.params.end() ? nullptr : &*it;
}

bool has(const std::string& text, std::string_view what) { return text.find(what) != std::string::npos; }

Shape batched(Shape s, std::int64_t batch) {
  s.batch = batch;
  return s;
}

std::string user_error(const KernelSpec& spec, const Shape& shape,
                       const std::optional<TileConfig>& tile = std::nullopt) {
  try {
    emit_kernel(spec, shape, tile, KernelPath::fastest, "sm_80");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("batched GEMM: batch 1 is the unbatched kernel, byte for byte, whatever its batch strides") {
  for (const char* target : {"sm_80", "sm_90a", "gfx90a"})
    for (MainloopKind kind : {MainloopKind::gemm, MainloopKind::dual_gemm}) {
      const KernelSpec spec = gemm(DType::f16, Layout::row, Layout::col, kind);
      const Shape plain{256, 512, 1024};
      Shape one = plain;
      one.batch_stride_a = 0;
      one.batch_stride_b = 1 << 20;
      const KernelSource x = emit_kernel(spec, plain, std::nullopt, KernelPath::fastest, target);
      const KernelSource y = emit_kernel(spec, one, std::nullopt, KernelPath::fastest, target);
      CAPTURE(target);
      CHECK(x.text == y.text);
      CHECK(x.name == y.name);
      CHECK(field(x, "batch") == nullptr);
      CHECK_FALSE(has(x.text, "batch"));
      CHECK(gemm_shape_class(spec.mainloop, one) == gemm_shape_class(spec.mainloop, plain));
    }
}

TEST_CASE("batched GEMM: the flag is in the shape class and the kernel's name, the count and strides are not") {
  const KernelSpec spec = gemm(DType::f16, Layout::row, Layout::col);
  Shape s{256, 512, 1000};
  CHECK(gemm_shape_class(spec.mainloop, batched(s, 2)) == "ld8/n4/bat");
  s.lda = 1024;
  CHECK(gemm_shape_class(spec.mainloop, batched(s, 2)) == "ld8/n4/lda/bat");
  Shape t = batched(s, 64);
  t.batch_stride_b = 0;
  CHECK(gemm_shape_class(spec.mainloop, t) == gemm_shape_class(spec.mainloop, batched(s, 2)));
  // One tile (a default one is chosen for the whole batch, so it may differ with the count).
  const TileConfig tile = GemmTile{128, 128, 32, 2, 2, 4};
  const KernelSource a = emit_kernel(spec, batched(s, 2), tile, KernelPath::fastest, "sm_80");
  const KernelSource b = emit_kernel(spec, t, tile, KernelPath::fastest, "sm_80");
  const KernelSource plain = emit_kernel(spec, s, tile, KernelPath::fastest, "sm_80");
  CHECK(a.text == b.text);
  CHECK(a.name == b.name);
  CHECK(a.name != plain.name);
  CHECK(a.inputs == plain.inputs);  // the same bindings
  CHECK(a.outputs == plain.outputs);
}

TEST_CASE("batched GEMM: each mainloop finds its batch and offsets every operand and full tensor") {
  struct Case {
    const char* what;
    KernelSpec spec;
    std::optional<TileConfig> tile;
    const char* target;
    const char* batch;  // how the kernel finds its batch
  };
  const std::vector<Case> cases = {
      {"mma.sync", gemm(DType::f16, Layout::row, Layout::row), std::nullopt, "sm_80", "blockIdx.z"},
      {"mma.sync staged", gemm(DType::bf16, Layout::col, Layout::col), GemmTile{128, 128, 32, 2, 2, 3}, "sm_80",
       "blockIdx.z"},
      {"SIMT f32", gemm(DType::f32, Layout::row, Layout::col), std::nullopt, "sm_80", "blockIdx.z"},
      {"wgmma", gemm(DType::f16, Layout::row, Layout::col), WgmmaTile{128, 128, 64, 4, 8}, "sm_90a", "(unit / units)"},
      {"wgmma cluster", gemm(DType::bf16, Layout::col, Layout::row), WgmmaTile{128, 256, 64, 4, 8, 2}, "sm_90a",
       "(unit / units)"},
      {"wave", gemm(DType::f16, Layout::row, Layout::col), std::nullopt, "gfx90a", "blockIdx.z"},
      {"dual mma.sync", gemm(DType::f16, Layout::row, Layout::col, MainloopKind::dual_gemm), std::nullopt, "sm_80",
       "blockIdx.z"},
      {"dual wgmma", gemm(DType::bf16, Layout::row, Layout::col, MainloopKind::dual_gemm),
       WgmmaTile{128, 128, 64, 4, 8}, "sm_90a", "(unit / units)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const bool dual = c.spec.mainloop.kind == MainloopKind::dual_gemm;
    const bool wgmma = c.tile && std::holds_alternative<WgmmaTile>(*c.tile);
    const KernelSource ks = emit_kernel(c.spec, batched({256, 512, 1024}, 8), c.tile, KernelPath::fastest, c.target);
    const ParamField* count = field(ks, "batch");
    REQUIRE(count != nullptr);
    CHECK(count->role == ParamRole::batch);
    CHECK(count->size == 8);
    for (const char* name : {"a", "b", "b1"}) {
      const bool want = std::string_view(name) != "b1" || dual;
      const ParamField* f = field(ks, fmt::format("batch_stride_{}", name));
      CAPTURE(name);
      REQUIRE((f != nullptr) == want);
      if (!f) continue;
      CHECK(f->role == ParamRole::batch_stride);
      CHECK(f->index == (std::string_view(name) == "a" ? 0u : std::string_view(name) == "b" ? 1u : 2u));
      // The loaders start at the batch's operand; the wgmma kernel's copy engine finds it (3-D maps).
      CHECK(has(ks.text, fmt::format("p.{0} + batch * p.batch_stride_{0}", name)) == !wgmma);
    }
    CHECK(has(ks.text, fmt::format("const long long batch = (long long){}", c.batch)));
    CHECK(has(ks.text, "const auto in1_bat = p.in1 + batch_base;"));  // bias is in0 (shared), res in1
    CHECK_FALSE(has(ks.text, "in0_bat"));
    CHECK(has(ks.text, "const auto out0_bat = p.out0 + batch_base;"));
    CHECK(has(ks.text, "batch_base + "));  // every draw after the batch's first element
    if (wgmma) {
      CHECK(has(ks.text, "unit < units * (int)p.batch"));
      CHECK(has(ks.text, "ef_tma_load_3d"));
      CHECK_FALSE(has(ks.text, "ef_tma_load_2d("));
    }
    // A wgmma key's general kernel (the mma.sync fallback) is batched too.
    if (wgmma) {
      const KernelSource general =
          emit_kernel(c.spec, batched({256, 512, 1024}, 8), c.tile, KernelPath::general, c.target);
      CHECK(has(general.text, "const long long batch = (long long)blockIdx.z"));
    }
  }
}

TEST_CASE("batched GEMM: the grid holds every batch") {
  const KernelSpec spec = gemm(DType::f16, Layout::row, Layout::col);
  const Shape s = batched({200, 300, 64}, 5);
  const KernelSource mma = emit_kernel(spec, s, GemmTile{64, 64, 32, 2, 2, 3}, KernelPath::fastest, "sm_80");
  const LaunchGeometry g = family_for(spec).geometry(mma, s, 132);
  CHECK(g.grid[0] == 4 * 5);  // a problem's tiles
  CHECK(g.grid[2] == 5);      // blockIdx.z: the batch
  const Shape big = batched({1024, 1024, 1024}, 64);
  const KernelSource w = emit_kernel(spec, big, WgmmaTile{128, 128, 64, 4, 8}, KernelPath::fastest, "sm_90a");
  const LaunchGeometry gw = family_for(spec).geometry(w, big, 132);
  CHECK(gw.grid[0] == 132);  // persistent: 64 x 64 units, one block per SM
  const LaunchGeometry few = family_for(spec).geometry(w, batched({128, 128, 64}, 3), 132);
  CHECK(few.grid[0] == 3);   // one unit a batch
}

TEST_CASE("batched GEMM: the wgmma tensor maps are 3-D, the batch outermost") {
  const KernelSpec spec = gemm(DType::f16, Layout::row, Layout::col);
  Shape s = batched({256, 512, 1000}, 6);
  s.lda = 1024;
  s.batch_stride_b = 600000;  // B is 512 x 1000
  const KernelSource ks = emit_kernel(spec, s, WgmmaTile{128, 128, 64, 4, 8}, KernelPath::fastest, "sm_90a");
  const std::vector<std::uint64_t> inputs = {0x10000, 0x20000, 0x30000, 0x40000};
  const std::vector<std::uint64_t> outputs = {0x50000};
  const ParamField a{ParamRole::opaque, a_kmajor_map, 0, 128, 64, "tma_a"};
  const ParamField b{ParamRole::opaque, b_kmajor_map, 0, 128, 64, "tma_b"};
  const std::optional<TensorMap2d> ma = wgmma_tensor_map(a, {ks, inputs, outputs, s});
  const std::optional<TensorMap2d> mb = wgmma_tensor_map(b, {ks, inputs, outputs, s});
  REQUIRE(ma);
  REQUIRE(mb);
  CHECK(ma->batches == 6);
  CHECK(ma->batch_bytes == 256 * 1024 * 2);  // dense batches: M rows of ld
  CHECK(mb->batches == 6);
  CHECK(mb->batch_bytes == 600000 * 2);
  s.batch_stride_b = 0;  // a shared weight: no map, the launch takes the general kernel
  CHECK_FALSE(wgmma_tensor_map(b, {ks, inputs, outputs, s}));
  s.batch_stride_b = 512 * 1000 + 1;  // 16-byte copies cannot start every batch
  CHECK_FALSE(wgmma_tensor_map(b, {ks, inputs, outputs, s}));
  const std::optional<TensorMap2d> plain = wgmma_tensor_map(a, {ks, inputs, outputs, Shape{256, 512, 1000}});
  REQUIRE(plain);
  CHECK(plain->batches == 1);  // an unbatched launch's map is 2-D, as before
}

TEST_CASE("batched GEMM: bad batches and strides are refused naming the cause") {
  const KernelSpec spec = gemm(DType::f16, Layout::row, Layout::col);
  const Shape s{64, 96, 128};
  CHECK(has(user_error(spec, batched(s, 0)), "batch 0 must be between 1 and 65535"));
  CHECK(has(user_error(spec, batched(s, 65536)), "batch 65536"));
  Shape t = batched(s, 4);
  t.batch_stride_a = 64 * 128 - 1;
  std::string e = user_error(spec, t);
  CHECK(has(e, "operand 'a'"));
  CHECK(has(e, "batches would overlap"));
  t = batched(s, 4);
  t.batch_stride_b = -2;
  CHECK(has(user_error(spec, t), "operand 'b'"));
  t = batched(s, 4);
  t.batch_stride_b1 = 0;
  CHECK(has(user_error(spec, t), "only a dual GEMM has a B1"));
  t = batched(s, 4);
  CHECK(has(user_error(spec, t, GemmTile{64, 64, 32, 2, 2, 3, 8, 2}), "split-K is not built for a batched GEMM"));
  KernelSpec dgrad;  // a bias gradient: a column sum over the rows
  dgrad.mainloop = {MainloopKind::gemm, DType::f16, DType::f16, Layout::row, Layout::col, GemmMath::exact};
  dgrad.graph.output("dx", dgrad.graph.accumulator(0), DType::f16);
  dgrad.graph.output("db", dgrad.graph.col_sum(dgrad.graph.accumulator(0)), DType::f32);
  e = user_error(dgrad, batched(s, 2));
  CHECK(has(e, "output 'db'"));
  CHECK(has(e, "full outputs only"));
  CHECK(user_error(dgrad, s).empty());  // unbatched, as before
  KernelSpec ew;
  ew.graph.output("y", ew.graph.relu(ew.graph.input("x", DType::f16)), DType::f16);
  CHECK(has(user_error(ew, batched({64, 96, 0}, 2)), "only GEMM chains are batched"));
  // Batched, the default tile has no split-K either (batches fill the GPU).
  const KernelSpec tf32 = [] {
    KernelSpec k;
    k.mainloop = {MainloopKind::gemm, DType::f32, DType::f32, Layout::row, Layout::col, GemmMath::tf32};
    k.graph.output("y", k.graph.accumulator(0), DType::f32);
    return k;
  }();
  const KernelSource small = emit_kernel(tf32, batched({64, 64, 8192}, 3), std::nullopt, KernelPath::fastest, "sm_80");
  REQUIRE(std::holds_alternative<GemmTile>(small.tile));
  CHECK(std::get<GemmTile>(small.tile).split_k == 1);
}

TEST_CASE("batched GEMM: the reference is a loop of single problems, batch b's dropout elements after b*M*N") {
  for (Layout la : {Layout::row, Layout::col})
    for (MainloopKind kind : {MainloopKind::gemm, MainloopKind::dual_gemm}) {
      const KernelSpec spec = gemm(DType::f32, la, Layout::col, kind);
      Shape s = batched({5, 7, 6}, 3);
      s.batch_stride_b = 0;  // a shared weight: [K,N], not [B,K,N]
      const TensorMap inputs = make_inputs(spec, s, 11);
      REQUIRE(inputs.at("a").shape == std::vector<std::int64_t>{3, 5, 6});
      REQUIRE(inputs.at(kind == MainloopKind::dual_gemm ? "b0" : "b").shape == std::vector<std::int64_t>{6, 7});
      REQUIRE(inputs.at("res").shape == std::vector<std::int64_t>{3, 5, 7});
      REQUIRE(inputs.at("bias").shape == std::vector<std::int64_t>{7});
      const LaunchArgs args{42, 7, 0};
      const HostTensor all = evaluate(spec, s, inputs, args).at("y");
      REQUIRE(all.shape == std::vector<std::int64_t>{3, 5, 7});
      // Batch b alone: the stacked problem [(b+1)*M, N] whose last M rows are
      // batch b's (zeros in A's rows above), so its dropout elements are i = b*M*N + r*N + c.
      for (std::int64_t b = 0; b < 3; ++b) {
        const Shape stacked{(b + 1) * 5, 7, 6};
        TensorMap one;
        for (const auto& [name, t] : inputs) {
          const std::size_t bytes = t.bytes.size() / 3;
          if (t.shape.size() < 3) {
            one.emplace(name, t);
          } else if (name == "a" || name == "res") {  // rows: stacked under b batches of zeros
            HostTensor x = HostTensor::zeros(t.dtype, {(b + 1) * t.shape[1], t.shape[2]});
            std::memcpy(x.bytes.data() + b * bytes, t.bytes.data() + b * bytes, bytes);
            one.emplace(name, std::move(x));
          } else {  // a batched weight: batch b's
            HostTensor x = HostTensor::zeros(t.dtype, {t.shape[1], t.shape[2]});
            std::memcpy(x.bytes.data(), t.bytes.data() + b * bytes, bytes);
            one.emplace(name, std::move(x));
          }
        }
        const HostTensor y = evaluate(spec, stacked, one, args).at("y");
        const std::size_t bytes = all.bytes.size() / 3;
        CAPTURE(b);
        CHECK(std::memcmp(y.bytes.data() + b * bytes, all.bytes.data() + b * bytes, bytes) == 0);
      }
      // Batch 0 (i = r*N + c) is the single problem of its slices.
      const Shape one_shape{5, 7, 6};
      TensorMap first;
      for (const auto& [name, t] : inputs) {
        if (t.shape.size() < 3) {
          first.emplace(name, t);
          continue;
        }
        HostTensor x = HostTensor::zeros(t.dtype, {t.shape[1], t.shape[2]});
        std::memcpy(x.bytes.data(), t.bytes.data(), x.bytes.size());
        first.emplace(name, std::move(x));
      }
      const HostTensor y0 = evaluate(spec, one_shape, first, args).at("y");
      CHECK(std::memcmp(y0.bytes.data(), all.bytes.data(), y0.bytes.size()) == 0);
    }
}

TEST_CASE("batched GEMM: device layouts of batched operands") {
  HostTensor t = HostTensor::zeros(DType::f32, {2, 2, 3});  // two batches of a column-major [2,3] operand
  for (std::int64_t i = 0; i < 12; ++i) t.set(i, static_cast<double>(i));
  KernelSpec spec;
  spec.mainloop = {MainloopKind::gemm, DType::f32, DType::f32, Layout::col, Layout::row, GemmMath::exact};
  spec.graph.output("y", spec.graph.accumulator(0), DType::f32);
  const HostTensor d = to_device_layout(spec, "a", t);
  REQUIRE(d.shape == std::vector<std::int64_t>{2, 3, 2});
  const double want[] = {0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11};  // each batch transposed
  for (std::int64_t i = 0; i < 12; ++i) CHECK(d.get(i) == want[i]);
  const std::vector<std::byte> packed(8, std::byte{1});
  const std::vector<std::byte> spaced = spaced_batches(packed, 2, 6);
  REQUIRE(spaced.size() == 10);
  CHECK(spaced[3] == std::byte{1});
  CHECK(spaced[4] == std::byte{0xFF});  // the gap is poisoned
  CHECK(spaced[6] == std::byte{1});
}
