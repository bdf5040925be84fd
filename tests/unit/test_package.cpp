// What an installed library does outside its source and build trees
// (docs/packaging.md): where it finds its hipRTC worker.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "backend/hiprtc.hpp"
#include "epifuse/errors.hpp"
#include "../disk_cache_env.hpp"

using namespace epifuse;
using epifuse::test::TempDir;
namespace fs = std::filesystem;

namespace {
void touch(const fs::path& p) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << "#!/bin/sh\n";
}
}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("hipRTC worker lookup: the CLI itself, beside, ../bin, then the configured install bindir") {
    TempDir tmp("epifuse-worker");
    const fs::path prefix = tmp.path / "prefix", elsewhere = tmp.path / "configured" / "bin";

    // Nothing there: the message names every path tried and the variable.
    try {
      (void)backend::find_hiprtc_worker(prefix / "libexec" / "app", elsewhere);
      FAIL("found a worker in an empty folder");
    } catch (const RuntimeError& e) {
      const std::string m = e.what();
      CHECK(m.find((prefix / "libexec" / "epifuse").string()) != std::string::npos);
      CHECK(m.find((prefix / "bin" / "epifuse").string()) != std::string::npos);
      CHECK(m.find((elsewhere / "epifuse").string()) != std::string::npos);
      CHECK(m.find("EPIFUSE_HIPRTC_WORKER") != std::string::npos);
    }

    // Only the configured install bindir has it: the last fallback.
    touch(elsewhere / "epifuse");
    CHECK(backend::find_hiprtc_worker(prefix / "libexec" / "app", elsewhere) == elsewhere / "epifuse");
    // A program installed under the CLI's prefix finds bin/epifuse from libexec/.
    touch(prefix / "bin" / "epifuse");
    CHECK(backend::find_hiprtc_worker(prefix / "libexec" / "app", elsewhere) == prefix / "bin" / "epifuse");
    // Beside the program wins over ../bin.
    touch(prefix / "libexec" / "epifuse");
    CHECK(backend::find_hiprtc_worker(prefix / "libexec" / "app", elsewhere) == prefix / "libexec" / "epifuse");
    // The CLI is its own worker.
    CHECK(backend::find_hiprtc_worker(prefix / "bin" / "epifuse", elsewhere) == prefix / "bin" / "epifuse");
    // No configured bindir (empty): not tried.
    const std::string beside = (tmp.path / "x" / "epifuse").string();
    CHECK_THROWS_WITH_AS(backend::find_hiprtc_worker(tmp.path / "x" / "app", ""), doctest::Contains(beside.c_str()),
                         RuntimeError);
  }
}
