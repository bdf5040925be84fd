// The doctest runner. GPU tests live in the test suite "gpu" and skip with a
// visible line when no GPU is present.
//
// The disk cache is off for the suite (EPIFUSE_CACHE=0): tests count compiles
// and must not find records an earlier run left in ~/.cache. The disk-cache
// tests name their own folders. `epifuse_tests --cache-race-worker ...` is one
// process of the disk-cache race test (tests/compile/test_disk_cache_race.cpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <string_view>

namespace epifuse::test {
int cache_race_worker(int argc, char** argv);
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "--cache-race-worker")
    return epifuse::test::cache_race_worker(argc - 2, argv + 2);
  ::setenv("EPIFUSE_CACHE", "0", 1);
  doctest::Context context(argc, argv);
  return context.run();
}
