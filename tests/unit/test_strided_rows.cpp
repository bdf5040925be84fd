// Strided [M,N] tensors in the elementwise and row families (Note [Strided rows],
// docs/strided-batched.md, "Built: strided tensors in the elementwise and row
// families"): the plan (the flat kernel's narrowed vector and its 2-D walk, the
// column-sum kernel's unchanged tile, the row family's vector and ring), the key
// (the shape class's flags), the emitted kernels (ld fields and roles, and only
// the strided tensors' addresses changed), the dense kernels byte for byte, and
// the refusals. No GPU, no compiler.
#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "codegen/family.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/errors.hpp"

using namespace epifuse;

namespace {

// x [M,N] + bias [N], times s [M], plus res [M,N]: y; `dropout` drops the sum
// first. Full inputs x and res, one full output.
KernelSpec elementwise_chain(DType dt, bool dropout = false) {
  KernelSpec spec;
  Graph& g = spec.graph;
  // Inputs in this order: x 0, bias 1, s 2, res 3.
  const Value x = g.input("x", dt), bias = g.input("bias", dt, Broadcast::row);
  const Value scale = g.input("s", dt, Broadcast::col), res = g.input("res", dt);
  Value v = g.mul(g.add(x, bias), scale);
  if (dropout) v = g.dropout(v, 0.25);
  g.output("y", g.add(v, res), dt);
  return spec;
}

// The same with a column sum of y (the column-sum kernel).
KernelSpec column_sum_chain(DType dt, bool dropout = false) {
  KernelSpec spec = elementwise_chain(dt, dropout);
  Graph& g = spec.graph;
  g.output("dy", g.col_sum(g.outputs().front().value), DType::f32);
  return spec;
}

// softmax(x + res) -> y, and h = x + res saved; `sums` adds a column sum of y.
KernelSpec row_chain(DType dt, bool sums = false) {
  KernelSpec spec;
  Graph& g = spec.graph;
  const Value x = g.input("x", dt), res = g.input("res", dt);  // inputs 0 and 1
  const Value h = g.add(x, res);
  const Value y = g.softmax(h);
  g.output("y", y, dt);
  g.output("h", h, dt);
  if (sums) g.output("dy", g.col_sum(y), DType::f32);
  return spec;
}

// Inputs x (0) and res (3), output y (0) at lds of N + pad; a pad of 0 gives
// lds equal to N, which is dense.
Shape strided(std::int64_t m, std::int64_t n, std::int64_t pad_x, std::int64_t pad_res, std::int64_t pad_y,
              std::size_t res = 3) {
  Shape s{m, n, 0};
  s.ld_inputs.assign(res + 1, 0);
  s.ld_inputs[0] = n + pad_x;
  s.ld_inputs[res] = n + pad_res;
  s.ld_outputs = {n + pad_y};
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

// A strided kernel's text read back as the dense one's: without its name,
// its ld fields and its strided rows' bases; `rk * p.ld_<f> + c0` (the column-sum
// kernel) and `r0 * (int)p.ld_<f> + c0` (the flat kernel) read as `e0`, the flat
// kernel's exact row division as the dense kernel's reciprocal, `base_<f>` as `base` and `p.ld_<f>` as `p.n` (the row
// family). Equal to the dense kernel's text when the strided variant changes those
// addresses and nothing else.
// The flat kernel's row and column: exact over strided rows, by the fp64 reciprocal when dense.
constexpr const char* kExactRow =
    "    const int r0 = (int)(__umulhi((unsigned)e0 << 1, (unsigned)p.n_magic) >> (unsigned)(p.n_magic >> 32)), c0 = e0 - r0 * n;";
constexpr const char* kReciprocalRow =
    "    int r0 = (int)((double)e0 * p.n_inv), c0 = e0 - r0 * n;\n"
    "    if (c0 < 0) { --r0; c0 += n; } else if (c0 >= n) { ++r0; c0 -= n; }";

std::string as_dense(const KernelSource& ks) {
  std::string out, line;
  std::istringstream in(ks.text);
  while (std::getline(in, line)) {
    if (line.starts_with("  long long ld_in") || line.starts_with("  long long ld_out")) continue;
    if (line.starts_with("    const long long base_")) continue;
    if (line == "  unsigned long long n_magic;") continue;  // Note [Division by N]: the dense kernel's is fp64
    if (line == kExactRow) line = kReciprocalRow;
    replace_all(line, ks.name, "KERNEL");
    for (const char* f : {"in0", "in3", "in1", "out0", "out1"}) {
      replace_all(line, fmt::format("rk * p.ld_{} + c0", f), "e0");
      replace_all(line, fmt::format("ahead * p.ld_{} + c0", f), "ahead * n + c0");  // Note [Staged column loads]
      replace_all(line, fmt::format("r0 * (int)p.ld_{} + c0", f), "e0");
      replace_all(line, fmt::format("r0 * p.ld_{} + c0", f), "e0");
      replace_all(line, fmt::format("base_{}", f), "base");
      replace_all(line, fmt::format("p.ld_{}", f), "p.n");
    }
    out += line + "\n";
  }
  return out;
}

std::string without_name(const KernelSource& ks) {
  std::string out, line;
  std::istringstream in(ks.text);
  while (std::getline(in, line)) {
    replace_all(line, ks.name, "KERNEL");
    out += line + "\n";
  }
  return out;
}

// Every full input and output of `spec` given an ld of N: the dense shape.
Shape lds_of_n(const KernelSpec& spec, std::int64_t m, std::int64_t n) {
  Shape s{m, n, 0};
  const Graph& g = spec.graph;
  for (Value v : g.inputs()) s.ld_inputs.push_back(g.node(v).broadcast == Broadcast::full ? n : 0);
  for (const Output& o : g.outputs()) s.ld_outputs.push_back(g.node(o.value).broadcast == Broadcast::full ? n : 0);
  return s;
}

KernelSource emit(const KernelSpec& spec, const Shape& shape, std::optional<TileConfig> tile = std::nullopt,
                  std::string_view target = "sm_80", KernelPath path = KernelPath::fastest) {
  return emit_kernel(spec, shape, tile, path, target);
}

std::string user_error(const KernelSpec& spec, const Shape& shape) {
  try {
    emit(spec, shape);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

int vec_of(const KernelSpec& spec, const Shape& shape, std::optional<TileConfig> tile = std::nullopt,
           std::string_view target = "sm_80") {
  const TileConfig t = family_for(spec).resolve_tile(spec, shape, tile, target);
  if (const auto* e = std::get_if<ElementwiseTile>(&t)) return e->vec;
  return std::get<RowTile>(t).vec;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("strided rows: lds of 0 or N leave every family's dense kernel byte for byte") {
    struct Dense {
      const char* what;
      KernelSpec spec;
      std::optional<TileConfig> tile;
      const char* target;
    };
    const std::vector<Dense> cases = {
        {"elementwise flat", elementwise_chain(DType::bf16, true), std::nullopt, "sm_80"},
        {"elementwise column sums", column_sum_chain(DType::f32, true), std::nullopt, "sm_80"},
        {"row registers", row_chain(DType::bf16), RowTile{256, 0, -1, 1}, "sm_80"},
        {"row ring", row_chain(DType::bf16), RowTile{256, 0, -1, 0, 0, 1, 1}, "sm_90a"},
        {"row cluster", row_chain(DType::bf16), RowTile{512, 0, -1, 1, 0, 4}, "sm_90a"},
        {"row column sums", row_chain(DType::f32, true), RowTile{512, 0, -1, 1, 0, 2, 2}, "sm_90a"},
    };
    for (const Dense& c : cases) {
      CAPTURE(c.what);
      const std::int64_t m = 64, n = 4096;
      const KernelSource dense = emit(c.spec, Shape{m, n, 0}, c.tile, c.target);
      const KernelSource with_n = emit(c.spec, lds_of_n(c.spec, m, n), c.tile, c.target);
      CHECK(with_n.text == dense.text);  // name included: the same key
      CHECK(with_n.params.size() == dense.params.size());
      CHECK_FALSE(has(dense.text, "ld_"));
      Shape zeros{m, n, 0};
      zeros.ld_inputs = {0, 0};
      zeros.ld_outputs = {0};
      CHECK(emit(c.spec, zeros, c.tile, c.target).text == dense.text);
    }
  }

  TEST_CASE("strided rows: the shape class carries each strided tensor's flag, never its ld") {
    const KernelSpec ew = elementwise_chain(DType::f32);
    const KernelFamily& family = family_for(ew);
    const Shape dense{96, 128, 0};
    const TileConfig tile = family.resolve_tile(ew, dense, std::nullopt, "sm_80");
    CHECK(family.shape_class(ew, tile, dense) == "row_aligned/i32");
    CHECK(family.shape_class(ew, tile, strided(96, 128, 4, 0, 8)) == "row_aligned/i32/ld_in0/ld_out0");
    CHECK(family.shape_class(ew, tile, strided(96, 128, 100, 0, 12)) == "row_aligned/i32/ld_in0/ld_out0");
    CHECK(family.shape_class(ew, tile, strided(96, 128, 0, 4, 0)) == "row_aligned/i32/ld_in3");
    const KernelSpec rows = row_chain(DType::bf16);
    const KernelFamily& row_family = family_for(rows);
    const TileConfig row_tile = row_family.resolve_tile(rows, Shape{8, 1024, 0}, RowTile{256, 8, 1, 1}, "sm_80");
    CHECK(row_family.shape_class(rows, row_tile, Shape{8, 1024, 0}) == "row");
    Shape s{8, 1024, 0};
    s.ld_inputs = {0, 1032};
    s.ld_outputs = {0, 2048};
    CHECK(row_family.shape_class(rows, row_tile, s) == "row/ld_in1/ld_out1");
    // The name hashes the class: a strided kernel is another key, one ld value's the same.
    const KernelSource a = emit(ew, strided(96, 128, 4, 0, 8)), b = emit(ew, strided(96, 128, 8, 0, 4));
    CHECK(a.name == b.name);
    CHECK(a.name != emit(ew, dense).name);
  }

  TEST_CASE("strided rows: the flat elementwise kernel addresses strided rows at r0 * p.ld_<t> + c0") {
    for (const KernelPath path : {KernelPath::fastest, KernelPath::general}) {
      CAPTURE(path == KernelPath::general);
      const KernelSpec spec = elementwise_chain(DType::f32, true);
      const KernelSource ks = emit(spec, strided(96, 128, 4, 0, 8), std::nullopt, "sm_80", path);
      CHECK(std::get<ElementwiseTile>(ks.tile).vec == 4);
      // Fields: x's ld (ParamRole::ld, its input index) and y's (output_ld); res is dense.
      const ParamField* ld_x = field(ks, "ld_in0");
      const ParamField* ld_y = field(ks, "ld_out0");
      REQUIRE(ld_x);
      REQUIRE(ld_y);
      CHECK(ld_x->role == ParamRole::ld);
      CHECK(ld_x->index == 0);
      CHECK(ld_y->role == ParamRole::output_ld);
      CHECK(ld_y->index == 0);
      CHECK_FALSE(field(ks, "ld_in3"));
      CHECK(field(ks, "n_magic"));  // the flat index divided into r0 and c0 (Note [Division by N])
      CHECK(has(ks.text, "Generated from templates/elementwise.cu.in"));
      CHECK(has(ks.text, "ef_load_vec<float, VEC>(p.in0 + r0 * (int)p.ld_in0 + c0, in0_v);"));
      CHECK(has(ks.text, "ef_load_vec<float, VEC>(p.in3 + e0, in3_v);"));  // dense: r0 * N + c0
      CHECK(has(ks.text, "ef_store_vec<float, VEC>(p.out0 + r0 * (int)p.ld_out0 + c0, out0_v);"));
      // The draws' index is the [M,N] place, never the strided address.
      CHECK(has(ks.text, "ef_philox4_draws(rng.seed, rng.offset, 0u, (unsigned long long)((unsigned)(e0 + j)) >> 2)"));
      // Only the strided tensors' addresses differ from the dense kernel.
      CHECK(as_dense(ks) == without_name(emit(spec, Shape{96, 128, 0}, std::nullopt, "sm_80", path)));
      if (path == KernelPath::fastest) {
        // N % VEC == 0 on the fastest path: vectors only, the host checks each pointer and ld.
        CHECK(ks.requires_alignment);
        CHECK(ks.input_alignment[0] == 16);
        CHECK(ks.output_alignment[0] == 16);
      } else {
        // The general kernel's scalar path: element j of the row at r0 * ld + c0 + j.
        CHECK_FALSE(ks.requires_alignment);
        CHECK(has(ks.text, "p.in0[r0 * (int)p.ld_in0 + c0 + j]"));
        CHECK(has(ks.text, "if (e0 + j < total) p.out0[r0 * (int)p.ld_out0 + c0 + j] = ef_from_float<float>(out0_v[j]);"));
      }
    }
    // A chain without broadcast operands finds r0 and c0 only when strided.
    KernelSpec plain;
    plain.graph.output("y", plain.graph.relu(plain.graph.input("x", DType::f32)), DType::f32);
    CHECK(has(emit(plain, Shape{96, 128, 0}).text, "// no broadcast operand: no coordinates"));
    Shape s{96, 128, 0};
    s.ld_inputs = {132};
    const KernelSource p = emit(plain, s);
    CHECK(has(p.text, "const int r0 = (int)(__umulhi((unsigned)e0 << 1, (unsigned)p.n_magic) >> (unsigned)(p.n_magic >> 32))"));
    CHECK(field(p, "n_magic"));
    CHECK_FALSE(field(emit(plain, Shape{96, 128, 0}), "n_magic"));  // no coordinates, no divisor
    // A dense kernel keeps the fp64 reciprocal; 64-bit offsets (M * ld >= 2^30) keep it too.
    CHECK_FALSE(field(emit(elementwise_chain(DType::f32, true), Shape{96, 128, 0}), "n_magic"));
    Shape wide{8192, 128, 0};
    wide.ld_inputs = {1 << 17};
    const KernelSource w = emit(plain, wide);
    CHECK(has(w.text, "long long r0 = (long long)((double)e0 * p.n_inv)"));
    CHECK(has(w.text, "p.in0 + r0 * p.ld_in0 + c0"));
    CHECK_FALSE(field(w, "n_magic"));
    CHECK(has(p.text, "ef_load_vec<float, VEC>(p.in0 + r0 * (int)p.ld_in0 + c0, in0_v);"));
  }

  TEST_CASE("strided rows: with N % VEC != 0 (dropout's four) the kernel walks rows, strided addresses at r * p.ld_<t> + c0") {
    const KernelSpec spec = elementwise_chain(DType::f32, true);
    const KernelSource ks = emit(spec, strided(96, 130, 6, 0, 2), std::nullopt, "sm_80", KernelPath::general);
    CHECK(std::get<ElementwiseTile>(ks.tile).vec == 4);  // dropout keeps one Philox call's four
    CHECK(has(ks.text, "Generated from templates/elementwise_rows.cu.in"));
    CHECK_FALSE(field(ks, "n_inv"));  // no flat index to divide
    REQUIRE(field(ks, "ld_in0"));
    REQUIRE(field(ks, "ld_out0"));
    CHECK_FALSE(field(ks, "ld_in3"));
    CHECK_FALSE(ks.requires_alignment);
    CHECK(has(ks.text, "const int e0 = r * n + c0;"));
    // Element by element (a lane's four columns may cross the row's end).
    CHECK_FALSE(has(ks.text, "ef_load_vec"));
    CHECK(has(ks.text, "p.in0[r * p.ld_in0 + c0 + j]"));
    CHECK(has(ks.text, "p.in3[e0 + j]"));
    CHECK(has(ks.text, "if (c0 + j < n) p.out0[r * p.ld_out0 + c0 + j] = ef_from_float<float>(out0_v[j]);"));
    // The draws' index is the [M,N] place, never the strided address.
    CHECK(has(ks.text, "ef_philox4_draw(rng.seed, rng.offset, 0u, (unsigned long long)(e0 + j))"));
    CHECK_FALSE(has(ks.text, "ld_in0 + c0 + j) >> 2"));
  }

  TEST_CASE("strided rows: the flat kernel narrows its vector to what the rows' starts take, never refuses") {
    const KernelSpec f32 = elementwise_chain(DType::f32), bf16 = elementwise_chain(DType::bf16);
    CHECK(vec_of(f32, Shape{96, 128, 0}) == 4);
    CHECK(vec_of(f32, strided(96, 128, 4, 0, 0)) == 4);   // ld 132: 528 bytes, a multiple of 16
    CHECK(vec_of(f32, strided(96, 128, 2, 0, 0)) == 2);   // ld 130: 520 bytes, 8-byte vectors
    CHECK(vec_of(f32, strided(96, 128, 1, 0, 0)) == 1);   // ld 129: element by element
    CHECK(vec_of(f32, strided(96, 128, 0, 0, 1)) == 1);   // an output's ld as well
    CHECK(vec_of(bf16, Shape{96, 128, 0}) == 8);
    CHECK(vec_of(bf16, strided(96, 128, 8, 0, 0)) == 8);  // ld 136: 272 bytes
    CHECK(vec_of(bf16, strided(96, 128, 4, 0, 0)) == 4);  // ld 132: 264 bytes, 8-byte vectors
    CHECK(vec_of(bf16, strided(96, 100, 4, 0, 0)) == 4);  // N 100: a vector of 8 would straddle rows
    // A requested vector (a tuned tile of the dense shape) narrows the same way.
    CHECK(vec_of(bf16, strided(96, 128, 2, 0, 0), ElementwiseTile{256, 16, 0}) == 2);
    // Dropout keeps four (one Philox call's draws); the launch finds the ld
    // misaligned for them and runs the general kernel, element by element.
    CHECK(vec_of(elementwise_chain(DType::f32, true), strided(96, 128, 1, 0, 0)) == 4);
    const KernelSource one = emit(f32, strided(96, 128, 1, 0, 0));
    CHECK(std::get<ElementwiseTile>(one.tile).vec == 1);
    CHECK(has(one.text, "constexpr int VEC = 1;"));
    // The column-sum kernel keeps the dense shape's tile: its VEC orders the sums.
    CHECK(vec_of(column_sum_chain(DType::f32), strided(96, 128, 1, 0, 0)) == 4);
  }

  TEST_CASE("strided rows: the walking kernel's grid is the column-sum kernel's block over column tiles and rows") {
    const KernelSpec spec = elementwise_chain(DType::f32, true);
    const KernelFamily& family = family_for(spec);
    const Shape s = strided(100000, 302, 2, 0, 0);  // N % 4 != 0: the 2-D walk
    const KernelSource ks = emit(spec, s, ElementwiseTile{256, 0, 0}, "sm_80", KernelPath::general);
    const LaunchGeometry g = family.geometry(ks, s, 132);
    CHECK(g.block[0] == 32);
    CHECK(g.block[1] == 8);
    CHECK(g.grid[0] == 3);      // ceil(302 / (32 x 4))
    CHECK(g.grid[1] == 12500);  // 100000 / 8 row steps: a covering grid
    const KernelSource capped = emit(spec, s, ElementwiseTile{256, 0, 4}, "sm_80", KernelPath::general);
    CHECK(family.geometry(capped, s, 132).grid[1] == 132 * 4 / 3);  // 4 blocks a multiprocessor
    // The flat kernel keeps its flat grid, strided (N % VEC == 0) or dense.
    for (const Shape& flat_shape : {strided(100000, 300, 4, 0, 0), Shape{100000, 300, 0}}) {
      const LaunchGeometry flat = family.geometry(emit(spec, flat_shape), flat_shape, 132);
      CHECK(flat.block[0] == 256);
      CHECK(flat.block[1] == 1);
      CHECK(flat.grid[0] == 100000 * 300 / 4 / 256 + 1);  // every vector once
      CHECK(flat.grid[1] == 1);
    }
  }

  TEST_CASE("strided rows: the column-sum kernel changes only the strided tensors' addresses") {
    for (const bool dropout : {false, true})
      for (const KernelPath path : {KernelPath::fastest, KernelPath::general}) {
        CAPTURE(dropout);
        CAPTURE(path == KernelPath::general);
        const KernelSpec spec = column_sum_chain(DType::bf16, dropout);
        const KernelSource dense = emit(spec, Shape{96, 256, 0}, std::nullopt, "sm_80", path);
        const KernelSource s = emit(spec, strided(96, 256, 8, 24, 8), std::nullopt, "sm_80", path);
        CHECK(s.tile == dense.tile);
        CHECK(has(s.text, "p.in0 + rk * p.ld_in0 + c0"));
        CHECK(has(s.text, "p.in3 + rk * p.ld_in3 + c0"));
        CHECK(has(s.text, "p.out0 + rk * p.ld_out0 + c0"));
        const ParamField* ld = field(s, "ld_in3");
        REQUIRE(ld);
        CHECK(ld->role == ParamRole::ld);
        CHECK(ld->index == 3);
        CHECK(as_dense(s) == without_name(dense));
      }
  }

  TEST_CASE("strided rows: a row kernel's strided rows start at row * p.ld_<t>, in every tile class") {
    struct RowCase {
      const char* what;
      KernelSpec spec;
      RowTile tile;
      const char* target;
      const char* load;  // how the strided input x reaches the stage
    };
    const std::vector<RowCase> cases = {
        {"registers", row_chain(DType::bf16), RowTile{256, 0, -1, 1}, "sm_80", "p.in0 + base_in0 + c0, in0_x[it]"},
        {"group", row_chain(DType::bf16), RowTile{256, 0, -1, 1, 32, 1}, "sm_80", "p.in0 + base_in0 + c0"},
        {"stream", row_chain(DType::bf16), RowTile{256, 0, 0, 1}, "sm_80", "p.in0 + base_in0 + c0, in0_v"},
        {"ring", row_chain(DType::bf16), RowTile{256, 0, -1, 0, 0, 1, 1}, "sm_90a", "p.in0 + r * p.ld_in0 + col0"},
        {"cluster", row_chain(DType::bf16), RowTile{512, 0, -1, 1, 0, 4}, "sm_90a", "p.in0 + base_in0 + c0, in0_x[it]"},
        {"cluster ring", row_chain(DType::bf16), RowTile{512, 0, -1, 1, 0, 4, 2}, "sm_90a",
         "p.in0 + r * p.ld_in0 + col0"},
        {"column sums", row_chain(DType::f32, true), RowTile{512, 0, -1, 1, 0, 2, 2}, "sm_90a",
         "p.in0 + r * p.ld_in0 + col0"},
        {"column sums in registers", row_chain(DType::f32, true), RowTile{512, 0, -1, 1}, "sm_80",
         "p.in0 + base_in0 + c0, in0_x[it]"},
    };
    for (const RowCase& c : cases) {
      CAPTURE(c.what);
      const std::int64_t m = 64, n = 4096;
      Shape s{m, n, 0};
      s.ld_inputs = {n + 64};
      s.ld_outputs = {0, n + 128};  // h, the saved sum
      const KernelSource dense = emit(c.spec, Shape{m, n, 0}, c.tile, c.target);
      const KernelSource ks = emit(c.spec, s, c.tile, c.target);
      CHECK(ks.tile == dense.tile);  // lds on 16 bytes: the dense shape's tile
      CHECK(has(ks.text, c.load));
      // A ring's bulk copies read the inputs: no input base in the loop then.
      CHECK(has(ks.text, "const long long base_in0 = row * p.ld_in0;") == !has(ks.text, "ef_bulk_load"));
      CHECK(has(ks.text, "const long long base_out1 = row * p.ld_out1;"));
      CHECK(has(ks.text, "(p.out1 + base_out1 + c0, out1_v)"));
      CHECK(has(ks.text, "(p.out0 + base + c0, out0_v)"));  // y stays dense
      const ParamField* ld_x = field(ks, "ld_in0");
      const ParamField* ld_h = field(ks, "ld_out1");
      REQUIRE(ld_x);
      REQUIRE(ld_h);
      CHECK(ld_x->role == ParamRole::ld);
      CHECK(ld_h->role == ParamRole::output_ld);
      CHECK(ld_h->index == 1);
      CHECK(as_dense(ks) == without_name(dense));
    }
  }

  TEST_CASE("strided rows: a row kernel narrows its vector, and a ring the ld breaks gives way to registers") {
    const KernelSpec spec = row_chain(DType::bf16);
    Shape s{64, 4096, 0};
    s.ld_inputs = {4100};  // 8200 bytes: 8-byte vectors, no 16-byte bulk copy
    CHECK(vec_of(spec, Shape{64, 4096, 0}, std::nullopt, "sm_90a") == 8);
    CHECK(vec_of(spec, s, std::nullopt, "sm_90a") == 4);
    // The default tile on sm_90a is a ring for the dense shape, not for this one.
    const auto dense_default = std::get<RowTile>(family_for(spec).resolve_tile(spec, Shape{64, 4096, 0}, std::nullopt,
                                                                                "sm_90a"));
    CHECK(dense_default.ring > 0);
    const auto strided_default = std::get<RowTile>(family_for(spec).resolve_tile(spec, s, std::nullopt, "sm_90a"));
    CHECK(strided_default.ring == 0);
    CHECK(strided_default.vec == 4);
    // A requested ring tile (a tuned tile of the dense shape) takes the tile without its ring.
    const auto requested = std::get<RowTile>(
        family_for(spec).resolve_tile(spec, s, RowTile{256, 0, -1, 0, 0, 1, 1, 0}, "sm_90a"));
    CHECK(requested.ring == 0);
    CHECK(requested.vec == 4);
    CHECK(requested.regs > 0);
    const KernelSource ks = emit(spec, s, RowTile{256, 0, -1, 0, 0, 1, 1}, "sm_90a");
    CHECK_FALSE(has(ks.text, "ef_bulk_load"));
    CHECK(has(ks.text, "p.in0 + base_in0 + c0"));
    // An odd ld: element by element, as an odd N does.
    s.ld_inputs = {4097};
    CHECK(vec_of(spec, s, std::nullopt, "sm_90a") == 1);
    // A dense N that no ring takes is refused as before; an ld does not change that message.
    CHECK_THROWS_WITH_AS(family_for(spec).resolve_tile(spec, Shape{64, 4092, 0}, RowTile{256, 0, -1, 0, 0, 1, 1},
                                                       "sm_90a"),
                         doctest::Contains("a ring copies 16-byte pieces"), UserError);
  }

  TEST_CASE("strided rows: refusals name the tensor") {
    const KernelSpec ew = elementwise_chain(DType::f32);
    CHECK(has(user_error(ew, strided(8, 96, -1, 0, 0)),
          "shape: input 'x': ld 95 is less than its rows' 96 elements (N): rows would overlap"));
    Shape on_bias{8, 96, 0};
    on_bias.ld_inputs = {0, 128};
    CHECK(has(user_error(ew, on_bias), "shape: input 'bias': an ld is for a full [M,N] tensor, and 'bias' is [N]"));
    Shape on_scale{8, 96, 0};
    on_scale.ld_inputs = {0, 0, 128};
    CHECK(has(user_error(ew, on_scale), "input 's': an ld is for a full [M,N] tensor, and 's' is [M]"));
    Shape on_sum{8, 96, 0};
    on_sum.ld_outputs = {0, 128};
    CHECK(has(user_error(column_sum_chain(DType::f32), on_sum), "output 'dy': an ld is for a full [M,N] tensor"));
    Shape too_many{8, 96, 0};
    too_many.ld_inputs = {128, 0, 0, 0, 128};
    CHECK(has(user_error(ew, too_many), "lds given for 5 inputs and 0 outputs, the chain has 4 and 1"));
    CHECK(has(user_error(row_chain(DType::bf16), strided(8, 96, 0, 0, -2, 1)),
              "shape: output 'y': ld 94 is less than its rows' 96 elements (N)"));
    // Still no GEMM operand ld on an elementwise chain.
    Shape lda{8, 96, 0};
    lda.lda = 128;
    CHECK(has(user_error(ew, lda), "a leading dimension (ld) is for GEMM operands"));
  }
}
