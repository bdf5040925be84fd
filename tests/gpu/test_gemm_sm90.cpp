// GPU tier for the Hopper GEMM mainloop (wgmma + TMA, docs/hopper.md): every
// wgmma tile on f16 and bf16, all four layouts, ragged edges, K = 0, several
// outputs, dropout masks position by position, and the mma.sync fallback for
// pointers the copy engine cannot take. Runs only on an sm_90a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/device_runtime.hpp"
#include "epifuse/compare.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/reference.hpp"
#include "gemm_checks.hpp"
#include "gpu_jit.hpp"

using namespace epifuse;

namespace {

using testing::hopper_jit;

const WgmmaTile k_tiles[] = {{128, 256, 64, 4, 8}, {256, 128, 64, 4, 8},    {128, 128, 64, 6, 8},
                             {128, 64, 64, 8, 8},  {128, 128, 64, 2, 1},    {128, 256, 64, 4, 8, 2},
                             {256, 128, 64, 4, 8, 2}, {128, 128, 64, 3, 1, 2}, {128, 128, 64, 6, 8, 1, 1},
                             {128, 64, 64, 3, 1, 1, 1}, {128, 128, 64, 5, 8, 2, 1},  // these and the one before: ping-pong
                             {128, 64, 64, 8, 8, 2},  // BN 64 in a cluster: B row-major splits its k rows
                             {128, 192, 64, 4, 8}, {64, 192, 64, 5, 8, 1, 1},  // BN 192: three 64-column blocks
                             {64, 64, 64, 8, 8, 1, 1}};

// The same tiles for f32 operands through tf32: a stage row is 128 bytes of K, 32 elements.
std::vector<WgmmaTile> tf32_tiles() {
  std::vector<WgmmaTile> out(std::begin(k_tiles), std::end(k_tiles));
  for (WgmmaTile& t : out) t.bk = 32;
  return out;
}

// Tolerance and checks: tests/gemm_checks.hpp.
using testing::check;
using testing::gemm_spec;
using testing::gemm_tolerance;

// Note [Prefetched epilogue inputs]: a chain on acc with three [M,N] inputs
// (two 16-bit, the most a kernel loads ahead, and one more: f32 with `dropout`
// (the staged epilogue, which loads f32 ahead too), else bf16, loaded element
// by element) and one bf16 output. Without dropout it runs the fragment epilogue.
KernelSpec three_input_spec(Layout b, double dropout) {
  KernelSpec s;
  s.mainloop = {MainloopKind::gemm, DType::bf16, DType::bf16, Layout::row, b};
  Graph& g = s.graph;
  const Value saved = g.input("saved", DType::bf16), gate = g.input("gate", DType::f16);
  const Value extra = g.input("extra", dropout > 0 ? DType::f32 : DType::bf16);
  Value v = g.mul(g.accumulator(0), g.unary(OpKind::gelu_tanh_deriv, saved));
  if (dropout > 0) v = g.dropout(v, dropout);
  g.output("y", g.add(g.mul(v, gate), g.scale(extra, 0.5)), DType::bf16);
  return s;
}

// run_on_device with the epilogue inputs (not the operands) `shift` elements
// past 16-byte aligned addresses, so that the loads ahead take their element path.
TensorMap run_inputs_shifted(Jit& jit, const KernelSpec& spec, const Shape& shape, const TensorMap& inputs,
                             const LaunchArgs& args, const TileConfig& tile, std::size_t shift) {
  auto kernel = jit.compile(spec, shape, tile);
  const KernelSource& ks = kernel->source();
  backend::DeviceRuntime& drv = backend::device_runtime(backend::vendor_of(jit.target()));
  std::vector<backend::DeviceMemory> buffers;
  DeviceBindings bindings;
  for (std::size_t i = 0; i < ks.inputs.size(); ++i) {
    const HostTensor t = to_device_layout(spec, ks.inputs[i], inputs.at(ks.inputs[i]));
    const std::size_t off = i < 2 ? 0 : shift * size_of(t.dtype);
    buffers.emplace_back(drv, t.bytes.size() + off + 16);
    drv.copy_to_device(buffers.back().ptr() + off, t.bytes.data(), t.bytes.size());
    bindings.inputs.push_back(buffers.back().ptr() + off);
  }
  TensorMap outputs;
  for (const std::string& name : ks.outputs) {
    const Output& o = *std::find_if(spec.graph.outputs().begin(), spec.graph.outputs().end(),
                                    [&](const Output& x) { return x.name == name; });
    HostTensor t = HostTensor::zeros(o.dtype, operand_shape(spec.graph.node(o.value).broadcast, shape));
    buffers.emplace_back(drv, t.bytes.size());
    buffers.back().fill_bytes(0xFF);  // poison: NaN in every dtype
    bindings.outputs.push_back(buffers.back().ptr());
    outputs.emplace(name, std::move(t));
  }
  jit.launch(*kernel, bindings, shape, args);
  drv.synchronize();
  for (std::size_t k = 0; k < ks.outputs.size(); ++k) {
    HostTensor& t = outputs.at(ks.outputs[k]);
    drv.copy_to_host(t.bytes.data(), bindings.outputs[k], t.bytes.size());
  }
  return outputs;
}

}  // namespace

