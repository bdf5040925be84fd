// GPU tier for strided [M,N] tensors in the elementwise and row families (Note
// [Strided rows], docs/strided-batched.md, "Built: strided tensors in the
// elementwise and row families"): full inputs and outputs with rows ld >= N
// apart on the flat elementwise kernel (its 2-D walk, narrowed vectors, the
// general kernel an ld sends a dropout chain to), the elementwise column-sum
// kernel, and row kernels of every tile class (registers, a group a row,
// streaming, and on sm_90a a ring, a cluster, a cluster's ring, column sums in
// registers and in a ring); ragged shapes, lds of N + 1 (no vector takes its
// rows), the smallest whose rows start on 16 bytes, and a larger one. The
// strided launch gives the dense launch's bits exactly, on the tile the strided
// shape resolved to (a row kernel's vector narrows with the ld, and its bits
// follow the tile), and the dense launch matches the reference. run_on_device
// lays a strided input's gaps as NaN (a read shows in the output) and checks
// that a strided output's gap columns still hold the poison it laid (a write
// throws). Skips without a GPU.
#include <doctest/doctest.h>

#include <cstring>
#include <optional>
#include <vector>

#include "codegen/elementwise/elementwise.hpp"
#include "epifuse/compare.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/reference.hpp"
#include "gpu_jit.hpp"

using namespace epifuse;

