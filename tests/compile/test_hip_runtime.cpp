// The HIP runtime (backend/hip_runtime.hpp) and AMD targets through the Jit
// (docs/amd.md, "Runtime"). No AMD GPU is needed or expected: loading the
// runtime must fail with the reason, and the Jit must compile, key and cache
// AMD kernels like NVIDIA ones. The compiles need hipRTC and the epifuse
// executable beside this test binary (the hipRTC child), as test_hiprtc.cpp's do.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "backend/device_runtime.hpp"
#include "backend/dynlib.hpp"
#include "backend/hip_runtime.hpp"
#include "backend/hiprtc.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/json.hpp"
#include "../disk_cache_env.hpp"

using namespace epifuse;
using namespace epifuse::backend;

namespace {

bool have_hiprtc() {
  if (hiprtc_or_null()) return true;
  MESSAGE("AMD Jit tests skipped: " << hiprtc_unavailable_reason());
  return false;
}

KernelSpec add_mul() { return load_spec(std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples/chains/add_mul.json"); }

bool is_elf(const std::vector<char>& code) {
  return code.size() > 4 && code[0] == 0x7f && code[1] == 'E' && code[2] == 'L' && code[3] == 'F';
}

constexpr Shape k_shape{33, 67, 0};

}  // namespace

TEST_SUITE("compile") {
  TEST_CASE("HIP runtime without an AMD GPU: a RuntimeError saying why (no library, or no device)") {
    if (HipRuntime* hip = hip_runtime_or_null()) {
      MESSAGE("an AMD GPU is present: " << hip->amd_device(0).common.name << " (" << hip->amd_device(0).arch_name << ")");
      CHECK(hip->amd_device(0).arch_name.starts_with("gfx"));
      return;
    }
    std::string message;
    try {
      (void)HipRuntime::load();
      FAIL("HipRuntime::load succeeded where hip_runtime_or_null() is null");
    } catch (const RuntimeError& e) {
      message = e.what();
    }
    MESSAGE(message);
    const bool library = DynLib::open_first({"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"}).has_value();
    if (library) {
      // Debian 12's ROCm 5.2.3 without a GPU: hipInit says hipErrorInvalidDevice, hipGetDeviceCount hipErrorNoDevice.
      CHECK(message.find("no AMD GPU present") != std::string::npos);
      CHECK(message.find("hipGetDeviceCount: hipErrorNoDevice") != std::string::npos);
      CHECK(message.find("HIP runtime ") != std::string::npos);     // the version
      CHECK(message.find("libamdhip64.so") != std::string::npos);  // the library's path
    } else {
      CHECK(message.find("no HIP runtime (libamdhip64.so not found") != std::string::npos);
    }
    CHECK(message.find("use --device cpu") != std::string::npos);
    // The process-wide runtime says the same, and the seam refuses with it.
    CHECK(hip_runtime_unavailable_reason() == message);
    CHECK(device_runtime_or_null(Vendor::amd) == nullptr);
    CHECK_THROWS_WITH_AS(device_runtime(Vendor::amd), doctest::Contains(message.c_str()), RuntimeError);
    if (!device_runtime_or_null(Vendor::nvidia))  // no GPU at all: the reason names both vendors
      CHECK(gpu_unavailable_reason().find(message) != std::string::npos);
  }

  TEST_CASE("AMD targets: vendor by name, and which code runs on which device") {
    CHECK(vendor_of("gfx90a:xnack-") == Vendor::amd);
    CHECK(vendor_of("sm_90a") == Vendor::nvidia);
    const AmdTarget device = parse_amd_target("gfx90a:sramecc+:xnack-");
    CHECK(runs_on(parse_amd_target("gfx90a"), device));
    CHECK(runs_on(parse_amd_target("gfx90a:xnack-"), device));
    CHECK_FALSE(runs_on(parse_amd_target("gfx90a:xnack+"), device));
    CHECK_FALSE(runs_on(parse_amd_target("gfx942"), device));
  }

  TEST_CASE("Jit(gfx90a): compiled by hipRTC, keyed like NVIDIA kernels, a memory hit, then a disk hit in a new Jit" * doctest::test_suite("hiprtc")) {
    if (!have_hiprtc()) return;
    const KernelSpec spec = add_mul();
    test::TempDir dir("epifuse-amd-jit");
    test::DiskCacheOn disk(dir.path);

    Jit first("gfx90a");
    CHECK(first.target() == "gfx90a");
    const auto kernel = first.compile(spec, k_shape);
    CHECK(is_elf(kernel->binary()));
    CHECK_FALSE(kernel->from_disk());
    const CacheKey& key = kernel->key();
    CHECK(key.target == "gfx90a");
    CHECK(key.compiler == hiprtc().version_string());
    CHECK(key.options == "-O3 --offload-arch=gfx90a");
    CHECK(first.stats().misses == 1);
    CHECK(first.stats().compiles == 1);
    CHECK(first.stats().disk_writes == 1);

    const auto again = first.compile(spec, k_shape);  // the same key: the memory cache's
    CHECK(again == kernel);
    CHECK(first.stats().hits == 1);
    CHECK(first.stats().compiles == 1);

    Jit second("gfx90a");  // a new process, as far as the disk cache can tell
    const auto from_disk = second.compile(spec, k_shape);
    CHECK(from_disk->from_disk());
    CHECK(from_disk->binary() == kernel->binary());
    CHECK(from_disk->key() == key);
    CHECK(second.stats().disk_hits == 1);
    CHECK(second.stats().compiles == 1);  // a disk hit still counts as the build of a memory entry

    // The feature suffix is part of the key: the gfx90a record is not an xnack- one.
    Jit xnack("gfx90a:xnack-");
    CHECK(xnack.key(spec, k_shape) != first.key(spec, k_shape));
    CHECK(xnack.key(spec, k_shape).target == "gfx90a:xnack-");
    const auto other = xnack.compile(spec, k_shape);
    CHECK_FALSE(other->from_disk());
    CHECK(xnack.stats().disk_misses == 1);
    CHECK(is_elf(other->binary()));

    // Without an AMD GPU a launch is refused by name, never attempted.
    if (!device_runtime_or_null(Vendor::amd))
      CHECK_THROWS_WITH_AS(first.launch(*kernel, {}, k_shape, {}), doctest::Contains("cannot run here"), UserError);
  }

  TEST_CASE("Jit(gfx90a): a column-sum tile with stages compiles the register loop (Note [Staged column loads])" *
            doctest::test_suite("hiprtc")) {
    if (!have_hiprtc()) return;
    // bf16 dx = dy * h and its column sum: the kernel's source holds both
    // loops, and the preprocessor keeps HIP on the register one.
    KernelSpec spec;
    Graph& g = spec.graph;
    const Value dx = g.mul(g.input("dy", DType::bf16), g.input("h", DType::bf16));
    g.output("dx", dx, DType::bf16);
    g.output("db", g.col_sum(dx), DType::f32);
    Jit jit("gfx90a");
    const auto kernel = jit.compile(spec, {512, 1024, 0}, TileConfig{ElementwiseTile{256, 8, 0, 3}});
    CHECK(std::get<ElementwiseTile>(kernel->source().tile).stages == 3);
    CHECK(kernel->source().text.find("#if !EF_HIP && __CUDA_ARCH__ >= 800") != std::string::npos);
    CHECK(is_elf(kernel->binary()));
  }

  TEST_CASE("Jit on AMD targets ROCm 5's hipRTC aborts on: the documented UserError, never a crash" * doctest::test_suite("hiprtc")) {
    if (!have_hiprtc()) return;
    if (hiprtc().rocm_major() != 5) {
      MESSAGE("hipRTC from ROCm " << hiprtc().rocm_major() << ": no known-bad targets");
      return;
    }
    for (const char* target : {"gfx1100", "gfx942"}) {
      Jit jit(target);
      CHECK_THROWS_WITH_AS(jit.compile(add_mul(), k_shape), doctest::Contains("ROCm 5's hipRTC aborts the process"),
                           UserError);
    }
  }
}
