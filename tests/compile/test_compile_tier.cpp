// Compile tier (docs/design.md §8): every example chain, and a set of specs covering
// every op, dtype and broadcast kind, is emitted and compiled by NVRTC for
// sm_80 and sm_90a with no GPU. Skips with a visible line without NVRTC.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <filesystem>

#include "backend/nvrtc.hpp"
#include "backend/target.hpp"
#include "epifuse/autodiff.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/json.hpp"
#include "test_specs.hpp"

using namespace epifuse;

namespace {
bool have_nvrtc() {
  if (backend::nvrtc_or_null()) return true;
  MESSAGE("compile tier skipped: " << backend::nvrtc_unavailable_reason());
  return false;
}
}  // namespace

TEST_SUITE("compile") {
  TEST_CASE("every example chain compiles for every target epifuse accepts" * doctest::test_suite("nvrtc")) {
    if (!have_nvrtc()) return;
    // Accepted: every real architecture from sm_80 on that this NVRTC lists,
    // and the architecture-specific 'a' form of each from sm_90 on.
    std::vector<std::string> targets;
    for (int arch : backend::nvrtc().supported_archs()) {
      if (arch < 80) continue;
      targets.push_back(fmt::format("sm_{}", arch));
      if (arch >= 90) targets.push_back(fmt::format("sm_{}a", arch));
    }
    CHECK(targets.size() >= 4);
    const std::filesystem::path dir = std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples/chains";
    int compiled = 0;
    for (const std::string& target : targets) {
      Jit jit(target);
      for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        if (entry.path().extension() != ".json") continue;
        KernelSpec spec = load_spec(entry.path());
        const Shape shape = spec.default_shape.value_or(Shape{33, 67, 0});
        INFO(entry.path().filename().string() << " for " << target);
        auto kernel = jit.compile(spec, shape);
        CHECK(kernel->binary().size() > 4);
        CHECK(kernel->binary()[0] == 0x7f);  // ELF
        ++compiled;
      }
      CHECK(jit.stats().compiles == jit.stats().entries);
    }
    MESSAGE("compiled " << compiled << " example kernels for " << targets.size() << " targets");
    CHECK(compiled >= 6 * static_cast<int>(targets.size()));
  }

  TEST_CASE("staged column-sum tiles compile for every target epifuse accepts" * doctest::test_suite("nvrtc")) {
    // Note [Staged column loads]: cp.async from sm_80 on; the default tile
    // takes stages only on GPUs it measures, so a compile tier without a GPU
    // asks for them.
    if (!have_nvrtc()) return;
    const KernelSpec backward = grad(test_specs::bias_gelu_dropout_add(DType::bf16)).backward;
    int compiled = 0;
    for (int arch : backend::nvrtc().supported_archs()) {
      if (arch < 80) continue;
      Jit jit(fmt::format("sm_{}{}", arch, arch >= 90 ? "a" : ""));
      for (const ElementwiseTile& t : {ElementwiseTile{512, 8, 1, 2}, ElementwiseTile{256, 8, 0, 3}}) {
        INFO(jit.target() << " " << t.str());
        auto kernel = jit.compile(backward, {4096, 1024, 0}, TileConfig{t});
        CHECK(kernel->source().text.find("ef_stage16(") != std::string::npos);
        CHECK(kernel->binary().size() > 4);
        ++compiled;
      }
    }
    CHECK(compiled >= 8);
  }

  TEST_CASE("wgmma kernels compile for sm_90a with every layout, dtype and tile candidate" * doctest::test_suite("nvrtc")) {
    if (!have_nvrtc()) return;
    Jit jit("sm_90a");
    const Shape shape{2048, 2048, 1024};
    for (DType dt : {DType::f16, DType::bf16})
      for (Layout a : {Layout::row, Layout::col})
        for (Layout b : {Layout::row, Layout::col}) {
          KernelSpec s;
          s.mainloop = {MainloopKind::gemm, dt, dt, a, b};
          Graph& g = s.graph;
          g.output("y", g.dropout(g.relu(g.add(g.accumulator(0), g.input("bias", dt, Broadcast::row))), 0.1), dt);
          for (const TileConfig& t : tile_candidates(s, shape, jit.target()))
            if (std::holds_alternative<WgmmaTile>(t)) CHECK_NOTHROW(jit.compile(s, shape, t));
        }
    // tf32 (A row-major, B col-major).
    KernelSpec tf;
    tf.mainloop = {MainloopKind::gemm, DType::f32, DType::f32, Layout::row, Layout::col, GemmMath::tf32};
    tf.graph.output("y", tf.graph.gelu_tanh(tf.graph.add(tf.graph.accumulator(0), tf.graph.input("bias", DType::f32, Broadcast::row))), DType::f32);
    for (const TileConfig& t : tile_candidates(tf, shape, jit.target())) {
      REQUIRE(std::holds_alternative<WgmmaTile>(t));
      CHECK_NOTHROW(jit.compile(tf, shape, t));
    }
    KernelSpec s;
    s.mainloop = {MainloopKind::gemm, DType::f16, DType::f16, Layout::row, Layout::row};
    s.graph.output("y", s.graph.accumulator(0), DType::f16);
    CHECK_THROWS_AS(Jit("sm_80").compile(s, shape, WgmmaTile{}), UserError);
  }

  TEST_CASE("targets before sm_80 are refused when they are named, with the supported form") {
    for (const char* old : {"sm_75", "sm_70", "sm_61"})
      CHECK_THROWS_WITH_AS(backend::parse_target(old), doctest::Contains("sm_80 and newer"), UserError);
    CHECK(backend::parse_target("sm_80").sm() == 80);
    CHECK(backend::parse_target("sm_120a").arch_specific);
  }

  TEST_CASE("op, dtype and broadcast coverage specs compile for sm_90a" * doctest::test_suite("nvrtc")) {
    if (!have_nvrtc()) return;
    Jit jit("sm_90a");
    for (const auto& [name, spec] : test_specs::coverage()) {
      INFO(name);
      for (const Shape& shape : {Shape{7, 13, 0}, Shape{16, 64, 0}}) CHECK_NOTHROW(jit.compile(spec, shape));
    }
  }

  TEST_CASE("the cache compiles a key once and counts hits" * doctest::test_suite("nvrtc")) {
    if (!have_nvrtc()) return;
    Jit jit("sm_90a");
    const KernelSpec spec = test_specs::bias_gelu_dropout_add(DType::f32);
    auto a = jit.compile(spec, {64, 128, 0});
    auto b = jit.compile(spec, {128, 256, 0});  // same shape class: same binary
    CHECK(a.get() == b.get());
    auto c = jit.compile(spec, {128, 255, 0});  // N % 4 != 0: another class
    CHECK(a.get() != c.get());
    const auto stats = jit.stats();
    CHECK(stats.compiles == 2);
    CHECK(stats.hits == 1);
    CHECK(stats.misses == 2);
    MESSAGE("NVRTC cold compile of bias_gelu_dropout_add: " << a->compile_ms() << " ms");
  }
}

