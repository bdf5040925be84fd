// What an installed library does outside its source and build trees
// (docs/packaging.md): where it finds its hipRTC worker, and templates read from
// EPIFUSE_TEMPLATE_DIR instead of the embedded copies.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "backend/hiprtc.hpp"
#include "codegen/template_engine.hpp"
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

  TEST_CASE("EPIFUSE_TEMPLATE_DIR: read_templates takes every embedded template's text from the folder") {
    TempDir tmp("epifuse-templates");
    // A folder missing a template is a UserError naming it.
    CHECK_THROWS_WITH_AS(read_templates(tmp.path), doctest::Contains("cannot read"), UserError);

    // A copy of every template, one of them edited: its text comes back, the rest as embedded.
    for (const auto& [name, text] : embedded_templates()) {
      fs::create_directories((tmp.path / name).parent_path());
      std::ofstream(tmp.path / name, std::ios::binary) << text;
    }
    std::ofstream(tmp.path / "elementwise.cu.in", std::ios::app) << "// edited\n";
    const auto texts = read_templates(tmp.path);
    REQUIRE(texts.size() == embedded_templates().size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
      CHECK(texts[i].first == embedded_templates()[i].first);
      if (texts[i].first == "elementwise.cu.in")
        CHECK(texts[i].second == std::string(embedded_templates()[i].second) + "// edited\n");
      else
        CHECK(texts[i].second == embedded_templates()[i].second);
    }
  }
}
