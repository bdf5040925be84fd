// Compile tier for batched GEMMs (Note [Batched GEMM]): NVRTC must accept the
// batched variants for sm_80 and sm_90a: mma.sync (the 16-byte and the element
// path, the staged epilogue), SIMT f32, tf32, wgmma (a cluster, a dual GEMM, an
// M-major A and an N-major B through 3-D tensor maps) and the mma.sync tile a
// wgmma key falls back to; hipRTC the wave kernel's for gfx90a and gfx1030.
// Every chain has a shared row input, a batched full input and dropout. Skips
// with a visible line without NVRTC or hipRTC.
#include <doctest/doctest.h>

#include "backend/hiprtc.hpp"
#include "backend/nvrtc.hpp"
#include "epifuse/jit.hpp"

using namespace epifuse;

namespace {

KernelSpec gemm(DType dt, Layout a, Layout b, MainloopKind kind, GemmMath math = GemmMath::exact) {
  KernelSpec spec;
  spec.mainloop = {kind, dt, dt, a, b, math};
  Graph& g = spec.graph;
  Value y = g.add(g.accumulator(0), g.input("bias", dt, Broadcast::row));
  y = g.add(y, g.input("res", dt));
  if (kind == MainloopKind::dual_gemm) y = g.mul(g.silu(y), g.accumulator(1));
  g.output("y", g.dropout(y, 0.1), dt);
  return spec;
}

Shape batched(Shape s, std::int64_t batch) {
  s.batch = batch;
  return s;
}

}  // namespace

TEST_SUITE("compile") {
  TEST_CASE("batched GEMMs compile for sm_80 and sm_90a" * doctest::test_suite("nvrtc")) {
    if (!backend::nvrtc_or_null()) {
      MESSAGE("compile tier skipped: " << backend::nvrtc_unavailable_reason());
      return;
    }
    int compiled = 0;
    auto compile = [&](Jit& jit, const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& tile) {
      INFO(jit.target() << " " << to_string(spec.mainloop.kind) << " " << to_string(spec.mainloop.a) << " a "
                        << to_string(spec.mainloop.a_layout) << " b " << to_string(spec.mainloop.b_layout) << " "
                        << shape.m << "x" << shape.n << "x" << shape.k << " batch " << shape.batch << " tile "
                        << (tile ? to_string(*tile) : "default"));
      auto kernel = jit.compile(spec, shape, tile);
      CHECK(kernel->binary().size() > 4);
      CHECK(kernel->source().text.find("long long batch;") != std::string::npos);
      ++compiled;
    };
    for (const char* target : {"sm_80", "sm_90a"}) {
      Jit jit(target);
      for (MainloopKind kind : {MainloopKind::gemm, MainloopKind::dual_gemm})
        for (Layout b : {Layout::row, Layout::col}) {
          const KernelSpec f16 = gemm(DType::f16, Layout::row, b, kind);
          compile(jit, f16, batched({256, 512, 1024}, 4), std::nullopt);  // 16-byte loads (sm_90a: wgmma)
          compile(jit, f16, batched({65, 130, 33}, 3), std::nullopt);     // the element path, per-element draws
        }
      const KernelSpec bf16 = gemm(DType::bf16, Layout::col, Layout::row, MainloopKind::gemm);
      compile(jit, bf16, batched({256, 256, 256}, 5), GemmTile{128, 128, 32, 2, 2, 3});  // the staged epilogue
      const KernelSpec f32 = gemm(DType::f32, Layout::row, Layout::col, MainloopKind::gemm);  // SIMT
      compile(jit, f32, batched({200, 136, 96}, 2), std::nullopt);
      const KernelSpec tf32 = gemm(DType::f32, Layout::row, Layout::col, MainloopKind::gemm, GemmMath::tf32);
      compile(jit, tf32, batched({64, 64, 4096}, 3), std::nullopt);
      if (std::string_view(target) == "sm_90a") {
        const KernelSpec tn = gemm(DType::bf16, Layout::row, Layout::col, MainloopKind::gemm);
        compile(jit, tn, batched({512, 512, 512}, 8), WgmmaTile{128, 128, 64, 4, 8});
        compile(jit, tn, batched({512, 512, 512}, 8), WgmmaTile{128, 256, 64, 4, 8, 2});  // a cluster: 3-D multicast
        compile(jit, tn, batched({512, 512, 512}, 8), WgmmaTile{128, 128, 64, 6, 8, 1, 1});  // ping-pong
        compile(jit, bf16, batched({512, 512, 512}, 8), WgmmaTile{128, 128, 64, 4, 8});  // M-major A, N-major B
        const KernelSpec dual = gemm(DType::bf16, Layout::row, Layout::col, MainloopKind::dual_gemm);
        compile(jit, dual, batched({512, 512, 512}, 8), WgmmaTile{128, 128, 64, 4, 8});
        compile(jit, tn, batched({512, 512, 512}, 8), GemmTile{128, 128, 32, 2, 2, 4});  // the wgmma fallback's kind
      }
    }
    CHECK(compiled == 2 * (2 * 2 * 2 + 3) + 6);
  }

  TEST_CASE("batched GEMMs compile for gfx90a and gfx1030 (the wave kernel)" * doctest::test_suite("hiprtc")) {
    if (!backend::hiprtc_or_null()) {
      MESSAGE("hipRTC tests skipped: " << backend::hiprtc_unavailable_reason());
      return;
    }
    int compiled = 0;
    for (const char* target : {"gfx90a", "gfx1030"}) {
      Jit jit(target);
      for (MainloopKind kind : {MainloopKind::gemm, MainloopKind::dual_gemm}) {
        const KernelSpec spec = gemm(DType::f16, Layout::row, Layout::col, kind);
        for (const Shape& s : {batched({256, 512, 1024}, 4), batched({65, 130, 33}, 3)}) {
          INFO(target << " " << to_string(kind) << " " << s.m << "x" << s.n << "x" << s.k);
          auto kernel = jit.compile(spec, s);
          CHECK(kernel->binary().size() > 4);
          CHECK(kernel->source().text.find("p.batch_stride_a") != std::string::npos);
          ++compiled;
        }
      }
    }
    CHECK(compiled == 8);
  }
}
