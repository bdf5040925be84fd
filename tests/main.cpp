// The doctest runner.
//
// A test that cannot run here is reported as skipped, never as passed. Test
// cases that need hardware or a toolkit name it by their suite, and the runner
// probes once what this machine has and excludes the suites it lacks, with one
// line saying which and why; doctest counts excluded cases as skipped:
//   gpu         any GPU epifuse can use (CUDA driver + NVRTC, or HIP + hipRTC)
//   gpu_nvidia  an NVIDIA GPU (the CUDA driver tests, NVIDIA-only refusals)
//   gpu_sm90    an sm_90a GPU (wgmma kernels)
//   nvrtc       NVRTC, no GPU needed (the NVIDIA compile tier)
//   hiprtc      hipRTC, no GPU needed (the AMD compile tier)
// A case put in one of these suites keeps its own early return as a guard.
//
// The disk cache is off for the suite (EPIFUSE_CACHE=0): tests count compiles
// and must not find records an earlier run left in ~/.cache. The disk-cache
// tests name their own folders. `epifuse_tests --cache-race-worker ...` is one
// process of the disk-cache race test (tests/compile/test_disk_cache_jit.cpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "backend/hiprtc.hpp"
#include "backend/nvrtc.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"

namespace epifuse::test {
int cache_race_worker(int argc, char** argv);

namespace {

struct Skip {
  const char* suite;
  std::string why;
};

// What this machine lacks, suite by suite.
std::vector<Skip> unavailable_suites() {
  std::vector<Skip> skips;
  std::string gpu_why = gpu_unavailable_reason();
  std::string target;
  if (gpu_why.empty()) {
    try {
      target = Jit().target();
    } catch (const Error& e) {
      gpu_why = e.what();
    }
  }
  if (!gpu_why.empty()) {
    for (const char* suite : {"gpu", "gpu_nvidia", "gpu_sm90"}) skips.push_back({suite, "no GPU: " + gpu_why});
  } else {
    if (!target.starts_with("sm_")) skips.push_back({"gpu_nvidia", "the GPU is " + target + ", not NVIDIA"});
    if (target != "sm_90a") skips.push_back({"gpu_sm90", "the GPU is " + target + ", not sm_90a"});
  }
  if (!backend::nvrtc_or_null()) skips.push_back({"nvrtc", "no NVRTC: " + backend::nvrtc_unavailable_reason()});
  if (!backend::hiprtc_or_null()) skips.push_back({"hiprtc", "no hipRTC: " + backend::hiprtc_unavailable_reason()});
  return skips;
}

}  // namespace
}  // namespace epifuse::test

int main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "--cache-race-worker")
    return epifuse::test::cache_race_worker(argc - 2, argv + 2);
  ::setenv("EPIFUSE_CACHE", "0", 1);
  doctest::Context context(argc, argv);
  // A listing runs nothing, so it names every case, those this machine cannot
  // run included (tools/check_gpu_groups.sh lists the GPU tier without a GPU).
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    for (std::string_view listing : {"-ltc", "--list-test-cases", "-lts", "--list-test-suites", "-dt-ltc",
                                     "--dt-list-test-cases", "-dt-lts", "--dt-list-test-suites"})
      if (a == listing || (a.starts_with(listing) && a.size() > listing.size() && a[listing.size()] == '='))
        return context.run();
  }
  // One line per reason: "no GPU" covers three suites.
  const auto skips = epifuse::test::unavailable_suites();
  for (std::size_t i = 0; i < skips.size(); ++i) {
    context.addFilter("test-suite-exclude", skips[i].suite);
    if (i > 0 && skips[i].why == skips[i - 1].why) continue;
    std::string suites = skips[i].suite;
    for (std::size_t j = i + 1; j < skips.size() && skips[j].why == skips[i].why; ++j)
      suites += std::string(", ") + skips[j].suite;
    std::cout << "epifuse_tests: skipped, test suites " << suites << ": " << skips[i].why << "\n";
  }
  return context.run();
}