TEST_SUITE("gpu_sm90") {
  TEST_CASE("gemm sm90: every wgmma tile, f16 and bf16, all four layouts, ragged edges") {
    Jit* jit = hopper_jit();
    if (!jit) return;
    std::uint64_t seed = 9000;
    const std::vector<TileConfig> tiles(std::begin(k_tiles), std::end(k_tiles));
    for (DType dt : {DType::f16, DType::bf16})
      for (Layout a : {Layout::row, Layout::col})
        for (Layout b : {Layout::row, Layout::col}) {
          const KernelSpec spec = gemm_spec(dt, a, b);
          // One shape class for all three shapes: compile every tile once, in parallel.
          (void)jit->compile_all(spec, {256, 256, 128}, tiles);
          for (const WgmmaTile& t : k_tiles)
            // whole tiles; edges in M, N and K (K not a multiple of BK); more tiles than SMs
            for (const Shape& s : {Shape{256, 256, 128}, Shape{200, 136, 72}, Shape{1032, 1040, 200}})
              check(*jit, spec, s, ++seed, t);
        }
  }

  TEST_CASE("gemm sm90: tf32 on wgmma, every tile, ragged edges; other layouts take mma.sync") {
    Jit* jit = hopper_jit();
    if (!jit) return;
    std::uint64_t seed = 9400;
    const KernelSpec spec = gemm_spec(DType::f32, Layout::row, Layout::col, 0.0, RngMode::philox4, Broadcast::row,
                                      GemmMath::tf32);
    const std::vector<WgmmaTile> tiles = tf32_tiles();
    (void)jit->compile_all(spec, {256, 256, 128}, std::vector<TileConfig>(tiles.begin(), tiles.end()));
    for (const WgmmaTile& t : tiles)
      for (const Shape& s : {Shape{256, 256, 128}, Shape{200, 136, 72}, Shape{1032, 1040, 200}})
        check(*jit, spec, s, ++seed, t);
    // Large problems default to wgmma where A is row-major and B col-major only.
    CHECK(std::holds_alternative<WgmmaTile>(jit->compile(spec, {4096, 4096, 4096})->source().tile));
    KernelSpec other = spec;
    other.mainloop.b_layout = Layout::row;
    CHECK(std::holds_alternative<GemmTile>(jit->compile(other, {4096, 4096, 4096})->source().tile));
    CHECK_THROWS_AS(jit->compile(other, {256, 256, 64}, tiles[0]), UserError);
    CHECK_THROWS_AS(jit->compile(spec, {256, 256, 64}, WgmmaTile{128, 256, 64, 4, 8}), UserError);  // BK 64 of f32
    // Misaligned operands: the mma.sync general kernel under the wgmma key.
    check(*jit, spec, {96, 128, 64}, ++seed, tiles[2], 1);
  }

  TEST_CASE("gemm sm90: the default tiles under 64 rows (Note [Default GEMM tile]) against the reference") {
    Jit* jit = hopper_jit();
    if (!jit) return;
    std::uint64_t seed = 9600;
    // tf32: the ping-pong 64x128, most of its rows idle; N and K ragged in the second.
    const KernelSpec tf32 = gemm_spec(DType::f32, Layout::row, Layout::col, 0.0, RngMode::philox4, Broadcast::row,
                                      GemmMath::tf32);
    for (const Shape& s : {Shape{16, 4096, 1024}, Shape{40, 1040, 520}}) {
      const TileConfig tile = jit->compile(tf32, s)->source().tile;
      REQUIRE(std::holds_alternative<WgmmaTile>(tile));
      CHECK(std::get<WgmmaTile>(tile).bm == 64);
      check(*jit, tf32, s, ++seed);
    }
    // A staged 16-bit epilogue (dropout) under 64 rows at K = 4096: mma.sync's 64x64 in six stages.
    const KernelSpec dropped = gemm_spec(DType::bf16, Layout::row, Layout::col, 0.1);
    const Shape deep{40, 8192, 4096};
    const TileConfig tile = jit->compile(dropped, deep)->source().tile;
    REQUIRE(std::holds_alternative<GemmTile>(tile));
    CHECK(std::get<GemmTile>(tile).stages == 6);
    check(*jit, dropped, deep, ++seed);
  }

  TEST_CASE("gemm sm90: the few-row defaults, ping-pong 64x64 and 64x128, against the reference") {
    Jit* jit = hopper_jit();
    if (!jit) return;
    std::uint64_t seed = 9650;
    // Whole 64-row tiles that fit one wave (65 and 98 tiles): 64x64, staged
    // (dropout) and fragment epilogues; 96 rows (a partial row tile): 64x128.
    const KernelSpec dropped = gemm_spec(DType::bf16, Layout::row, Layout::col, 0.1);
    const KernelSpec plain = gemm_spec(DType::f16, Layout::row, Layout::row);
    for (const KernelSpec* spec : {&dropped, &plain})
      for (const Shape& s : {Shape{64, 4160, 4096}, Shape{128, 3136, 520}}) {
        const TileConfig tile = jit->compile(*spec, s)->source().tile;
        REQUIRE(std::holds_alternative<WgmmaTile>(tile));
        CHECK(std::get<WgmmaTile>(tile) == WgmmaTile{64, 64, 64, 8, 8, 1, 1});
        check(*jit, *spec, s, ++seed);
      }
    const Shape ragged{96, 4160, 1000};
    const TileConfig tile = jit->compile(plain, ragged)->source().tile;
    REQUIRE(std::holds_alternative<WgmmaTile>(tile));
    CHECK(std::get<WgmmaTile>(tile) == WgmmaTile{64, 128, 64, 5, 8, 1, 1});
    check(*jit, plain, ragged, ++seed);
  }

  TEST_CASE("gemm sm90: tf32 operands are rounded as the reference rounds them, on wgmma and mma.sync") {
    Jit* jit = hopper_jit();
    if (!jit) return;
    // A's elements sit 1/4, 1/2 (a tie below an even mantissa), 3/4 and 3/2 (a
    // tie below an odd one) of a tf32 ulp (2^-10) past 1, some negated; B is all
    // ones. Every partial sum is a multiple of 2^-10 below 2^13, so any order of
    // accumulation gives the same bits, and a rounding mode other than the
    // reference's (or none) changes each row's sum.
    const KernelSpec spec = gemm_spec(DType::f32, Layout::row, Layout::col, 0.0, RngMode::philox4, Broadcast::row,
                                      GemmMath::tf32);
    const Shape shape{256, 256, 64};
    TensorMap inputs = make_inputs(spec, shape, 9450);
    const double frac[] = {0.25, 0.5, 0.75, 1.5, 2.5, 0.0};
    HostTensor& a = inputs.at("a");
    for (std::int64_t i = 0; i < shape.m; ++i)
      for (std::int64_t k = 0; k < shape.k; ++k) {
        const double v = 1.0 + frac[(i + k) % 6] * std::ldexp(1.0, -10) + static_cast<double>(i % 5);
        a.set(i * shape.k + k, static_cast<float>(k % 4 == 3 ? -v : v));
      }
    HostTensor& b = inputs.at("b");
    for (std::int64_t i = 0; i < b.numel(); ++i) b.set(i, 1.0f);
    const HostTensor want = evaluate(spec, shape, inputs, {}).at("y");
    for (const std::optional<TileConfig> tile : {std::optional<TileConfig>(tf32_tiles()[2]), std::optional<TileConfig>()}) {
      const HostTensor got = run_on_device(*jit, spec, shape, inputs, {}, tile).at("y");
      std::int64_t differ = 0, first = -1;
      for (std::int64_t i = 0; i < want.numel(); ++i)
        if (got.get(i) != want.get(i)) {
          ++differ;
          if (first < 0) first = i;
        }
      INFO("tile " << (tile ? to_string(*tile) : "default") << ": first difference at " << first << ": got "
                   << (first >= 0 ? got.get(first) : 0.0f) << ", want " << (first >= 0 ? want.get(first) : 0.0f));
      CHECK_MESSAGE(differ == 0, differ << " of " << want.numel() << " outputs differ from the reference's bits");
    }
  }

  TEST_CASE("gemm sm90: the fragment epilogue's 8-byte halves where N % 8 == 4, every tile") {
    // N = 140 and 1036: rows start 8-byte but not 16-byte aligned (Note [Fragment epilogue]).
    Jit* jit = hopper_jit();
    if (!jit) return;
    std::uint64_t seed = 9400;
    for (DType dt : {DType::f16, DType::bf16}) {
      const KernelSpec spec = gemm_spec(dt, Layout::row, Layout::col);
      for (const WgmmaTile& t : k_tiles)
        for (const Shape& s : {Shape{200, 140, 72}, Shape{1032, 1036, 136}}) check(*jit, spec, s, ++seed, t);
    }
  }

  TEST_CASE("gemm sm90: K = 0, several outputs and a column-broadcast input") {
    Jit* jit = hopper_jit();
    if (!jit) return;
    check(*jit, gemm_spec(DType::f16, Layout::row, Layout::row), {128, 256, 0}, 9500, k_tiles[0]);
    KernelSpec s;
    s.mainloop = {MainloopKind::gemm, DType::bf16, DType::bf16, Layout::row, Layout::col};
    Graph& g = s.graph;
    const Value z = g.add(g.accumulator(0), g.input("rowbias", DType::f16, Broadcast::col));
    const Value r = g.add(g.scale(g.gelu_tanh(z), 0.5), g.input("residual", DType::f32));
    g.output("pre", z, DType::f32);
    g.output("y", r, DType::bf16);
    for (const WgmmaTile& t : k_tiles) check(*jit, s, {333, 264, 136}, 9501, t);
  }

  TEST_CASE("gemm sm90: [M,N] epilogue inputs loaded ahead, both epilogues, every tile, ragged and misaligned") {
    // Note [Prefetched epilogue inputs]: whole 16-byte (fragment) or quad
    // vectors where N and the input allow, else element loads; rows and
    // columns past the edge clamped. Ragged M, N % 8 == 4 and odd N (B
    // col-major), inputs one element off 16-byte alignment; both the masks and
    // the values of the dropout chain against the reference.
    Jit* jit = hopper_jit();
    if (!jit) return;
    std::uint64_t seed = 9550;
    const LaunchArgs args{0x9e3779b97f4a7c15ULL, 7};
    for (double dropout : {0.0, 0.25})
      for (Layout b : {Layout::row, Layout::col}) {
        const KernelSpec spec = three_input_spec(b, dropout);
        std::vector<Shape> shapes{{256, 256, 128}, {200, 136, 72}, {1032, 1040, 200}};
        if (b == Layout::col) shapes.insert(shapes.end(), {Shape{130, 131, 40}, Shape{333, 260, 64}});
        for (const WgmmaTile& t : k_tiles)
          for (const Shape& shape : shapes)
            for (std::size_t shift : {std::size_t{0}, std::size_t{1}}) {
              const TensorMap inputs = make_inputs(spec, shape, ++seed);
              const HostTensor want = evaluate(spec, shape, inputs, args).at("y");
              const HostTensor got = run_inputs_shifted(*jit, spec, shape, inputs, args, TileConfig{t}, shift).at("y");
              INFO("dropout " << dropout << " b " << to_string(b) << " tile " << t.str() << " shape " << shape.m << "x"
                              << shape.n << "x" << shape.k << " shift " << shift);
              // A zero on one side only, where the other side's value is past
              // atol: a value within atol of 0 can cancel to exactly 0 in one
              // side's arithmetic and not in the other's (once in 1.07 M
              // outputs here: the reference's 0, the kernel's FMA a few ulp off).
              const Tolerance tol = gemm_tolerance(DType::bf16, shape);
              std::int64_t differ = 0;
              for (std::int64_t i = 0; i < want.numel(); ++i) {
                const float w = want.get(i), g = got.get(i);
                differ += (w == 0.0f) != (g == 0.0f) && std::max(std::abs(w), std::abs(g)) > tol.atol;
              }
              CHECK_MESSAGE(differ == 0, differ << " zero positions differ");
              const Comparison c = compare(got, want, tol);
              CHECK_MESSAGE(c.ok, c.message);
            }
      }
  }

  TEST_CASE("gemm sm90: two 16-bit outputs on the fragment epilogue, every tile, ragged, with an [M,N] input") {
    // Note [Fragment epilogue]: the second output's pairs wait in registers while
    // the first leaves through the staging area. N % 8 == 4 and odd N (B col-major)
    // take the 8-byte halves and the element loads.
    Jit* jit = hopper_jit();
    if (!jit) return;
    std::uint64_t seed = 9580;
    for (Layout b : {Layout::row, Layout::col}) {
      KernelSpec s;
      s.mainloop = {MainloopKind::gemm, DType::bf16, DType::bf16, Layout::row, b};
      Graph& g = s.graph;
      const Value z = g.add(g.accumulator(0), g.input("bias", DType::bf16, Broadcast::row));
      g.output("y", g.mul(g.gelu_tanh(z), g.input("gate", DType::bf16)), DType::bf16);
      g.output("saved_z", z, DType::f16);
      REQUIRE(jit->compile(s, {256, 256, 128}, k_tiles[0])->source().text.find("FRAGMENT_EPILOGUE = true") !=
              std::string::npos);
      std::vector<Shape> shapes{{256, 256, 128}, {200, 136, 72}, {1032, 1040, 200}};
      if (b == Layout::col) shapes.insert(shapes.end(), {Shape{130, 131, 40}, Shape{333, 260, 64}});
      for (const WgmmaTile& t : k_tiles)
        for (const Shape& shape : shapes) check(*jit, s, shape, ++seed, t);
    }
  }

  TEST_CASE("gemm sm90: dropout masks equal the reference's for every wgmma tile") {
    Jit* jit = hopper_jit();
    if (!jit) return;
    const LaunchArgs args{0x123456789abcdefULL, 42};
    const std::vector<TileConfig> tiles(std::begin(k_tiles), std::end(k_tiles));
    for (RngMode rng : {RngMode::philox4, RngMode::triton})
      for (const Shape& shape : {Shape{256, 512, 64}, Shape{130, 131, 40}})
        (void)jit->compile_all(gemm_spec(DType::f16, Layout::row, Layout::col, 0.3, rng), shape, tiles);
    for (RngMode rng : {RngMode::philox4, RngMode::triton})
      for (const WgmmaTile& t : k_tiles)
        // n4 (one Philox call per four elements) and n1 (B col-major allows any N)
        for (const Shape& shape : {Shape{256, 512, 64}, Shape{130, 131, 40}}) {
          const KernelSpec spec = gemm_spec(DType::f16, Layout::row, Layout::col, 0.3, rng);
          const TensorMap inputs = make_inputs(spec, shape, 9600);
          const HostTensor want = evaluate(spec, shape, inputs, args).at("y");
          const HostTensor got = run_on_device(*jit, spec, shape, inputs, args, TileConfig{t}).at("y");
          std::int64_t differ = 0, dropped = 0;
          for (std::int64_t i = 0; i < want.numel(); ++i) {
            differ += (want.get(i) == 0.0f) != (got.get(i) == 0.0f);
            dropped += want.get(i) == 0.0f;
          }
          INFO("rng " << to_string(rng) << " tile " << t.str() << " shape " << shape.m << "x" << shape.n);
          CHECK_MESSAGE(differ == 0, differ << " of " << want.numel() << " zero positions differ");
          CHECK(dropped > 0);
          CHECK(compare(got, want, gemm_tolerance(DType::f16, shape)).ok);
        }
  }

  TEST_CASE("gemm sm90: a dropped NaN or inf is NaN on every wgmma tile, as in the reference") {
    Jit* jit = hopper_jit();
    if (!jit) return;
    for (const WgmmaTile& t : k_tiles) testing::check_dropout_specials(*jit, DType::f16, {130, 264, 40}, TileConfig{t});
    testing::check_dropout_specials(*jit, DType::bf16, {256, 512, 64}, TileConfig{k_tiles[0]}, RngMode::triton);
  }

  TEST_CASE("gemm sm90: operands the copy engine cannot take run the mma.sync general kernel") {
    Jit* jit = hopper_jit();
    if (!jit) return;
    std::uint64_t seed = 9700;
    for (Layout a : {Layout::row, Layout::col})
      for (std::size_t mis : {1u, 3u}) check(*jit, gemm_spec(DType::bf16, a, Layout::row), {96, 128, 64}, ++seed, k_tiles[2], mis);
    // K = 33: rows of A are not 16-byte strided (shape class ld1).
    check(*jit, gemm_spec(DType::f16, Layout::row, Layout::row), {96, 128, 33}, ++seed, k_tiles[2]);
  }

  TEST_CASE("gemm sm90: large f16/bf16 problems default to a wgmma tile; bad wgmma tiles are user errors") {
    Jit* jit = hopper_jit();
    if (!jit) return;
    const KernelSpec spec = gemm_spec(DType::f16, Layout::row, Layout::row);
    CHECK(std::holds_alternative<WgmmaTile>(jit->compile(spec, {4096, 4096, 4096})->source().tile));
    CHECK(std::holds_alternative<GemmTile>(jit->compile(spec, {64, 256, 128})->source().tile));
    CHECK_THROWS_AS(jit->compile(spec, {64, 64, 64}, WgmmaTile{64, 128, 64, 4, 8}), UserError);
    CHECK_THROWS_AS(jit->compile(spec, {64, 64, 64}, WgmmaTile{256, 256, 64, 4, 8}), UserError);  // registers
    CHECK_THROWS_AS(jit->compile(spec, {64, 64, 64}, WgmmaTile{128, 256, 64, 8, 8}), UserError);  // shared memory
    const KernelSpec f32 = gemm_spec(DType::f32, Layout::row, Layout::row);
    CHECK_THROWS_AS(jit->compile(f32, {64, 64, 64}, WgmmaTile{}), UserError);
  }

  TEST_CASE("gemm sm90: the wgmma kernels' SASS has HGMMA (cuobjdump, where the toolkit has it)") {
    Jit* jit = hopper_jit();
    if (!jit) return;
    if (std::system("command -v cuobjdump > /dev/null 2>&1") != 0) {
      MESSAGE("SASS check skipped: no cuobjdump on PATH");
      return;
    }
    const auto dir = std::filesystem::temp_directory_path();
    for (const WgmmaTile& t : {k_tiles[0], k_tiles[5], k_tiles[8]}) {
      const auto kernel = jit->compile(gemm_spec(DType::bf16, Layout::row, Layout::row, 0.1), {1024, 1024, 1024}, t);
      const auto cubin = dir / ("epifuse_sass_" + t.str() + ".cubin");
      const auto sass = dir / ("epifuse_sass_" + t.str() + ".txt");
      std::ofstream(cubin, std::ios::binary).write(kernel->binary().data(), static_cast<std::streamsize>(kernel->binary().size()));
      REQUIRE(std::system(("cuobjdump -sass " + cubin.string() + " > " + sass.string()).c_str()) == 0);
      std::ifstream in(sass);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      INFO("tile " << t.str());
      CHECK(text.find("HGMMA") != std::string::npos);
      CHECK(text.find("HMMA.16816") == std::string::npos);  // no mma.sync in the wgmma kernel
      std::filesystem::remove(cubin);
      std::filesystem::remove(sass);
    }
  }
}
