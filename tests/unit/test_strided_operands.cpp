// Strided GEMM operands (Note [Strided operands], docs/strided-batched.md step 1):
// what a shape's ld changes in the plan, the key and the emitted kernel on every
// mainloop, what it leaves alone (a dense shape's kernel, byte for byte), the
// wgmma tensor map's stride, and the refusals of a bad ld. No GPU, no compiler.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include <fmt/format.h>

#include "codegen/family.hpp"
#include "codegen/gemm/gemm.hpp"
#include "codegen/gemm/mainloop.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/errors.hpp"

using namespace epifuse;

namespace {

KernelSpec gemm(DType dt, Layout a, Layout b, MainloopKind kind = MainloopKind::gemm,
                GemmMath math = GemmMath::exact) {
  KernelSpec spec;
  spec.mainloop = {kind, dt, dt, a, b, math};
  Graph& g = spec.graph;
  Value y = g.add(g.accumulator(0), g.input("bias", dt, Broadcast::row));
  if (kind == MainloopKind::dual_gemm) y = g.mul(y, g.accumulator(1));
  g.output("y", g.dropout(g.relu(y), 0.25), dt);  // shared Philox draws where N % 4 == 0
  return spec;
}

const ParamField* field(const KernelSource& ks, std::string_view name) {
  const auto it = std::find_if(ks.params.begin(), ks.params.end(), [&](const ParamField& f) { return f.name == name; });
  return it == ks.params.end() ? nullptr : &*it;
}

bool has(const std::string& text, std::string_view what) { return text.find(what) != std::string::npos; }

// A kernel's text without its name, its ld fields and its operand loaders' lines.
std::string rest_of(const KernelSource& ks) {
  std::string out, line;
  std::istringstream in(ks.text);
  while (std::getline(in, line)) {
    if (has(line, "Loader") || has(line, "long long ld")) continue;
    for (std::size_t at = line.find(ks.name); at != std::string::npos; at = line.find(ks.name, at))
      line.replace(at, ks.name.size(), "KERNEL");
    out += line + "\n";
  }
  return out;
}

std::string user_error(const KernelSpec& spec, const Shape& shape) {
  try {
    emit_kernel(spec, shape, std::nullopt, KernelPath::fastest, "sm_80");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("strided operands: a dense shape's kernel is the same bytes, with ld 0 or ld = its rows' length") {
  for (const char* target : {"sm_80", "sm_90a", "gfx90a"})
    for (Layout a : {Layout::row, Layout::col})
      for (Layout b : {Layout::row, Layout::col}) {
        const KernelSpec spec = gemm(DType::f16, a, b);
        const Shape dense{256, 512, 1024};
        Shape same = dense;
        same.lda = a == Layout::row ? dense.k : dense.m;
        same.ldb = b == Layout::col ? dense.k : dense.n;
        const KernelSource x = emit_kernel(spec, dense, std::nullopt, KernelPath::fastest, target);
        const KernelSource y = emit_kernel(spec, same, std::nullopt, KernelPath::fastest, target);
        CAPTURE(target);
        CHECK(x.text == y.text);
        CHECK(x.name == y.name);
        CHECK(gemm_shape_class(spec.mainloop, dense) == gemm_shape_class(spec.mainloop, same));
        CHECK(field(x, "lda") == nullptr);
        CHECK(field(x, "ldb") == nullptr);
      }
}

TEST_CASE("strided operands: the flag is in the shape class and the kernel's name, the ld's value is not") {
  const KernelSpec spec = gemm(DType::f16, Layout::row, Layout::col);
  Shape s{256, 512, 1000};
  CHECK(gemm_shape_class(spec.mainloop, s) == "ld8/n4");
  s.lda = 1024;
  CHECK(gemm_shape_class(spec.mainloop, s) == "ld8/n4/lda");
  s.ldb = 1008;
  CHECK(gemm_shape_class(spec.mainloop, s) == "ld8/n4/lda/ldb");
  Shape t = s;
  t.lda = 4096;
  t.ldb = 1003;  // an ld that 16-byte loads cannot take is the same class: the launch checks its alignment
  CHECK(gemm_shape_class(spec.mainloop, t) == gemm_shape_class(spec.mainloop, s));
  const KernelSource a = emit_kernel(spec, s, std::nullopt, KernelPath::fastest, "sm_80");
  const KernelSource b = emit_kernel(spec, t, std::nullopt, KernelPath::fastest, "sm_80");
  CHECK(a.text == b.text);
  const KernelSource dense = emit_kernel(spec, Shape{256, 512, 1000}, std::nullopt, KernelPath::fastest, "sm_80");
  CHECK(a.name != dense.name);
  CHECK(a.tile == dense.tile);  // the dense shape's tile: the same bits
  const KernelSpec dual = gemm(DType::bf16, Layout::row, Layout::row, MainloopKind::dual_gemm);
  Shape d{64, 64, 64};
  d.ldb1 = 72;
  CHECK(gemm_shape_class(dual.mainloop, d) == "ld8/n4/ldb1");
}

TEST_CASE("strided operands: each mainloop reads the ld field of a strided operand") {
  struct Case {
    const char* what;
    KernelSpec spec;
    std::optional<TileConfig> tile;
    const char* target;
  };
  const std::vector<Case> cases = {
      {"mma.sync", gemm(DType::f16, Layout::row, Layout::row), std::nullopt, "sm_80"},
      {"mma.sync B col", gemm(DType::bf16, Layout::col, Layout::col), GemmTile{64, 64, 32, 2, 2, 3}, "sm_80"},
      {"SIMT f32", gemm(DType::f32, Layout::row, Layout::col), std::nullopt, "sm_80"},
      {"wgmma", gemm(DType::f16, Layout::row, Layout::col), WgmmaTile{128, 128, 64, 4, 8}, "sm_90a"},
      {"wave", gemm(DType::f16, Layout::row, Layout::col), std::nullopt, "gfx90a"},
      {"dual mma.sync", gemm(DType::f16, Layout::row, Layout::col, MainloopKind::dual_gemm), std::nullopt, "sm_80"},
      {"dual wgmma", gemm(DType::bf16, Layout::row, Layout::col, MainloopKind::dual_gemm),
       WgmmaTile{128, 128, 64, 4, 8}, "sm_90a"},
      {"dual wave", gemm(DType::f16, Layout::row, Layout::row, MainloopKind::dual_gemm), std::nullopt, "gfx90a"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const bool dual = c.spec.mainloop.kind == MainloopKind::dual_gemm;
    const bool wgmma = c.tile && std::holds_alternative<WgmmaTile>(*c.tile);
    Shape s{256, 512, 1024};
    s.lda = gemm_operand_extent(c.spec.mainloop, s, 0) + 64;
    s.ldb = gemm_operand_extent(c.spec.mainloop, s, 1) + 8;
    if (dual) s.ldb1 = gemm_operand_extent(c.spec.mainloop, s, 2) + 128;
    const KernelSource ks = emit_kernel(c.spec, s, c.tile, KernelPath::fastest, c.target);
    for (const char* name : {"lda", "ldb", "ldb1"}) {
      const bool want = std::string_view(name) != "ldb1" || dual;
      const ParamField* f = field(ks, name);
      CAPTURE(name);
      REQUIRE((f != nullptr) == want);
      if (!f) continue;
      CHECK(f->role == ParamRole::ld);
      CHECK(f->index == (std::string_view(name) == "lda" ? 0u : std::string_view(name) == "ldb" ? 1u : 2u));
      CHECK(f->size == 8);
      CHECK(has(ks.text, fmt::format("long long {};", name)));
      if (!wgmma) CHECK(has(ks.text, fmt::format("p.{}", name)));  // the loaders read it (wgmma: the tensor map)
    }
    // Nothing else changes: without its name, its ld fields and its loaders'
    // lines, the kernel is the dense one (the epilogue's draws included).
    const KernelSource dense = emit_kernel(c.spec, Shape{256, 512, 1024}, c.tile, KernelPath::fastest, c.target);
    CHECK(rest_of(dense) == rest_of(ks));
    // Only A strided: B's loaders keep the dense ld.
    Shape only_a{256, 512, 1024};
    only_a.lda = s.lda;
    const KernelSource ka = emit_kernel(c.spec, only_a, c.tile, KernelPath::fastest, c.target);
    CHECK(field(ka, "lda") != nullptr);
    CHECK(field(ka, "ldb") == nullptr);
    CHECK_FALSE(has(ka.text, "p.ldb"));
  }
  // A wgmma key's general kernel (the mma.sync fallback) reads the fields too.
  const KernelSpec spec = gemm(DType::f16, Layout::row, Layout::col);
  Shape s{256, 512, 1024};
  s.lda = 1032;
  s.ldb = 1040;
  const KernelSource general = emit_kernel(spec, s, WgmmaTile{128, 128, 64, 4, 8}, KernelPath::general, "sm_90a");
  CHECK(has(general.text, "p.lda"));
  CHECK(has(general.text, "p.ldb"));
}

TEST_CASE("strided operands: the wgmma tensor map takes the ld as its row stride") {
  const KernelSpec spec = gemm(DType::f16, Layout::row, Layout::col);
  Shape s{256, 512, 1000};
  s.lda = 1024;
  const KernelSource ks = emit_kernel(spec, s, WgmmaTile{128, 128, 64, 4, 8}, KernelPath::fastest, "sm_90a");
  const std::vector<std::uint64_t> inputs = {0x10000, 0x20000, 0x30000};
  const std::vector<std::uint64_t> outputs = {0x40000};
  ParamField a{ParamRole::opaque, a_kmajor_map, 0, 128, 64, "tma_a"};
  ParamField b{ParamRole::opaque, b_kmajor_map, 0, 128, 64, "tma_b"};
  const std::optional<TensorMap2d> ma = wgmma_tensor_map(a, {ks, inputs, outputs, s});
  const std::optional<TensorMap2d> mb = wgmma_tensor_map(b, {ks, inputs, outputs, s});
  REQUIRE(ma);
  REQUIRE(mb);
  CHECK(ma->inner == 1000);
  CHECK(ma->row_bytes == 1024 * 2);
  CHECK(mb->row_bytes == 1000 * 2);  // dense B: its rows' length
  s.lda = 1001;  // 2002 bytes: not a multiple of 16, no map (the launch takes the general kernel)
  CHECK_FALSE(wgmma_tensor_map(a, {ks, inputs, outputs, s}));
}

TEST_CASE("strided operands: an ld below the rows' length, or for no operand, is refused naming it") {
  const KernelSpec spec = gemm(DType::f16, Layout::row, Layout::col);
  Shape s{64, 96, 128};
  s.lda = 100;
  std::string e = user_error(spec, s);
  CHECK(has(e, "operand 'a'"));
  CHECK(has(e, "ld 100"));
  CHECK(has(e, "128 elements"));
  s = {64, 96, 128};
  s.ldb = 127;  // B column-major: rows of K
  e = user_error(spec, s);
  CHECK(has(e, "operand 'b'"));
  CHECK(has(e, "ld 127"));
  s = {64, 96, 128};
  s.ldb = -8;
  CHECK(has(user_error(spec, s), "operand 'b'"));
  s = {64, 96, 128};
  s.ldb1 = 128;
  CHECK(has(user_error(spec, s), "only a dual GEMM has a B1"));
  const KernelSpec dual = gemm(DType::f16, Layout::row, Layout::row, MainloopKind::dual_gemm);
  s = {64, 96, 128};
  s.ldb1 = 95;  // B row-major: rows of N
  e = user_error(dual, s);
  CHECK(has(e, "operand 'b1'"));
  CHECK(has(e, "96 elements"));
  KernelSpec ew;
  ew.graph.output("y", ew.graph.relu(ew.graph.input("x", DType::f16)), DType::f16);
  Shape es{64, 96, 0};
  es.lda = 128;
  CHECK(has(user_error(ew, es), "elementwise chain has none"));
}