TEST_SUITE("compile") {
  TEST_CASE("the cache hit path (key from the spec + lookup) takes microseconds" * doctest::test_suite("nvrtc")) {
    if (!have_nvrtc()) return;
    Jit jit("sm_90a");
    const KernelSpec spec = test_specs::bias_gelu_dropout_add(DType::bf16);
    const Shape shape{16384, 4096, 0};
    const TileConfig tile = ElementwiseTile{256, 8, 0};
    auto kernel = jit.compile(spec, shape, tile);
    constexpr int n = 20000;
    const auto t0 = std::chrono::steady_clock::now();
    int same = 0;
    for (int i = 0; i < n; ++i) same += jit.compile(spec, shape, tile).get() == kernel.get();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
    CHECK(same == n);
    MESSAGE("cache hit path: " << us << " us per lookup (key built from the spec each time)");
    CHECK(us < 50.0);  // generous: CI machines are shared; the measured figure is in docs/perf/host.md
  }
}

TEST_SUITE("compile") {
  TEST_CASE("a key is compiled once when many threads ask at the same moment" * doctest::test_suite("nvrtc")) {
    if (!have_nvrtc()) return;
    Jit jit("sm_90a");
    const KernelSpec spec = test_specs::add_mul(DType::bf16, 0.75);
    constexpr int k_threads = 8;
    std::vector<std::shared_ptr<const CompiledKernel>> got(k_threads);
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < k_threads; ++t)
      threads.emplace_back([&, t] {
        ++ready;
        while (ready < k_threads) std::this_thread::yield();  // start together
        got[t] = jit.compile(spec, {64, 64, 0});
      });
    for (auto& th : threads) th.join();
    for (const auto& k : got) CHECK(k.get() == got[0].get());
    const CacheStats s = jit.stats();
    CHECK(s.compiles == 1);
    CHECK(s.misses == 1);
    CHECK(s.hits == k_threads - 1);
  }

  TEST_CASE("a variant source of a kernel compiles when it keeps the kernel and its parameters" * doctest::test_suite("nvrtc")) {
    if (!have_nvrtc()) return;
    Jit jit("sm_90a");
    const KernelSpec spec = load_spec(std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples/chains/gemm_bias_relu.json");
    const Shape shape{256, 512, 128};
    const auto kernel = jit.compile(spec, shape);
    const std::string& text = kernel->source().text;
    const std::string& name = kernel->source().name;
    // A variant that changes the code but not the kernel's name or parameters.
    const std::string edited = "// an edited version\n" + text;
    const auto variant = jit.compile_variant(*kernel, edited);
    CHECK(variant->source().text == edited);
    CHECK(variant->source().name == name);
    CHECK(variant->binary().size() > 4);
    CHECK(variant->key().options.find("variant") != std::string::npos);
    CHECK(jit.stats().compiles == 1);  // variants are not cached
    // Another kernel's source, or other parameters, are refused before NVRTC runs.
    std::string renamed = text;
    for (std::size_t at = renamed.find(name); at != std::string::npos; at = renamed.find(name, at + 1))
      renamed.replace(at, name.size(), name + "x");
    CHECK_THROWS_WITH_AS(jit.compile_variant(*kernel, renamed), doctest::Contains("defines no kernel"), UserError);
    std::string params = text;
    const std::size_t open = params.find(name + "_params {");
    REQUIRE(open != std::string::npos);
    params.insert(params.find('{', open) + 1, "\n  int extra;");
    CHECK_THROWS_WITH_AS(jit.compile_variant(*kernel, params), doctest::Contains("differs from this build"),
                         UserError);
  }
}
