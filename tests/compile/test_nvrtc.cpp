// NVRTC backend: targets, cubins, compile errors. Needs libnvrtc but no GPU; skips
// with a visible line when NVRTC is absent.
#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "backend/dynlib.hpp"
#include "backend/nvrtc.hpp"
#include "backend/target.hpp"
#include "epifuse/errors.hpp"

using namespace epifuse;
using namespace epifuse::backend;

namespace {

// Exercises both 16-bit headers, so that -I<cuda include dir> is known to work.
const char* const kHalfKernel = R"(#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void half_to_bf16_scaled(const __half* x, __nv_bfloat16* y, float s,
                                               long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2bfloat16(__half2float(x[i]) * s);
}
)";

bool is_elf(const std::vector<char>& bin) {
  return bin.size() > 4 && bin[0] == 0x7f && bin[1] == 'E' && bin[2] == 'L' && bin[3] == 'F';
}

// Returns the NVRTC to test with, or nullptr after printing why the tier is skipped.
Nvrtc* nvrtc_or_skip() {
  Nvrtc* n = nvrtc_or_null();
  if (!n) MESSAGE("compile tier skipped: " << nvrtc_unavailable_reason());
  return n;
}

bool supports(const Nvrtc& n, int sm) {
  for (int a : n.supported_archs())
    if (a == sm) return true;
  return false;
}

}  // namespace

TEST_SUITE("compile") {

TEST_CASE("DynLib opens the first library that loads and names missing symbols") {
  std::vector<std::string> tried;
  CHECK_FALSE(DynLib::open_first({"libepifuse_no_such_lib.so.99"}, &tried).has_value());
  REQUIRE(tried.size() == 1);
  CHECK(tried[0].find("libepifuse_no_such_lib.so.99") != std::string::npos);

  std::optional<DynLib> libc = DynLib::open_first({"libepifuse_no_such_lib.so.99", "libc.so.6"});
  REQUIRE(libc.has_value());
  CHECK(libc->name() == "libc.so.6");
  CHECK(libc->path().front() == '/');
  CHECK(libc->symbol("strlen") != nullptr);
  CHECK(libc->symbol_or_null("epifuse_no_such_symbol") == nullptr);
  CHECK_THROWS_WITH_AS(libc->symbol("epifuse_no_such_symbol"),
                       doctest::Contains("symbol epifuse_no_such_symbol not found in libc.so.6"),
                       RuntimeError);
}

TEST_CASE("parse_target accepts real NVIDIA architectures") {
  CHECK(parse_target("sm_80") == Target{8, 0, false});
  CHECK(parse_target("sm_86") == Target{8, 6, false});
  CHECK(parse_target("sm_89") == Target{8, 9, false});
  CHECK(parse_target("sm_90") == Target{9, 0, false});
  CHECK(parse_target("sm_90a") == Target{9, 0, true});
  CHECK(parse_target("sm_100a") == Target{10, 0, true});
  CHECK(parse_target("sm_120") == Target{12, 0, false});
  CHECK(parse_target("sm_90a").str() == "sm_90a");
  CHECK(parse_target("sm_100a").str() == "sm_100a");
  CHECK(parse_target("sm_90a").sm() == 90);
  CHECK(parse_target("sm_90") != parse_target("sm_90a"));
  CHECK(nvrtc_arch_option(parse_target("sm_90a")) == "--gpu-architecture=sm_90a");
}

TEST_CASE("parse_target rejects junk with a helpful message") {
  for (const char* bad : {"sm_9x", "", "sm_", "sm_9", "sm_0", "sm_1000", "sm90", "90a", "sm_90b",
                          "SM_90", "sm_80a", "sm_20", "sm_90 "}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_target(bad), UserError);
  }
  CHECK_THROWS_WITH(parse_target("sm_9x"), doctest::Contains("sm_<major><minor>[a]"));
  CHECK_THROWS_WITH(parse_target("gfx90a"), doctest::Contains("HIP backend"));
  CHECK_THROWS_WITH(parse_target("gfx1100"), doctest::Contains("AMD"));
  CHECK_THROWS_WITH(parse_target("compute_90"), doctest::Contains("sm_90"));
  CHECK_THROWS_WITH(parse_target("sm_80a"), doctest::Contains("sm_90a on"));
}

