// Compile tier for strided GEMM operands (Note [Strided operands]) and strided
// epilogue tensors (Note [Strided epilogue tensors]): NVRTC must accept the
// variants with ld fields for sm_80 and sm_90a: mma.sync (the 16-byte and the
// element path, the fragment and the staged epilogue), SIMT f32, wgmma (its
// staged and fragment epilogues, prefetched inputs) and its mma.sync general
// kernel, single and dual GEMMs, every operand strided, and full inputs and
// outputs strided; hipRTC the wave kernel's for gfx90a (MFMA) and gfx1030 (the
// FMA form); and strided tensors of elementwise and row chains (Note [Strided
// rows]): the flat kernel and its 2-D walk, the column-sum kernel, row tiles of every
// class. Skips with a visible line without NVRTC or hipRTC.
#include <doctest/doctest.h>

#include "backend/hiprtc.hpp"
#include "backend/nvrtc.hpp"
#include "epifuse/jit.hpp"

using namespace epifuse;

namespace {

bool have_nvrtc() {
  if (backend::nvrtc_or_null()) return true;
  MESSAGE("compile tier skipped: " << backend::nvrtc_unavailable_reason());
  return false;
}

KernelSpec gemm(DType dt, Layout a, Layout b, MainloopKind kind, GemmMath math = GemmMath::exact) {
  KernelSpec spec;
  spec.mainloop = {kind, dt, dt, a, b, math};
  Graph& g = spec.graph;
  Value y = g.add(g.accumulator(0), g.input("bias", dt, Broadcast::row));
  if (kind == MainloopKind::dual_gemm) y = g.mul(g.silu(y), g.accumulator(1));
  g.output("y", y, dt);
  return spec;
}

// Every operand strided by a few elements past its rows' length.
Shape strided(const KernelSpec& spec, Shape s, std::int64_t pad) {
  s.lda = gemm_operand_extent(spec.mainloop, s, 0) + pad;
  s.ldb = gemm_operand_extent(spec.mainloop, s, 1) + pad;
  if (spec.mainloop.kind == MainloopKind::dual_gemm) s.ldb1 = gemm_operand_extent(spec.mainloop, s, 2) + 2 * pad;
  return s;
}

// acc (+ acc1) + bias [N] + res [M,N] -> relu (dropped where `dropout`) -> y,
// and the pre-activation z: a full input and two full outputs.
KernelSpec epilogue_chain(DType dt, MainloopKind kind, bool dropout, GemmMath math = GemmMath::exact) {
  KernelSpec spec;
  spec.mainloop = {kind, dt, dt, Layout::row, Layout::col, math};
  Graph& g = spec.graph;
  Value z = g.add(g.accumulator(0), g.input("bias", dt, Broadcast::row));
  if (kind == MainloopKind::dual_gemm) z = g.mul(z, g.accumulator(1));
  z = g.add(z, g.input("res", dt));
  g.output("y", dropout ? g.dropout(g.relu(z), 0.25) : g.relu(z), dt);
  g.output("z", z, dt);
  return spec;
}

// res, y and z strided by a few elements past N.
Shape epilogue_strided(Shape s, std::int64_t pad) {
  s.ld_inputs = {0, s.n + pad};
  s.ld_outputs = {s.n + 2 * pad, s.n + pad};
  return s;
}

}  // namespace

