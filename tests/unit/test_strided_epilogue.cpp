// Strided epilogue tensors (Note [Strided epilogue tensors], docs/strided-batched.md
// step 2): what an ld on a GEMM chain's full [M,N] input or output changes in the
// plan, the key and the emitted kernel of every mainloop (its ld field, and that
// tensor's addresses: nothing else), what it leaves alone (a dense shape's kernel,
// byte for byte), the refusals of a bad ld, and the host's strided layouts. No GPU,
// no compiler.
#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "codegen/gemm/gemm.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/tensor.hpp"

using namespace epifuse;

namespace {

// acc (+ acc1) + bias [N] + res [M,N] -> relu -> y, with the pre-activation z
// saved: two full outputs, a full input, a row input. `dropout`: y dropped
// (shared Philox draws where N % 4 == 0), which keeps wgmma on its staged
// epilogue; without it a 16-bit chain takes the fragment epilogue.
KernelSpec chain(DType dt, MainloopKind kind = MainloopKind::gemm, bool dropout = false, Layout b = Layout::col,
                 GemmMath math = GemmMath::exact) {
  KernelSpec spec;
  spec.mainloop = {kind, dt, dt, Layout::row, b, math};
  Graph& g = spec.graph;
  Value z = g.add(g.accumulator(0), g.input("bias", dt, Broadcast::row));
  if (kind == MainloopKind::dual_gemm) z = g.mul(z, g.accumulator(1));
  z = g.add(z, g.input("res", dt));
  const Value y = g.relu(z);
  g.output("y", dropout ? g.dropout(y, 0.25) : y, dt);
  g.output("z", z, dt);
  return spec;
}

// Shape `s` with input `i` and output `j` strided by `pad` elements past N.
Shape strided(Shape s, std::size_t i, std::size_t j, std::int64_t pad_in, std::int64_t pad_out) {
  s.ld_inputs.assign(i + 1, 0);
  s.ld_inputs[i] = s.n + pad_in;
  s.ld_outputs.assign(j + 1, 0);
  s.ld_outputs[j] = s.n + pad_out;
  return s;
}

const ParamField* field(const KernelSource& ks, std::string_view name) {
  const auto it = std::find_if(ks.params.begin(), ks.params.end(), [&](const ParamField& f) { return f.name == name; });
  return it == ks.params.end() ? nullptr : &*it;
}

bool has(const std::string& text, std::string_view what) { return text.find(what) != std::string::npos; }

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// A strided kernel's text read back as the dense one's: without its name and its
// ld fields, each `p.ld_<field>` read as `p.n`, a strided store's place as `at`
// and the prefetch helpers' ld argument dropped. Equal to the dense kernel's text
// so treated exactly when the variant changes those addresses and nothing else.
std::string as_dense(const KernelSource& ks) {
  std::string out, line;
  std::istringstream in(ks.text);
  while (std::getline(in, line)) {
    if (line.starts_with("  long long ld_in") || line.starts_with("  long long ld_out")) continue;
    replace_all(line, ks.name, "KERNEL");
    for (const char* f : {"in0", "in1", "out0", "out1"}) {
      replace_all(line, fmt::format("[row * p.ld_{} + col]", f), "[at]");
      replace_all(line, fmt::format("p.n, p.ld_{},", f), "p.n,");
      replace_all(line, fmt::format("p.ld_{}", f), "p.n");
    }
    out += line + "\n";
  }
  return out;
}

std::string without_name(const KernelSource& ks) {
  std::string s = ks.text;
  replace_all(s, ks.name, "KERNEL");
  return s;
}

std::string user_error(const KernelSpec& spec, const Shape& shape) {
  try {
    emit_kernel(spec, shape, std::nullopt, KernelPath::fastest, "sm_80");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

struct Case {
  const char* what;
  KernelSpec spec;
  std::optional<TileConfig> tile;
  const char* target;
  KernelPath path = KernelPath::fastest;
};

// One per mainloop and epilogue: mma.sync's fragment epilogue with its early
// loads (a small warp tile) and without them, its staged epilogue, SIMT f32,
// wgmma's staged and fragment epilogues (both with prefetched [M,N] inputs),
// the wgmma key's mma.sync general kernel, the wave kernel, dual GEMMs.
std::vector<Case> cases() {
  return {
      {"mma.sync fragments, early loads", chain(DType::f16), GemmTile{64, 64, 32, 2, 4, 3}, "sm_80"},
      {"mma.sync fragments", chain(DType::bf16, MainloopKind::gemm, true), GemmTile{128, 128, 32, 2, 4, 3}, "sm_80"},
      {"mma.sync staged", chain(DType::f16, MainloopKind::gemm, true), GemmTile{128, 256, 32, 2, 2, 3}, "sm_80"},
      {"mma.sync tf32 B row", chain(DType::f32, MainloopKind::gemm, false, Layout::row, GemmMath::tf32), std::nullopt,
       "sm_80"},
      {"SIMT f32", chain(DType::f32, MainloopKind::gemm, true), std::nullopt, "sm_80"},
      {"wgmma staged", chain(DType::bf16, MainloopKind::gemm, true), WgmmaTile{128, 128, 64, 4, 8}, "sm_90a"},
      {"wgmma fragment", chain(DType::f16), WgmmaTile{128, 256, 64, 4, 8, 2}, "sm_90a"},
      {"wgmma f32 staged", chain(DType::f32, MainloopKind::gemm, false, Layout::col, GemmMath::tf32),
       WgmmaTile{128, 128, 32, 4, 8}, "sm_90a"},
      {"wgmma general (mma.sync)", chain(DType::f16), WgmmaTile{128, 128, 64, 4, 8}, "sm_90a", KernelPath::general},
      {"wave", chain(DType::f16, MainloopKind::gemm, true), std::nullopt, "gfx90a"},
      {"dual mma.sync", chain(DType::f16, MainloopKind::dual_gemm), std::nullopt, "sm_80"},
      {"dual wgmma", chain(DType::bf16, MainloopKind::dual_gemm), WgmmaTile{128, 128, 64, 4, 8}, "sm_90a"},
      {"dual wave", chain(DType::f16, MainloopKind::dual_gemm), std::nullopt, "gfx90a"},
  };
}

}  // namespace

TEST_CASE("strided epilogue tensors: a dense shape's kernel is the same bytes, with lds of 0 or N") {
  for (const Case& c : cases()) {
    const std::string what = c.what;
    CAPTURE(what);
    const Shape dense{256, 512, 1024};
    Shape same = dense;
    same.ld_inputs = {0, 512};
    same.ld_outputs = {512, 0};
    const KernelSource x = emit_kernel(c.spec, dense, c.tile, c.path, c.target);
    const KernelSource y = emit_kernel(c.spec, same, c.tile, c.path, c.target);
    CHECK(x.text == y.text);
    CHECK(x.name == y.name);
    CHECK(gemm_shape_class(c.spec.mainloop, dense) == gemm_shape_class(c.spec.mainloop, same));
    for (const char* what : {"p.ld_in", "p.ld_out", "long long ld_in", "long long ld_out"}) CHECK_FALSE(has(x.text, what));
  }
}

TEST_CASE("strided epilogue tensors: each flag is in the shape class and the kernel's name, the ld's value is not") {
  const KernelSpec spec = chain(DType::f16);
  Shape s{256, 512, 1000};
  CHECK(gemm_shape_class(spec.mainloop, s) == "ld8/n4");
  s.ld_inputs = {0, 520};
  CHECK(gemm_shape_class(spec.mainloop, s) == "ld8/n4/ld_in1");
  s.ld_outputs = {0, 1024};
  CHECK(gemm_shape_class(spec.mainloop, s) == "ld8/n4/ld_in1/ld_out1");
  s.lda = 1024;  // an operand's flag comes first
  CHECK(gemm_shape_class(spec.mainloop, s) == "ld8/n4/lda/ld_in1/ld_out1");
  Shape t = s;
  t.ld_inputs = {0, 4096};
  t.ld_outputs = {0, 513};  // an ld the vector stores cannot take is the same class: the launch checks its alignment
  CHECK(gemm_shape_class(spec.mainloop, t) == gemm_shape_class(spec.mainloop, s));
  CHECK(gemm_shape_class(spec.mainloop, t).data() == gemm_shape_class(spec.mainloop, s).data());  // kept once
  const KernelSource a = emit_kernel(spec, s, std::nullopt, KernelPath::fastest, "sm_80");
  const KernelSource b = emit_kernel(spec, t, std::nullopt, KernelPath::fastest, "sm_80");
  CHECK(a.text == b.text);
  const KernelSource dense = emit_kernel(spec, Shape{256, 512, 1000, 1024}, std::nullopt, KernelPath::fastest, "sm_80");
  CHECK(a.name != dense.name);
  CHECK(a.tile == dense.tile);  // the dense shape's tile: the same bits
  Shape out_only{256, 512, 1000};
  out_only.ld_outputs = {520};
  CHECK(gemm_shape_class(spec.mainloop, out_only) == "ld8/n4/ld_out0");
  CHECK(emit_kernel(spec, out_only, std::nullopt, KernelPath::fastest, "sm_80").name != a.name);
}

TEST_CASE("strided epilogue tensors: every mainloop reads each strided tensor's ld field, and changes nothing else") {
  for (const Case& c : cases()) {
    const std::string what = c.what;
    CAPTURE(what);
    const Shape dense{256, 512, 1024};
    for (const auto& [i, j] : {std::pair<std::size_t, std::size_t>{1, 0}, {1, 1}}) {
      const Shape s = strided(dense, i, j, 8, 24);
      CAPTURE(i);
      CAPTURE(j);
      const KernelSource ks = emit_kernel(c.spec, s, c.tile, c.path, c.target);
      const std::string in = fmt::format("ld_in{}", i), out = fmt::format("ld_out{}", j);
      const ParamField* fi = field(ks, in);
      const ParamField* fo = field(ks, out);
      REQUIRE(fi != nullptr);
      REQUIRE(fo != nullptr);
      const std::size_t operands = c.spec.mainloop.kind == MainloopKind::dual_gemm ? 3 : 2;
      CHECK(fi->role == ParamRole::ld);
      CHECK(fi->index == operands + i);  // input i binds after the operands
      CHECK(ks.inputs[fi->index] == "res");
      CHECK(fo->role == ParamRole::output_ld);
      CHECK(fo->index == j);
      CHECK(fi->size == 8);
      CHECK(fo->size == 8);
      CHECK(has(ks.text, fmt::format("long long {};", in)));
      CHECK(has(ks.text, fmt::format("p.{}", in)));
      CHECK(has(ks.text, fmt::format("p.{}", out)));
      CHECK(field(ks, "ld_in0") == nullptr);  // the row input has no rows to space
      CHECK(field(ks, j == 0 ? "ld_out1" : "ld_out0") == nullptr);
      // Only the strided tensors' addresses change: read back as dense, the
      // kernel is the dense one (the dropout draws' indices included).
      const KernelSource d = emit_kernel(c.spec, dense, c.tile, c.path, c.target);
      CHECK(as_dense(ks) == without_name(d));
      if (what.ends_with("early loads")) CHECK(has(ks.text, "(Note [Early loads])"));
      CHECK(ks.input_alignment == d.input_alignment);
      CHECK(ks.output_alignment == d.output_alignment);
      CHECK(ks.requires_alignment == d.requires_alignment);
    }
  }
}

TEST_CASE("strided epilogue tensors: the wgmma epilogues test a strided tensor's ld where they test N") {
  // The prefetched input's vector loads and the fragment epilogue's 16-byte
  // stores are chosen in the kernel: ld % 8 == 0 as N % 8 == 0 for a dense one.
  Shape s = strided({512, 512, 512}, 1, 1, 8, 16);
  const KernelSource frag = emit_kernel(chain(DType::f16), s, WgmmaTile{128, 128, 64, 4, 8}, KernelPath::fastest, "sm_90a");
  CHECK(has(frag.text, "const bool in1_vec = (p.ld_in1 & 7) == 0"));
  CHECK(has(frag.text, "const bool out1_v16 = (p.ld_out1 & 7) == 0"));
  CHECK(has(frag.text, "const bool v16 = (p.n & 7) == 0"));  // out0 is dense
  CHECK(has(frag.text, "pf_row, pf_col, p.m, p.n, p.ld_in1, in1_vec, lane)"));
  CHECK(has(frag.text, "auto* const dst = p.out1 + row * p.ld_out1 + col;"));
  const KernelSource staged =
      emit_kernel(chain(DType::bf16, MainloopKind::gemm, true), s, WgmmaTile{128, 128, 64, 4, 8}, KernelPath::fastest, "sm_90a");
  CHECK(has(staged.text, "const bool in1_vec = (p.ld_in1 & 3) == 0"));
  CHECK(has(staged.text, "ef_prefetch_quads<2>(in1_pf, p.in1, pf_row, pf_col, p.m, p.n, p.ld_in1, in1_vec, lane)"));
  CHECK(has(staged.text, "ef_store4(p.out1 + row * p.ld_out1 + col0, out1_q);"));
}

TEST_CASE("strided epilogue tensors: a bad ld is refused naming the tensor") {
  const KernelSpec spec = chain(DType::f16);
  Shape s{64, 96, 128};
  s.ld_inputs = {0, 95};
  std::string e = user_error(spec, s);
  CHECK(has(e, "input 'res'"));
  CHECK(has(e, "ld 95"));
  CHECK(has(e, "96 elements (N)"));
  s = {64, 96, 128};
  s.ld_outputs = {0, 64};
  e = user_error(spec, s);
  CHECK(has(e, "output 'z'"));
  CHECK(has(e, "ld 64"));
  s = {64, 96, 128};
  s.ld_inputs = {128};  // bias is [N]
  e = user_error(spec, s);
  CHECK(has(e, "input 'bias'"));
  CHECK(has(e, "full [M,N]"));
  s = {64, 96, 128};
  s.ld_outputs = {0, -8};
  CHECK(has(user_error(spec, s), "output 'z': ld -8"));
  s = {64, 96, 128};
  s.ld_inputs = {0, 0, 100};
  CHECK(has(user_error(spec, s), "lds given for 3 inputs and 0 outputs, the chain has 2 and 2"));
  // A column sum's [N] output has no rows either.
  KernelSpec dgrad;
  dgrad.mainloop = {MainloopKind::gemm, DType::bf16, DType::bf16, Layout::row, Layout::col};
  const Value dacc = dgrad.graph.mul(dgrad.graph.accumulator(0), dgrad.graph.input("saved", DType::bf16));
  dgrad.graph.output("dacc", dacc, DType::bf16);
  dgrad.graph.output("db", dgrad.graph.col_sum(dacc), DType::f32);
  s = {64, 96, 128};
  s.ld_outputs = {104, 104};
  e = user_error(dgrad, s);
  CHECK(has(e, "output 'db'"));
  CHECK(has(e, "[N]"));
  s.ld_outputs = {104};
  CHECK(user_error(dgrad, s).empty());  // dacc alone: a strided variant
  // A batched GEMM's full tensors stay [B, M, N] back to back.
  s = {64, 96, 128};
  s.batch = 4;
  s.ld_inputs = {0, 100};
  e = user_error(spec, s);
  CHECK(has(e, "input 'res' is strided (ld 100) in a batched GEMM"));
  s.ld_inputs = {0, 96};  // ld = N is dense
  CHECK(user_error(spec, s).empty());
  // Each strided tensor is a kernel parameter: at most limits::k_max_strided_tensors.
  KernelSpec wide;
  wide.mainloop = {MainloopKind::gemm, DType::f16, DType::f16, Layout::row, Layout::col};
  Value sum = wide.graph.accumulator(0);
  for (int i = 0; i < 65; ++i) sum = wide.graph.add(sum, wide.graph.input(fmt::format("r{}", i), DType::f16));
  wide.graph.output("y", sum, DType::f16);
  s = {64, 96, 128};
  s.ld_inputs.assign(65, 104);
  CHECK(has(user_error(wide, s), "65 strided [M,N] tensors exceed the limit of 64"));
  s.ld_inputs[64] = 0;
  CHECK(user_error(wide, s).empty());
  // An elementwise chain's full tensors take lds too (tests/unit/test_strided_rows.cpp).
  KernelSpec ew;
  ew.graph.output("y", ew.graph.relu(ew.graph.input("x", DType::f16)), DType::f16);
  Shape es{64, 96, 0};
  es.ld_inputs = {128};
  CHECK(user_error(ew, es).empty());
}

TEST_CASE("strided epilogue tensors: a strided output's rows read back, a written gap caught") {
  HostTensor dense = HostTensor::zeros(DType::f16, {3, 5});
  for (std::size_t b = 0; b < dense.bytes.size(); ++b) dense.bytes[b] = std::byte(b & 0x7F);
  const std::vector<std::byte> rows = strided_rows(dense, 5, 8);  // the gaps 0xFF, as run_on_device poisons them
  REQUIRE(rows.size() == 3 * 8 * 2);
  CHECK(dense_rows(rows, DType::f16, 5, 8, "y") == dense.bytes);
  std::vector<std::byte> written = rows;
  written[(8 + 6) * 2] = std::byte{0};  // row 1, column 6: in the gap
  try {
    (void)dense_rows(written, DType::f16, 5, 8, "y");
    FAIL("a written gap was not caught");
  } catch (const InternalError& e) {
    CHECK(has(e.what(), "output 'y'"));
    CHECK(has(e.what(), "gap after row 1"));
  }
}