TEST_CASE("NVRTC compiles a kernel using cuda_fp16.h and cuda_bf16.h to a cubin" * doctest::test_suite("nvrtc")) {
  Nvrtc* n = nvrtc_or_skip();
  if (!n) return;
  MESSAGE(n->version_string() << " from " << n->library_path() << ", CUDA include dir "
                              << n->include_dir().value_or("(none)"));
  REQUIRE(n->include_dir().has_value());
  CHECK(cuda_include_dir() == n->include_dir());

  // The first compile in the process is the cold one (loads libnvrtc-builtins).
  for (std::string t : {"sm_90a", "sm_80"}) {
    CAPTURE(t);
    CompiledBinary bin = n->compile(kHalfKernel, "half_to_bf16.cu", parse_target(t));
    CHECK(is_elf(bin.cubin));
    CHECK(bin.target == parse_target(t));
    CHECK(bin.compiler == n->version_string());
    CHECK(bin.options.at(0) == "-std=c++17");
    CHECK(bin.options.at(1) == nvrtc_arch_option(parse_target(t)));
    MESSAGE(n->version_string() << " compile of a small cuda_fp16.h kernel for " << t << ": "
                                << bin.compile_ms << " ms, cubin " << bin.cubin.size()
                                << " bytes");
  }
  // Fast math is opt-in (docs/design.md §3 precision policy).
  for (const auto& o : n->default_options(parse_target("sm_80")))
    CHECK(o.find("fast_math") == std::string::npos);
}

TEST_CASE("NVRTC serves #include \"common/...\" from in-memory headers" * doctest::test_suite("nvrtc")) {
  Nvrtc* n = nvrtc_or_skip();
  if (!n) return;
  const std::string src = R"(#include "common/test_twice.cuh"
extern "C" __global__ void twice_all(float* x) { x[threadIdx.x] = twice(x[threadIdx.x]); }
)";
  // Per-call header.
  CompiledBinary bin =
      n->compile(src, "twice.cu", parse_target("sm_80"), {},
                 {{"common/test_twice.cuh", "__device__ inline float twice(float x) { return 2.0f * x; }\n"}});
  CHECK(is_elf(bin.cubin));
  // Without it the include fails with a CompileError.
  CHECK_THROWS_AS(n->compile(src, "twice.cu", parse_target("sm_80")), CompileError);
  // Registered process-wide.
  n->add_header("common/test_twice.cuh", "__device__ inline float twice(float x) { return x + x; }\n");
  CHECK(is_elf(n->compile(src, "twice.cu", parse_target("sm_80")).cubin));
}

TEST_CASE("a syntax error throws CompileError with numbered source, log and options" * doctest::test_suite("nvrtc")) {
  Nvrtc* n = nvrtc_or_skip();
  if (!n) return;
  const std::string src =
      "extern \"C\" __global__ void broken(float* x) {\n"
      "  float y = 1.0f;\n"
      "  x[threadIdx.x] = y +;\n"
      "}\n";
  try {
    n->compile(src, "broken.cu", parse_target("sm_80"), {"-lineinfo"});
    FAIL("expected CompileError");
  } catch (const CompileError& e) {
    const std::string what = e.what();
    CHECK(what.find("    3 |   x[threadIdx.x] = y +;") != std::string::npos);
    CHECK(!e.log().empty());
    CHECK(e.log().find("broken.cu(3)") != std::string::npos);
    CHECK(what.find(e.log()) != std::string::npos);
    CHECK(what.find(n->version_string()) != std::string::npos);
    CHECK(what.find("--gpu-architecture=sm_80") != std::string::npos);
    CHECK(what.find("-lineinfo") != std::string::npos);
    CHECK(e.target() == "sm_80");
    CHECK(e.source() == src);
  }
}

TEST_CASE("a target this NVRTC cannot compile for is a UserError" * doctest::test_suite("nvrtc")) {
  Nvrtc* n = nvrtc_or_skip();
  if (!n) return;
  for (int sm : {35, 50, 70}) {
    if (supports(*n, sm)) continue;
    Target t{sm / 10, sm % 10, false};
    CHECK_THROWS_WITH_AS(n->compile(kHalfKernel, "k.cu", t), doctest::Contains("not supported by"),
                         UserError);
  }
}

TEST_CASE("NVRTC compiles from several threads at once" * doctest::test_suite("nvrtc")) {
  Nvrtc* n = nvrtc_or_skip();
  if (!n) return;
  std::vector<std::thread> threads;
  std::vector<int> ok(3, 0);
  for (size_t i = 0; i < ok.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        ok[i] = is_elf(n->compile(kHalfKernel, "k.cu", parse_target(i % 2 ? "sm_80" : "sm_90a")).cubin);
      } catch (...) {
        ok[i] = 0;
      }
    });
  for (auto& t : threads) t.join();
  for (int v : ok) CHECK(v == 1);
}

}  // TEST_SUITE("compile")