namespace {

using testing::gpu_jit;

int checked = 0;

// x [M,N] + bias [N], times s [M], dropped where `p` > 0, plus res [M,N]: y, and
// res passed through in f32 (as a residual's backward passes dy: Note [Outputs
// that pass an input through]); `sums` adds y's column sum (the column-sum kernel).
KernelSpec elementwise_chain(DType dt, double p, bool sums = false) {
  KernelSpec spec;
  Graph& g = spec.graph;
  const Value x = g.input("x", dt), bias = g.input("bias", dt, Broadcast::row);
  const Value scale = g.input("s", dt, Broadcast::col), res = g.input("res", dt);
  Value v = g.mul(g.add(x, bias), scale);
  if (p > 0) v = g.dropout(v, p);
  const Value y = g.add(v, res);
  g.output("y", y, dt);
  g.output("res_f32", res, DType::f32);
  if (sums) g.output("dy", g.col_sum(y), DType::f32);
  return spec;
}

// softmax(x + res), dropped where `p` > 0 -> y, and h = x + res saved; `sums`
// adds y's column sum.
KernelSpec row_chain(DType dt, double p = 0.0, bool sums = false) {
  KernelSpec spec;
  Graph& g = spec.graph;
  const Value x = g.input("x", dt), res = g.input("res", dt);
  const Value h = g.add(x, res);
  Value y = g.softmax(h);
  if (p > 0) y = g.dropout(y, p);
  g.output("y", y, dt);
  g.output("h", h, dt);
  if (sums) g.output("dy", g.col_sum(y), DType::f32);
  return spec;
}

// The lds a tensor of N columns of `dt` is tried with: N + 1, the smallest above
// N whose rows start on 16 bytes, and a larger one on 16 bytes.
std::int64_t ld_for(std::int64_t n, DType dt, int choice) {
  if (choice == 0) return n + 1;
  const auto per = static_cast<std::int64_t>(16 / size_of(dt));
  const std::int64_t base = choice == 1 ? n + 1 : n + 136;
  return (base + per - 1) / per * per;
}

enum Strided : unsigned { inputs = 1, outputs = 2, both = 3 };

// Every full input (`which` & inputs) and output (& outputs) strided with ld
// choice `choice` (each later tensor one choice further, so they differ); the
// strided launch against the dense one on the strided shape's tile, bit for bit,
// and the dense one's full outputs against the reference.
void same_bits(Jit& jit, const KernelSpec& spec, const Shape& dense, unsigned which, int choice,
               const std::optional<TileConfig>& tile, std::uint64_t seed, LaunchArgs args = {}) {
  const Graph& g = spec.graph;
  Shape s = dense;
  s.ld_inputs.assign(g.inputs().size(), 0);
  s.ld_outputs.assign(g.outputs().size(), 0);
  int k = choice;
  for (std::size_t i = 0; i < g.inputs().size(); ++i) {
    const Node& n = g.node(g.inputs()[i]);
    if ((which & inputs) && n.broadcast == Broadcast::full) s.ld_inputs[i] = ld_for(dense.n, n.dtype, k++ % 3);
  }
  for (std::size_t j = 0; j < g.outputs().size(); ++j) {
    const Output& o = g.outputs()[j];
    if ((which & outputs) && g.node(o.value).broadcast == Broadcast::full) s.ld_outputs[j] = ld_for(dense.n, o.dtype, k++ % 3);
  }
  // The tile the strided shape resolves to (its vector narrowed to the lds, a
  // ring the lds break dropped), run on the dense shape as well.
  const TileConfig resolved = jit.compile(spec, s, tile)->source().tile;
  const TensorMap in = make_inputs(spec, dense, seed);
  const TensorMap want = evaluate(spec, dense, in, args);
  const TensorMap base = run_on_device(jit, spec, dense, in, args, resolved);
  const TensorMap got = run_on_device(jit, spec, s, in, args, tile);  // throws if a gap was written
  for (const Output& o : g.outputs()) {
    INFO(dense.m << "x" << dense.n << " which " << which << " choice " << choice << " tile "
                 << (tile ? to_string(*tile) : "default") << " resolved " << to_string(resolved) << " output " << o.name);
    const HostTensor& x = base.at(o.name);
    const HostTensor& y = got.at(o.name);
    REQUIRE(x.bytes.size() == y.bytes.size());
    CHECK(std::memcmp(x.bytes.data(), y.bytes.data(), x.bytes.size()) == 0);
    // A column sum's and a row chain's values are checked where their kernels
    // are (test_elementwise.cpp, test_row.cpp): here their bits suffice.
    if (g.node(o.value).broadcast != Broadcast::full) continue;
    const Comparison c = compare(x, want.at(o.name), tolerance_for(o.dtype, spec.precision));
    CHECK_MESSAGE(c.ok, c.message);
  }
  ++checked;
}

bool hopper(const Jit& jit) { return jit.target().starts_with("sm_9") || jit.target().starts_with("sm_1"); }

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("strided rows: the elementwise kernel, flat and walking rows, every dtype, ragged shapes, narrowed and general vectors") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 12100;
    const Shape shapes[] = {{65, 130, 0}, {200, 136, 0}, {256, 264, 0}, {1, 1000, 0}, {777, 3, 0}};
    // Dropout keeps four-element vectors (one Philox call), so N + 1 sends it to
    // the general kernel; without, N + 1 narrows the vector to one element.
    for (const KernelSpec& spec : {elementwise_chain(DType::f32, 0.25), elementwise_chain(DType::bf16, 0.0),
                                   elementwise_chain(DType::f16, 0.1)})
      for (const Shape& s : shapes)
        for (unsigned which : {inputs, outputs, both})
          for (int choice : {0, 1, 2}) same_bits(*jit, spec, s, which, choice, std::nullopt, ++seed, {91, 3});
    // A grid-stride grid (4 blocks a multiprocessor), a requested vector wider
    // than the rows take, and, for the 2-D walk (dropout and N % 4 != 0), more
    // row steps than gridDim.y holds (the kernel strides over the rest).
    const KernelSpec bf16 = elementwise_chain(DType::bf16, 0.25);
    for (int choice : {0, 1, 2}) {
      same_bits(*jit, bf16, {4096, 520, 0}, both, choice, ElementwiseTile{128, 0, 4}, ++seed, {92, 4});
      same_bits(*jit, bf16, {300, 1032, 0}, both, choice, ElementwiseTile{256, 16, 0}, ++seed, {93, 5});
    }
    same_bits(*jit, elementwise_chain(DType::f32, 0.25), {600000, 7, 0}, both, 0, ElementwiseTile{64, 0, 0}, ++seed,
              {98, 10});
    same_bits(*jit, elementwise_chain(DType::f32, 0.0), {600000, 7, 0}, both, 0, ElementwiseTile{64, 0, 0}, ++seed);
    MESSAGE(checked << " strided launches checked");
  }

  TEST_CASE("strided rows: the flat kernel's 64-bit offsets and fp64 row division") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    // Shapes whose M x ld reaches 2^30 take these (Note [Division by N]); forced
    // here on small ones. The guard clears the flag however the case ends.
    struct Index64 {
      Index64() { force_index64_for_tests(true); }
      ~Index64() { force_index64_for_tests(false); }
    } index64;
    std::uint64_t seed = 12900;
    for (const KernelSpec& spec : {elementwise_chain(DType::f32, 0.25), elementwise_chain(DType::bf16, 0.0)})
      for (const Shape& s : {Shape{200, 136, 0}, Shape{256, 264, 0}, Shape{1, 1000, 0}})
        for (unsigned which : {inputs, outputs, both}) {
          same_bits(*jit, spec, s, which, 2, std::nullopt, ++seed, {99, 11});
          Shape strided_shape = s;
          strided_shape.ld_inputs.assign(spec.graph.inputs().size(), 0);
          strided_shape.ld_inputs[0] = s.n + 136;
          const auto kernel = jit->compile(spec, strided_shape);
          CHECK(kernel->key().shape_class.find("/i64") != std::string::npos);
          CHECK(kernel->source().text.find("long long r0 = (long long)((double)e0 * p.n_inv)") != std::string::npos);
        }
  }

  TEST_CASE("strided rows: the elementwise column-sum kernel keeps its tile; only addresses change") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 12300;
    for (const KernelSpec& spec : {elementwise_chain(DType::f32, 0.25, true), elementwise_chain(DType::bf16, 0.0, true)})
      for (const Shape& s : {Shape{65, 130, 0}, Shape{1000, 264, 0}, Shape{3000, 4104, 0}})
        for (unsigned which : {inputs, outputs, both})
          for (int choice : {0, 1, 2}) same_bits(*jit, spec, s, which, choice, std::nullopt, ++seed, {94, 6});
    // 16-bit rows copied ahead through shared memory (Note [Staged column loads]).
    const KernelSpec bf16 = elementwise_chain(DType::bf16, 0.25, true);
    for (const Shape& s : {Shape{1000, 264, 0}, Shape{3000, 4104, 0}})
      for (unsigned which : {inputs, both})
        for (int choice : {1, 2})
          same_bits(*jit, bf16, s, which, choice, TileConfig{ElementwiseTile{256, 8, 0, 3}}, ++seed, {94, 6});
    MESSAGE(checked << " strided launches checked");
  }

  TEST_CASE("strided rows: row kernels in registers, a group a row, streaming") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    std::uint64_t seed = 12500;
    const TileConfig tiles[] = {RowTile{256, 0, -1, 1}, RowTile{256, 0, -1, 0}, RowTile{256, 0, 0, 1}};
    for (const KernelSpec& spec : {row_chain(DType::bf16), row_chain(DType::f32, 0.1)}) {
      for (const TileConfig& tile : tiles)
        for (const Shape& s : {Shape{65, 1000, 0}, Shape{33, 4096, 0}})
          for (unsigned which : {inputs, outputs, both})
            for (int choice : {0, 1, 2}) same_bits(*jit, spec, s, which, choice, tile, ++seed, {95, 7});
      for (int choice : {0, 1, 2}) {
        same_bits(*jit, spec, {41, 130, 0}, both, choice, RowTile{256, 0, -1, 1, 32, 1}, ++seed, {96, 8});
        same_bits(*jit, spec, {200, 2048, 0}, both, choice, std::nullopt, ++seed, {97, 9});  // the default tile
      }
    }
    // Column sums with the rows in registers.
    for (int choice : {0, 1, 2})
      same_bits(*jit, row_chain(DType::f32, 0.0, true), {300, 2048, 0}, both, choice, RowTile{512, 0, -1, 1}, ++seed);
    MESSAGE(checked << " strided launches checked");
  }

  TEST_CASE("strided rows: row kernels with a ring, a cluster, a cluster's ring and column sums (sm_90)") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    if (!hopper(*jit)) {
      MESSAGE("ring and cluster row tiles skipped: the GPU is " << jit->target() << ", not sm_90 or later");
      return;
    }
    std::uint64_t seed = 12700;
    // N + 1 narrows the vector below a ring's 16 bytes: those run without the ring.
    const TileConfig tiles[] = {RowTile{256, 0, -1, 1, 0, 1, 3}, RowTile{512, 0, -1, 1, 0, 4},
                                RowTile{512, 0, -1, 1, 0, 4, 2}};
    for (const KernelSpec& spec : {row_chain(DType::bf16, 0.1), row_chain(DType::f32)})
      for (const TileConfig& tile : tiles)
        for (const Shape& s : {Shape{65, 4096, 0}, Shape{17, 8192, 0}})
          for (unsigned which : {inputs, outputs, both})
            for (int choice : {0, 1, 2}) same_bits(*jit, spec, s, which, choice, tile, ++seed, {98, 10});
    // Column sums in a ring split over a cluster, and the default tiles (a ring
    // for the dense shape: a strided one keeps it where its lds allow).
    const KernelSpec sums = row_chain(DType::f32, 0.0, true);
    for (int choice : {0, 1, 2}) {
      same_bits(*jit, sums, {300, 4096, 0}, both, choice, RowTile{512, 0, -1, 1, 0, 2, 2}, ++seed);
      same_bits(*jit, sums, {300, 8192, 0}, both, choice, std::nullopt, ++seed);
      same_bits(*jit, row_chain(DType::bf16), {256, 16384, 0}, both, choice, std::nullopt, ++seed);
    }
    MESSAGE(checked << " strided launches checked");
  }
}
