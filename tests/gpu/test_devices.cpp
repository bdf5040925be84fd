// GPU tier for where a kernel runs and where its seeds come from: seeds and
// offsets read on the device (LaunchArgs::rng_state, Note [Seeds on the
// device]) draw the masks of the same values given at launch, in every family
// that draws; a Jit for another device launches there and leaves the calling
// thread's current device as it was (Note [Device scopes]); a kernel is
// launched only by the Jit of the device it was loaded on.
#include <doctest/doctest.h>

#include <array>
#include <filesystem>
#include <string>

#include "backend/cuda_driver.hpp"
#include "backend/device_runtime.hpp"
#include "epifuse/compare.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/json.hpp"
#include "epifuse/reference.hpp"
#include "gpu_jit.hpp"

using namespace epifuse;

namespace {

using testing::gpu_jit;

KernelSpec example(const std::string& name) {
  return load_spec(std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples" / "chains" / (name + ".json"));
}

Shape shape_of(const KernelSpec& spec, std::int64_t m, std::int64_t n) {
  return spec.mainloop.kind == MainloopKind::elementwise ? Shape{m, n, 0} : Shape{m, n, 96};
}

void check_same_bits(const TensorMap& a, const TensorMap& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO("output " << name);
    CHECK(t.bytes == b.at(name).bytes);
  }
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("seeds read on the device draw the masks of the same seed and offset given at launch") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    backend::DeviceRuntime& drv = backend::device_runtime(backend::vendor_of(jit->target()));
    const std::uint64_t seed = 0x0123456789abcdefULL, offset = 0x10000000bULL, extra = 5;
    // The state holds the seed and offset - extra; the launch adds extra.
    const std::array<std::uint64_t, 2> state{seed, offset - extra};
    backend::DeviceMemory buffer(drv, sizeof state);
    drv.copy_to_device(buffer.ptr(), state.data(), sizeof state);
    // Every family and path that draws: the flat and the column-sum
    // elementwise kernels, the row family, and a GEMM epilogue (wgmma on
    // Hopper, mma.sync elsewhere); shapes with ragged edges.
    for (const char* name : {"bias_gelu_dropout_add", "bias_gelu_dropout_add_backward", "scaled_masked_softmax_dropout",
                             "gemm_bias_relu_dropout"}) {
      const KernelSpec spec = example(name);
      for (const auto [m, n] : {std::pair<std::int64_t, std::int64_t>{67, 200}, {256, 1024}}) {
        INFO(name << " " << m << "x" << n);
        const Shape shape = shape_of(spec, m, n);
        const TensorMap inputs = make_inputs(spec, shape, 11);
        const TensorMap host = run_on_device(*jit, spec, shape, inputs, LaunchArgs{seed, offset, 0});
        // The launch's seed is not used: a wrong one would change every mask.
        const TensorMap device = run_on_device(*jit, spec, shape, inputs, LaunchArgs{~seed, extra, buffer.ptr()});
        check_same_bits(host, device);
        // And both are the reference's masks, seen in the full outputs (a column
        // sum's order of addition differs from the reference's; the elementwise
        // tier bounds that error).
        const TensorMap want = evaluate(spec, shape, inputs, LaunchArgs{seed, offset});
        for (const Output& o : spec.graph.outputs()) {
          if (device.at(o.name).numel() != shape.m * shape.n) continue;
          const Comparison c = compare(device.at(o.name), want.at(o.name), tolerance_for(o.dtype, spec.precision));
          CHECK_MESSAGE(c.ok, c.message);
        }
      }
    }
  }

  TEST_CASE("a Jit runs on its own device and leaves the current one as it was") {
    Jit* jit = gpu_jit();
    if (!jit) return;
    backend::CudaDriver* cu = backend::cuda_or_null();
    if (!cu) return;
    CHECK_THROWS_AS(Jit("", cu->device_count()), UserError);
    CHECK_THROWS_AS(Jit("", -1), UserError);
    if (cu->device_count() < 2) {
      MESSAGE("second-device cases skipped: " << cu->device_count() << " device(s)");
      return;
    }
    const int last = cu->device_count() - 1;
    Jit other("", last);
    CHECK(other.device() == last);
    const KernelSpec spec = example("bias_gelu_dropout_add");
    const Shape shape{130, 520, 0};
    const TensorMap inputs = make_inputs(spec, shape, 5);
    cu->use_device(0);
    const TensorMap got = run_on_device(other, spec, shape, inputs, LaunchArgs{3, 4});
    const TensorMap want = evaluate(spec, shape, inputs, LaunchArgs{3, 4});
    for (const Output& o : spec.graph.outputs()) {
      const Comparison c = compare(got.at(o.name), want.at(o.name), tolerance_for(o.dtype, spec.precision));
      CHECK_MESSAGE(c.ok, c.message);
    }
    // Device 0 is still the thread's: a kernel of device 0's Jit runs as before.
    check_same_bits(run_on_device(*jit, spec, shape, inputs, LaunchArgs{3, 4}), got);
    // A kernel loaded on one device is refused by another device's Jit.
    const auto kernel = jit->compile(spec, shape);
    DeviceBindings none;
    CHECK_THROWS_WITH_AS(other.launch(*kernel, none, shape, LaunchArgs{}), doctest::Contains("is loaded on device 0"),
                         UserError);
  }
}
