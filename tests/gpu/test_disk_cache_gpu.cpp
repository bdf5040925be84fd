// The tuner and the disk cache on the GPU (docs/disk-cache.md): the tuner
// times this GPU's default among its candidates; a tuned tile survives into a
// new Jit (a new process, as far as the caches can tell), and a kernel read
// from disk runs and gives the reference's numbers.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>

#include "bench/bench.hpp"
#include "epifuse/compare.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/json.hpp"
#include "epifuse/reference.hpp"
#include "../disk_cache_env.hpp"

using namespace epifuse;
using namespace epifuse::test;

TEST_SUITE("gpu") {
  TEST_CASE("tune times the default tile this GPU's compile takes untuned") {
    // The candidates are this GPU's, not the assumed device's of its target:
    // on a GPU whose defaults differ from that device's (an H200's column
    // sums), a tune would otherwise never time the default it replaces.
    if (const std::string why = gpu_unavailable_reason(); !why.empty()) {
      MESSAGE("GPU suite skipped: " << why);
      return;
    }
    KernelSpec bias_grad;
    bias_grad.graph.output("db", bias_grad.graph.col_sum(bias_grad.graph.input("dy", DType::bf16)), DType::f32);
    const KernelSpec chain =
        load_spec(std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples/chains/bias_gelu_dropout_add.json");
    Jit jit;  // the suite runs with the disk cache off: compile() gives the untuned default
    for (const KernelSpec* spec : {static_cast<const KernelSpec*>(&bias_grad), &chain})
      for (const Shape& shape : {Shape{8192, 2048, 0}, Shape{2048, 4096, 0}, Shape{1024, 1024, 0}}) {
        const TileConfig untuned = jit.compile(*spec, shape)->source().tile;
        INFO("shape " << shape.m << "x" << shape.n << " default " << to_string(untuned));
        const std::vector<TileConfig> candidates = jit.tile_candidates(*spec, shape);
        CHECK(std::find(candidates.begin(), candidates.end(), untuned) != candidates.end());
      }
    const Shape shape{1024, 1024, 0};
    const TileConfig untuned = jit.compile(bias_grad, shape)->source().tile;
    const TuneReport r = tune_on_random_data(jit, bias_grad, shape, 5);
    CHECK(std::any_of(r.result.all.begin(), r.result.all.end(),
                      [&](const Jit::TunedCandidate& c) { return c.tile == untuned; }));
  }

  TEST_CASE("disk cache: a tuned tile and its kernel survive into a new Jit, and the kernel is right") {
    if (const std::string why = gpu_unavailable_reason(); !why.empty()) {
      MESSAGE("GPU suite skipped: " << why);
      return;
    }
    TempDir dir("epifuse-gpu-disk");
    DiskCacheOn on(dir.path);
    const KernelSpec spec =
        load_spec(std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples/chains/bias_gelu_dropout_add.json");
    const Shape shape{257, 1000, 0};
    TileConfig chosen;
    {
      Jit jit;
      const TuneReport r = tune_on_random_data(
          jit, spec, shape, 3, {}, {ElementwiseTile{128, 0, 0}, ElementwiseTile{512, 0, 2}, ElementwiseTile{256, 0, 4}});
      chosen = r.result.tile;
      CHECK(jit.stats().disk_writes >= 4);  // three kernels and the choice
    }
    Jit jit;
    const std::optional<TileConfig> tuned = jit.tuned_tile(spec, shape);
    REQUIRE(tuned);
    CHECK(*tuned == chosen);
    const TensorMap inputs = make_inputs(spec, shape, 11);
    const LaunchArgs args{1234, 8};
    const TensorMap got = run_on_device(jit, spec, shape, inputs, args);
    CHECK(jit.compile(spec, shape)->from_disk());
    const TensorMap want = evaluate(spec, shape, inputs, args);
    for (const Output& o : spec.graph.outputs())
      CHECK(compare(got.at(o.name), want.at(o.name), tolerance_for(o.dtype, spec.precision)).ok);
  }
}