TEST_SUITE("compile") {
  TEST_CASE("strided GEMM operands compile for sm_80 and sm_90a" * doctest::test_suite("nvrtc")) {
    if (!have_nvrtc()) return;
    int compiled = 0;
    auto compile = [&](Jit& jit, const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& tile) {
      INFO(jit.target() << " " << to_string(spec.mainloop.kind) << " " << to_string(spec.mainloop.a) << " "
                        << shape.m << "x" << shape.n << "x" << shape.k << " ld " << shape.lda << "," << shape.ldb
                        << "," << shape.ldb1 << " tile " << (tile ? to_string(*tile) : "default"));
      auto kernel = jit.compile(spec, shape, tile);
      CHECK(kernel->binary().size() > 4);
      CHECK(kernel->source().text.find("long long lda;") != std::string::npos);
      ++compiled;
    };
    for (const char* target : {"sm_80", "sm_90a"}) {
      Jit jit(target);
      for (MainloopKind kind : {MainloopKind::gemm, MainloopKind::dual_gemm})
        for (Layout a : {Layout::row, Layout::col})
          for (Layout b : {Layout::row, Layout::col}) {
            const KernelSpec f16 = gemm(DType::f16, a, b, kind);
            compile(jit, f16, strided(f16, {256, 512, 1024}, 8), std::nullopt);  // 16-byte loads (sm_90a: wgmma)
            compile(jit, f16, strided(f16, {65, 130, 33}, 3), std::nullopt);     // the element path
          }
      const KernelSpec f32 = gemm(DType::f32, Layout::row, Layout::col, MainloopKind::gemm);  // SIMT
      compile(jit, f32, strided(f32, {200, 136, 96}, 4), std::nullopt);
      compile(jit, f32, strided(f32, {65, 130, 33}, 1), std::nullopt);
      const KernelSpec tf32 = gemm(DType::f32, Layout::row, Layout::col, MainloopKind::gemm, GemmMath::tf32);
      compile(jit, tf32, strided(tf32, {256, 512, 1024}, 4), std::nullopt);
      if (std::string_view(target) == "sm_90a") {
        const KernelSpec bf16 = gemm(DType::bf16, Layout::row, Layout::col, MainloopKind::gemm);
        compile(jit, bf16, strided(bf16, {512, 512, 512}, 64), WgmmaTile{128, 128, 64, 4, 8});
        compile(jit, bf16, strided(bf16, {512, 512, 512}, 64), WgmmaTile{128, 256, 64, 4, 8, 2});
        const KernelSpec dual = gemm(DType::bf16, Layout::row, Layout::col, MainloopKind::dual_gemm);
        compile(jit, dual, strided(dual, {512, 512, 512}, 64), WgmmaTile{128, 128, 64, 4, 8});
      }
    }
    CHECK(compiled == 2 * (2 * 4 * 2 + 3) + 3);
  }

  TEST_CASE("strided epilogue tensors compile for sm_80 and sm_90a" * doctest::test_suite("nvrtc")) {
    if (!have_nvrtc()) return;
    int compiled = 0;
    auto compile = [&](Jit& jit, const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& tile) {
      INFO(jit.target() << " " << to_string(spec.mainloop.kind) << " " << to_string(spec.mainloop.a) << " "
                        << shape.m << "x" << shape.n << "x" << shape.k << " tile " << (tile ? to_string(*tile) : "default"));
      auto kernel = jit.compile(spec, shape, tile);
      CHECK(kernel->binary().size() > 4);
      CHECK(kernel->source().text.find("long long ld_in1;") != std::string::npos);
      CHECK(kernel->source().text.find("p.ld_out0") != std::string::npos);
      ++compiled;
    };
    for (const char* target : {"sm_80", "sm_90a"}) {
      Jit jit(target);
      for (MainloopKind kind : {MainloopKind::gemm, MainloopKind::dual_gemm}) {
        const KernelSpec f16 = epilogue_chain(DType::f16, kind, kind == MainloopKind::gemm);
        compile(jit, f16, epilogue_strided({256, 512, 1024}, 8), std::nullopt);  // 16-byte loads (sm_90a: wgmma)
        compile(jit, f16, epilogue_strided({65, 130, 33}, 3), std::nullopt);     // the element path
        const GemmTile staged = kind == MainloopKind::gemm ? GemmTile{128, 256, 32, 2, 2, 3} : GemmTile{128, 128, 32, 2, 4, 4};
        compile(jit, f16, epilogue_strided({256, 512, 256}, 8), staged);  // the staged epilogue
      }
      const KernelSpec f32 = epilogue_chain(DType::f32, MainloopKind::gemm, true);  // SIMT
      compile(jit, f32, epilogue_strided({200, 136, 96}, 4), std::nullopt);
      const KernelSpec tf32 = epilogue_chain(DType::f32, MainloopKind::gemm, false, GemmMath::tf32);
      compile(jit, tf32, epilogue_strided({256, 512, 1024}, 4), std::nullopt);
      if (std::string_view(target) == "sm_90a") {
        const KernelSpec frag = epilogue_chain(DType::bf16, MainloopKind::gemm, false);  // the fragment epilogue
        const KernelSpec staged = epilogue_chain(DType::bf16, MainloopKind::gemm, true);
        for (const TileConfig& tile : {TileConfig{WgmmaTile{128, 128, 64, 4, 8}}, TileConfig{WgmmaTile{128, 256, 64, 4, 8, 2}}}) {
          compile(jit, frag, epilogue_strided({512, 512, 512}, 64), tile);
          compile(jit, staged, epilogue_strided({512, 512, 512}, 64), tile);
        }
        const KernelSpec dual = epilogue_chain(DType::bf16, MainloopKind::dual_gemm, false);
        compile(jit, dual, epilogue_strided({512, 512, 512}, 64), WgmmaTile{128, 128, 64, 4, 8});
      }
    }
    CHECK(compiled == 2 * (2 * 3 + 2) + 5);
  }

  TEST_CASE("strided tensors of elementwise and row chains compile for sm_80 and sm_90a" * doctest::test_suite("nvrtc")) {
    if (!have_nvrtc()) return;
    int compiled = 0;
    auto compile = [&](Jit& jit, const KernelSpec& spec, const Shape& shape, const std::optional<TileConfig>& tile) {
      INFO(jit.target() << " " << shape.m << "x" << shape.n << " tile " << (tile ? to_string(*tile) : "default"));
      auto kernel = jit.compile(spec, shape, tile);
      CHECK(kernel->binary().size() > 4);
      CHECK(kernel->source().text.find("long long ld_in0;") != std::string::npos);
      ++compiled;
    };
    // x [M,N] + bias [N], dropped, + res [M,N] -> y (+ its column sum).
    auto elementwise = [](DType dt, bool sums) {
      KernelSpec spec;
      Graph& g = spec.graph;
      const Value x = g.input("x", dt), bias = g.input("bias", dt, Broadcast::row), res = g.input("res", dt);
      const Value y = g.add(g.dropout(g.add(x, bias), 0.25), res);
      g.output("y", y, dt);
      if (sums) g.output("dy", g.col_sum(y), DType::f32);
      return spec;
    };
    // softmax(x + res) -> y, h = x + res saved (+ a column sum of y).
    auto rows = [](DType dt, bool sums) {
      KernelSpec spec;
      Graph& g = spec.graph;
      const Value x = g.input("x", dt), res = g.input("res", dt);
      const Value h = g.add(x, res), y = g.softmax(h);
      g.output("y", y, dt);
      g.output("h", h, dt);
      if (sums) g.output("dy", g.col_sum(y), DType::f32);
      return spec;
    };
    auto lds = [](Shape s, std::int64_t pad) {
      s.ld_inputs = {s.n + pad};
      s.ld_outputs = {s.n + 2 * pad};
      return s;
    };
    for (const char* target : {"sm_80", "sm_90a"}) {
      Jit jit(target);
      const KernelSpec bf16 = elementwise(DType::bf16, false), f32 = elementwise(DType::f32, false);
      compile(jit, bf16, lds({256, 512, 0}, 8), std::nullopt);   // vectors only, the flat kernel
      compile(jit, f32, lds({65, 130, 0}, 3), std::nullopt);     // N % 4 != 0: the 2-D walk
      compile(jit, elementwise(DType::f16, true), lds({256, 512, 0}, 8), std::nullopt);  // column sums
      compile(jit, elementwise(DType::f32, true), lds({65, 130, 0}, 3), std::nullopt);
      const KernelSpec softmax = rows(DType::bf16, false);
      compile(jit, softmax, lds({64, 4096, 0}, 64), RowTile{256, 0, -1, 1});       // registers
      compile(jit, softmax, lds({64, 4096, 0}, 64), RowTile{256, 0, 0, 1});        // streaming
      compile(jit, softmax, lds({64, 512, 0}, 8), RowTile{256, 0, -1, 1, 32, 1});  // a group a row
      compile(jit, softmax, lds({64, 4100, 0}, 2), std::nullopt);                  // narrowed vectors
      compile(jit, rows(DType::f32, true), lds({64, 4096, 0}, 4), RowTile{512, 0, -1, 1});  // column sums
      if (std::string_view(target) == "sm_90a") {
        compile(jit, softmax, lds({64, 4096, 0}, 64), RowTile{256, 0, -1, 0, 0, 1, 1});  // a ring
        compile(jit, softmax, lds({64, 4096, 0}, 64), RowTile{512, 0, -1, 1, 0, 4});     // a cluster
        compile(jit, softmax, lds({64, 4096, 0}, 64), RowTile{512, 0, -1, 1, 0, 4, 2});  // a cluster's ring
        compile(jit, rows(DType::f32, true), lds({64, 4096, 0}, 4), RowTile{512, 0, -1, 1, 0, 2, 2});
      }
    }
    CHECK(compiled == 2 * 9 + 4);
  }

  TEST_CASE("strided GEMM operands compile for gfx90a and gfx1030 (the wave kernel)" * doctest::test_suite("hiprtc")) {
    if (!backend::hiprtc_or_null()) {
      MESSAGE("hipRTC tests skipped: " << backend::hiprtc_unavailable_reason());
      return;
    }
    int compiled = 0;
    for (const char* target : {"gfx90a", "gfx1030"}) {
      Jit jit(target);
      for (MainloopKind kind : {MainloopKind::gemm, MainloopKind::dual_gemm})
        for (Layout b : {Layout::row, Layout::col}) {
          const KernelSpec spec = gemm(DType::f16, Layout::row, b, kind);
          for (const Shape& s : {strided(spec, {256, 512, 1024}, 8), strided(spec, {65, 130, 33}, 3)}) {
            INFO(target << " " << to_string(kind) << " b " << to_string(b) << " " << s.m << "x" << s.n << "x" << s.k);
            auto kernel = jit.compile(spec, s);
            CHECK(kernel->binary().size() > 4);
            CHECK(kernel->source().text.find("p.lda") != std::string::npos);
            ++compiled;
          }
        }
    }
    CHECK(compiled == 16);
  }

  TEST_CASE("strided epilogue tensors compile for gfx90a and gfx1030 (the wave kernel)" * doctest::test_suite("hiprtc")) {
    if (!backend::hiprtc_or_null()) {
      MESSAGE("hipRTC tests skipped: " << backend::hiprtc_unavailable_reason());
      return;
    }
    int compiled = 0;
    for (const char* target : {"gfx90a", "gfx1030"}) {
      Jit jit(target);
      for (MainloopKind kind : {MainloopKind::gemm, MainloopKind::dual_gemm}) {
        const KernelSpec spec = epilogue_chain(DType::f16, kind, kind == MainloopKind::gemm);
        for (const Shape& s : {epilogue_strided({256, 512, 1024}, 8), epilogue_strided({65, 130, 33}, 3)}) {
          INFO(std::string(target) << " " << to_string(kind) << " " << s.m << "x" << s.n << "x" << s.k);
          auto kernel = jit.compile(spec, s);
          CHECK(kernel->binary().size() > 4);
          CHECK(kernel->source().text.find("p.ld_in1") != std::string::npos);
          ++compiled;
        }
      }
    }
    CHECK(compiled == 8);
  }
}
