// AMD targets and hipRTC in a child process (backend/hiprtc.hpp, docs/amd.md):
// target parsing needs nothing; the compiles need hipRTC (tools/setup.sh
// installs Debian's libamdhip64-dev and libhiprtc-builtins5) and the epifuse
// executable beside this test binary, and say so when either is missing.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>
#include <string>

#include <fmt/format.h>

#include "backend/hiprtc.hpp"
#include "codegen/family.hpp"
#include "codegen/template_engine.hpp"
#include "epifuse/autodiff.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/json.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "../disk_cache_env.hpp"

using namespace epifuse;
using namespace epifuse::backend;

namespace {

const char* k_kernel = R"(#include <hip/hip_runtime.h>
extern "C" __global__ void k(float* y, const float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __expf(x[i]) + __shfl_xor(x[i], 1);
}
)";

bool have_hiprtc() {
  if (hiprtc_or_null()) return true;
  MESSAGE("hipRTC tests skipped: " << hiprtc_unavailable_reason());
  return false;
}

bool is_elf(const std::vector<char>& code) {
  return code.size() > 4 && code[0] == 0x7f && code[1] == 'E' && code[2] == 'L' && code[3] == 'F';
}

bool is_gemm(const KernelSpec& spec) {
  return spec.mainloop.kind == MainloopKind::gemm || spec.mainloop.kind == MainloopKind::dual_gemm;
}

// Every example chain, in name order.
std::vector<std::filesystem::path> example_chains() {
  std::vector<std::filesystem::path> out;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples/chains"))
    if (entry.path().extension() == ".json") out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Runs a shell command with its stdout into `file` and returns what it wrote.
std::string run_and_read(const std::string& command, const std::filesystem::path& file) {
  const int status = std::system(fmt::format("{} > '{}'", command, file.string()).c_str());
  CHECK_MESSAGE(status == 0, command);
  std::ifstream in(file);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Temporary files are named with this process's id: two test runs on one
// machine must not share them.
// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  ScopedEnv(std::string n, const std::string& value) : name(std::move(n)) { ::setenv(name.c_str(), value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

std::filesystem::path scratch_dir(const std::string& what) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / fmt::format("epifuse_{}_{}", what, ::getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

// An executable shell script standing in for the worker, removed with the object.
struct FakeWorker {
  std::filesystem::path path;
  FakeWorker(const std::string& name, const std::string& body)
      : path(std::filesystem::temp_directory_path() / fmt::format("epifuse_{}_{}.sh", name, ::getpid())) {
    std::ofstream(path) << "#!/bin/sh\n" << body;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  }
  ~FakeWorker() { std::filesystem::remove(path); }
};

// Note [GEMM column sums] on the wave kernel: dgrad epilogues with one and
// two col_sum outputs, f16 and bf16 (MFMA, WMMA) and f32 (the FMA form), the
// default tiles of a small and a large shape, N % 4 == 0 or not.
std::vector<std::pair<KernelSpec, Shape>> wave_col_sum_kernels() {
  std::vector<std::pair<KernelSpec, Shape>> out;
  for (DType dt : {DType::bf16, DType::f16, DType::f32})
    for (int sums : {1, 2}) {
      KernelSpec s;
      s.mainloop = {MainloopKind::gemm, dt, dt, Layout::row, Layout::col, GemmMath::exact};
      Graph& g = s.graph;
      const Value dacc = g.mul(g.accumulator(0), g.unary(OpKind::gelu_tanh_deriv, g.input("saved", dt)));
      g.output("dacc", dacc, dt);
      g.output("db", g.col_sum(dacc), DType::f32);
      if (sums == 2) g.output("acc_sum", g.col_sum(g.accumulator(0)), DType::f32);
      for (const Shape& shape : {Shape{67, 202, 96}, Shape{4096, 4096, 256}}) out.emplace_back(s, shape);
    }
  return out;
}

// The backward of every elementwise and row example chain with its dtypes set
// to f32 and then to bf16, labelled "<chain> backward, <dtype>".
std::vector<std::pair<std::string, KernelSpec>> example_backwards() {
  std::vector<std::pair<std::string, KernelSpec>> out;
  for (const std::filesystem::path& chain : example_chains()) {
    std::ifstream in(chain);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (is_gemm(spec_from_json_text(text))) continue;
    for (const char* dtype : {"f32", "bf16"}) {
      std::string typed = text;
      const std::string to = fmt::format("\"{}\"", dtype);
      for (const char* from : {"\"f32\"", "\"bf16\"", "\"f16\""})
        for (std::size_t at = 0; (at = typed.find(from, at)) != std::string::npos; at += to.size())
          typed.replace(at, std::strlen(from), to);
      out.emplace_back(fmt::format("{} backward, {}", chain.filename().string(), dtype),
                       grad(spec_from_json_text(typed, chain.string())).backward);
    }
  }
  return out;
}

bool have_clang19() {
  if (std::system("command -v clang++-19 > /dev/null 2>&1") == 0 &&
      std::filesystem::exists("/usr/include/hip/hip_runtime.h"))
    return true;
  MESSAGE("clang-19 AMD tier skipped: clang++-19 or /usr/include/hip/hip_runtime.h missing (tools/setup.sh installs them)");
  return false;
}

// A kernel's device assembly for `target` from Debian's clang-19 with
// libamdhip64-dev's headers (math library calls left unresolved: -nogpulib),
// its files in `dir`.
std::string clang19_assembly(const KernelSource& ks, const std::string& target, const std::vector<Header>& headers,
                             const std::filesystem::path& dir) {
  const std::filesystem::path src = dir / fmt::format("{}_{}.hip", ks.name, target);
  std::ofstream(src) << inline_headers(ks.text, headers);
  const std::filesystem::path out = dir / fmt::format("{}_{}.s", ks.name, target);
  return run_and_read(fmt::format("clang++-19 -x hip --offload-arch={} --cuda-device-only -nogpulib "
                                  "-O3 -S -include hip/hip_runtime.h -o '{}' '{}' 2> '{}.log'; cat '{}'",
                                  target, out.string(), src.string(), out.string(), out.string()),
                      dir / "asm.txt");
}

}  // namespace

TEST_SUITE("compile") {
  TEST_CASE("hipRTC sources: the common headers are inlined, nested and with a comment after the directive") {
    const std::vector<Header> headers = {{"common/a.cuh", "#pragma once\nint a;\n#include \"common/b.cuh\"  // b's\n"},
                                            {"common/b.cuh", "#pragma once\nint b;\n"}};
    const std::string text =
        inline_headers("#include \"common/a.cuh\"\t// why\n#include \"common/b.cuh\"\nint c;\n", headers);
    CHECK(text.find("#include") == std::string::npos);
    CHECK(text.find("int a;") < text.find("int b;"));
    CHECK(text.find("int b;") == text.rfind("int b;"));  // once
    CHECK(text.find("int c;") != std::string::npos);
    // Another file whose name starts the same is not this header.
    CHECK(inline_headers("#include \"common/a.cuhx\"\n", headers).find("#include") != std::string::npos);
  }

  TEST_CASE("AMD targets: the five architectures, feature suffixes, wave sizes; anything else is a user error") {
    CHECK(parse_amd_target("gfx90a").str() == "gfx90a");
    CHECK(parse_amd_target("gfx90a").wave_size() == 64);
    CHECK(parse_amd_target("gfx942:sramecc+:xnack-").features == std::vector<std::string>{"sramecc+", "xnack-"});
    CHECK(parse_amd_target("gfx942:sramecc+:xnack-").str() == "gfx942:sramecc+:xnack-");
    for (const char* rdna : {"gfx1030", "gfx1100", "gfx1201"}) CHECK(parse_amd_target(rdna).wave_size() == 32);
    CHECK(parse_amd_target("gfx90a:xnack-") != parse_amd_target("gfx90a:xnack+"));
    for (const char* bad : {"gfx", "gfx906", "sm_90a", "gfx90a:", "gfx90a:xnack", "gfx90a:xnack-:xnack+", "gfx90a:foo+",
                            "gfx1030:xnack-", "gfx1100:sramecc+"})
      CHECK_THROWS_AS(parse_amd_target(bad), UserError);
    CHECK_THROWS_WITH_AS(parse_amd_target("gfx906"), doctest::Contains("gfx90a, gfx942, gfx1030, gfx1100, gfx1201"),
                         UserError);
  }

  TEST_CASE("hipRTC in a child process: gfx90a and gfx1030 code objects, compile errors with the log" * doctest::test_suite("hiprtc")) {
    if (!have_hiprtc()) return;
    MESSAGE(hiprtc().version_string() << " from " << hiprtc().layout());
    for (const char* target : {"gfx90a", "gfx1030", "gfx90a:xnack-"}) {
      const HiprtcBinary bin = compile_hip_isolated(k_kernel, "k.hip", parse_amd_target(target));
      INFO(target);
      CHECK(is_elf(bin.code));
      CHECK(bin.options.at(1) == std::string("--offload-arch=") + target);
      CHECK(bin.compiler.starts_with("hipRTC"));
    }
    try {
      (void)compile_hip_isolated("extern \"C\" __global__ void k() { undeclared(); }", "bad.hip",
                                 parse_amd_target("gfx90a"));
      FAIL("a bad source compiled");
    } catch (const CompileError& e) {
      CHECK(std::string(e.log()).find("undeclared") != std::string::npos);
      CHECK(e.target() == "gfx90a");
    }
  }

  TEST_CASE("hipRTC process safety: ROCm 5 aborts for gfx1100, so it is refused; a dying child is a CompileError" * doctest::test_suite("hiprtc")) {
    if (!have_hiprtc()) return;
    const Hiprtc& rtc = hiprtc();
    if (rtc.rocm_major() == 5) {
      // The hazard itself, in a child of our own: the worker dies of SIGABRT.
      const std::filesystem::path worker = std::filesystem::path(EPIFUSE_BINARY_DIR) / "epifuse";
      const std::filesystem::path req = std::filesystem::temp_directory_path() / fmt::format("epifuse_gfx1100_request_{}", ::getpid());
      std::ofstream(req) << "epifuse-hiprtc 1\ngfx1100\nk.hip\n0\n" << k_kernel;
      const int status = std::system(fmt::format("'{}' __hiprtc-compile < '{}' > /dev/null 2>&1", worker.string(),
                                                 req.string()).c_str());
      std::filesystem::remove(req);
      CHECK(WIFEXITED(status));  // the shell reports a signalled child as 128 + signal
      CHECK(WEXITSTATUS(status) == 128 + SIGABRT);
      // epifuse never starts that child: a UserError naming the version and the fix.
      CHECK_THROWS_WITH_AS(compile_hip_isolated(k_kernel, "k.hip", parse_amd_target("gfx1100")),
                           doctest::Contains("ROCm 5's hipRTC aborts the process"), UserError);
      CHECK_THROWS_AS(compile_hip_isolated(k_kernel, "k.hip", parse_amd_target("gfx942")), UserError);
    } else {
      MESSAGE("hipRTC from ROCm " << rtc.rocm_major() << ": no known-bad targets to check");
    }
    // Any child that dies by a signal becomes a CompileError, never our death.
    const std::filesystem::path script = std::filesystem::temp_directory_path() / fmt::format("epifuse_abort_worker_{}.sh", ::getpid());
    std::ofstream(script) << "#!/bin/sh\ncat > /dev/null\necho 'about to abort' >&2\nkill -ABRT $$\n";
    std::filesystem::permissions(script, std::filesystem::perms::owner_all);
    {
      ScopedEnv env("EPIFUSE_HIPRTC_WORKER", script.string());
      try {
        (void)compile_hip_isolated(k_kernel, "k.hip", parse_amd_target("gfx90a"));
        FAIL("the aborting worker produced code");
      } catch (const CompileError& e) {
        CHECK(std::string(e.log()).find("died of signal 6") != std::string::npos);
        CHECK(std::string(e.log()).find("about to abort") != std::string::npos);
      }
    }
    std::filesystem::remove(script);
  }

  TEST_CASE("hipRTC child that never finishes: killed after EPIFUSE_HIPRTC_TIMEOUT_S, reaped, a CompileError" * doctest::test_suite("hiprtc")) {
    if (!have_hiprtc()) return;
    const std::filesystem::path pid_file = scratch_dir("hiprtc_timeout") / "pid";
    // It reads nothing, so the request sits in the pipe: neither the write nor the read may block us.
    FakeWorker worker("sleeping_worker", fmt::format("echo $$ > '{}'\necho 'still compiling' >&2\nexec sleep 60\n",
                                                     pid_file.string()));
    ScopedEnv env("EPIFUSE_HIPRTC_WORKER", worker.path.string());
    ScopedEnv timeout("EPIFUSE_HIPRTC_TIMEOUT_S", "1.5");
    const auto start = std::chrono::steady_clock::now();
    try {
      (void)compile_hip_isolated(std::string(k_kernel) + std::string(1 << 20, ' '), "k.hip", parse_amd_target("gfx90a"));
      FAIL("the sleeping worker produced code");
    } catch (const CompileError& e) {
      CHECK(std::string(e.log()).find("did not finish compiling for gfx90a within 1.5 s") != std::string::npos);
      CHECK(std::string(e.log()).find("still compiling") != std::string::npos);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(seconds < 20);
    int pid = 0;
    std::ifstream(pid_file) >> pid;
    REQUIRE(pid > 0);
    CHECK(::kill(pid, 0) == -1);  // killed and reaped: no such process, not even a zombie
    CHECK(errno == ESRCH);
    std::filesystem::remove_all(pid_file.parent_path());
  }

  TEST_CASE("EPIFUSE_HIPRTC_TIMEOUT_S that is not a positive number is a user error naming it" * doctest::test_suite("hiprtc")) {
    if (!have_hiprtc()) return;
    CHECK(hiprtc_timeout_s() == k_hiprtc_timeout_s);
    for (const char* bad : {"", "abc", "0", "-3", "5s", "inf", "nan"}) {
      INFO(std::string(bad));
      ScopedEnv timeout("EPIFUSE_HIPRTC_TIMEOUT_S", bad);
      CHECK_THROWS_WITH_AS(compile_hip_isolated(k_kernel, "k.hip", parse_amd_target("gfx90a")),
                           doctest::Contains("EPIFUSE_HIPRTC_TIMEOUT_S"), UserError);
    }
  }

  TEST_CASE("hipRTC child whose output is not a code object for the target: a CompileError, never stored" * doctest::test_suite("hiprtc")) {
    if (!have_hiprtc()) return;
    struct Case {
      const char* name;
      std::string body;
      const char* says;
    };
    const Case cases[] = {
        {"a banner", "cat > /dev/null\necho 'hello from a library'\n", "not an ELF file (\"hello from a library"},
        {"nothing", "cat > /dev/null\n", "0 bytes that are not an ELF file"},
        // The ELF magic and then not AMDGPU: a CUDA machine number.
        {"another machine", "cat > /dev/null\nprintf '\\177ELF\\002\\001\\001'; head -c 11 /dev/zero; printf '\\276\\000'; head -c 44 /dev/zero\n",
         "machine 190, not 224"},
    };
    for (const Case& c : cases) {
      INFO(std::string(c.name));
      FakeWorker worker("chatty_worker", c.body);
      ScopedEnv env("EPIFUSE_HIPRTC_WORKER", worker.path.string());
      CHECK_THROWS_WITH_AS(compile_hip_isolated(k_kernel, "k.hip", parse_amd_target("gfx90a")),
                           doctest::Contains(c.says), CompileError);
      // Through the Jit with the disk cache on: the error, and nothing on disk.
      test::TempDir dir("epifuse-hiprtc-disk");
      test::DiskCacheOn on(dir.path);
      Jit jit("gfx90a");
      const KernelSpec spec = load_spec(std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples/chains/add_mul.json");
      CHECK_THROWS_AS(jit.compile(spec, {33, 67, 0}), CompileError);
      CHECK(jit.disk_entries().empty());
      CHECK(jit.stats().disk_writes == 0);
    }
  }

  TEST_CASE("AMD compile tier: every example chain compiles for gfx90a and gfx1030 through hipRTC; MFMA in the GEMMs" * doctest::test_suite("hiprtc")) {
    if (!have_hiprtc()) return;
    const std::vector<Header> headers = template_headers();
    const std::filesystem::path dir = scratch_dir("hiprtc_tier");
    const bool objdump = std::system("command -v llvm-objdump-19 > /dev/null 2>&1") == 0;
    if (!objdump) MESSAGE("instruction check skipped: llvm-objdump-19 missing (tools/setup.sh installs llvm-19)");
    int compiled = 0, mfma = 0;
    for (const std::filesystem::path& chain : example_chains()) {
      const KernelSpec spec = load_spec(chain);
      for (const char* target : {"gfx90a", "gfx1030"}) {
        INFO(chain.filename().string() << " for " << std::string(target));
        const KernelSource ks = emit_kernel(spec, spec.default_shape.value_or(Shape{33, 67, 0}), std::nullopt,
                                            KernelPath::fastest, target);
        const std::string text = inline_headers(ks.text, headers);
        CHECK(text.find("#include \"common/") == std::string::npos);
        const HiprtcBinary bin = compile_hip_isolated(text, ks.name + ".hip", parse_amd_target(target));
        CHECK(is_elf(bin.code));
        ++compiled;
        // The GEMMs' f16/bf16 products are MFMA instructions on gfx90a (the FMA form on gfx1030).
        const bool half = spec.mainloop.a == DType::f16 || spec.mainloop.a == DType::bf16;
        if (!objdump || !is_gemm(spec)) continue;
        const std::filesystem::path object = dir / fmt::format("{}_{}.o", ks.name, target);
        std::ofstream(object, std::ios::binary).write(bin.code.data(), static_cast<std::streamsize>(bin.code.size()));
        const std::string dis = run_and_read(fmt::format("llvm-objdump-19 -d '{}'", object.string()), dir / "dis.txt");
        CHECK((dis.find("v_mfma") != std::string::npos) == (half && std::string(target) == "gfx90a"));
        if (dis.find("v_mfma") != std::string::npos) ++mfma;
      }
    }
    std::filesystem::remove_all(dir);
    MESSAGE("compiled " << compiled << " example kernels with " << hiprtc().version_string() << "; " << mfma
                        << " with v_mfma");
    CHECK(compiled == 2 * static_cast<int>(example_chains().size()));
    if (objdump) CHECK(mfma >= 6);  // the f16/bf16 GEMM and dual GEMM examples
  }

  TEST_CASE("AMD compile tier: the backward of every elementwise and row example chain compiles through hipRTC, f32 and bf16" * doctest::test_suite("hiprtc")) {
    // Note [Outputs that pass an input through]: hipRTC 5.2 once ran past its
    // 120 s on the bf16 backward of bias+GELU+dropout+residual; a form it chokes
    // on again fails here within a minute, not in a user's first compile.
    if (!have_hiprtc()) return;
    const ScopedEnv timeout("EPIFUSE_HIPRTC_TIMEOUT_S", "60");
    const std::vector<Header> headers = template_headers();
    const auto backwards = example_backwards();
    int compiled = 0;
    for (const auto& [label, backward] : backwards)
      for (const char* target : {"gfx90a", "gfx1030"}) {
        INFO(label << ", for " << std::string(target));
        const KernelSource ks = emit_kernel(backward, Shape{4096, 1024, 0}, std::nullopt, KernelPath::fastest, target);
        const auto start = std::chrono::steady_clock::now();
        const HiprtcBinary bin =
            compile_hip_isolated(inline_headers(ks.text, headers), ks.name + ".hip", parse_amd_target(target));
        CHECK(is_elf(bin.code));
        CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
        ++compiled;
      }
    MESSAGE("compiled " << compiled << " backward kernels with " << hiprtc().version_string());
    CHECK(backwards.size() >= 14);  // seven or more chains, two dtypes
    CHECK(compiled == 2 * static_cast<int>(backwards.size()));
  }

  TEST_CASE("epifuse compile --target gfx...: exit 0 with a code object, 2 for a refused target" * doctest::test_suite("hiprtc")) {
    if (!have_hiprtc()) return;
    const std::string cli = (std::filesystem::path(EPIFUSE_BINARY_DIR) / "epifuse").string();
    const std::string chains = (std::filesystem::path(EPIFUSE_SOURCE_DIR) / "examples/chains/").string();
    auto exit_code = [&](const std::string& args) {
      const int status = std::system(fmt::format("'{}' compile {} > /dev/null 2>&1", cli, args).c_str());
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    };
    CHECK(exit_code(fmt::format("'{}add_mul.json' --target gfx90a:xnack- --target gfx1030", chains)) == 0);
    CHECK(exit_code(fmt::format("'{}gemm.json' --target gfx90a", chains)) == 0);
    CHECK(exit_code(fmt::format("'{}softmax.json' --target gfx1030", chains)) == 0);
    CHECK(exit_code(fmt::format("'{}gemm.json' --target gfx90a --tile 64x64x32w2x2s4g8", chains)) == 2);
    CHECK(exit_code(fmt::format("'{}gemm.json' --target gfx1030 --tile m64x64x32w2x2g8.mfma", chains)) == 2);
    CHECK(exit_code(fmt::format("'{}add_mul.json' --target gfx906", chains)) == 2);
    if (hiprtc().rocm_major() == 5)  // refused, never a signal (the child would die of SIGABRT)
      CHECK(exit_code(fmt::format("'{}add_mul.json' --target gfx1100", chains)) == 2);
  }

  TEST_CASE("AMD compile tier, clang-19: every example chain gives gfx1100 and gfx942 assembly; WMMA and MFMA") {
    // ROCm 5's hipRTC cannot compile for these (it aborts); Debian's clang-19
    // with libamdhip64-dev's headers can emit their device assembly. Math
    // library calls stay unresolved (-nogpulib): a code-generation check.
    if (!have_clang19()) return;
    const std::vector<Header> headers = template_headers();
    const std::filesystem::path dir = scratch_dir("clang19_tier");
    int compiled = 0, matrix = 0;
    for (const std::filesystem::path& chain : example_chains()) {
      const KernelSpec spec = load_spec(chain);
      // GEMMs also at 4096^3, where the wave kernel takes its big tiles.
      std::vector<Shape> shapes{spec.default_shape.value_or(Shape{33, 67, 0})};
      if (is_gemm(spec)) shapes.push_back({4096, 4096, 4096});
      for (const Shape& shape : shapes)
      for (const char* target : {"gfx1100", "gfx942"}) {
        INFO(chain.filename().string() << " for " << std::string(target) << " at " << shape.m << "x" << shape.n << "x" << shape.k);
        const KernelSource ks = emit_kernel(spec, shape, std::nullopt, KernelPath::fastest, target);
        const std::string s = clang19_assembly(ks, target, headers, dir);
        CHECK(s.find(fmt::format("amdgcn-amd-amdhsa--{}", target)) != std::string::npos);
        CHECK(s.find(ks.name + ":") != std::string::npos);  // the kernel's entry
        CHECK(s.find("global_load") != std::string::npos);
        ++compiled;
        // f16/bf16 GEMM products: WMMA on gfx1100, MFMA on gfx942.
        const bool half = spec.mainloop.a == DType::f16 || spec.mainloop.a == DType::bf16;
        const char* op = std::string(target) == "gfx1100" ? "v_wmma" : "v_mfma";
        CHECK((s.find(op) != std::string::npos) == (is_gemm(spec) && half));
        if (s.find(op) != std::string::npos) ++matrix;
        // No register spills, no scratch (the tile rules keep WMMA tiles to 64 accumulators a lane).
        CHECK(s.find(".vgpr_spill_count: 0") != std::string::npos);
        CHECK(s.find(".private_segment_fixed_size: 0") != std::string::npos);
      }
    }
    std::filesystem::remove_all(dir);
    CHECK(compiled >= 2 * static_cast<int>(example_chains().size()));
    CHECK(matrix >= 24);  // the six f16/bf16 GEMM and dual GEMM examples at two shapes, for both targets
  }
  TEST_CASE("AMD compile tier, clang-19: the backward of every elementwise and row example chain gives gfx1100 and gfx942 assembly without spills") {
    if (!have_clang19()) return;
    const std::vector<Header> headers = template_headers();
    const std::filesystem::path dir = scratch_dir("clang19_backward");
    const auto backwards = example_backwards();
    int compiled = 0;
    for (const auto& [label, backward] : backwards)
      for (const char* target : {"gfx1100", "gfx942"}) {
        INFO(label << ", for " << std::string(target));
        const KernelSource ks = emit_kernel(backward, Shape{4096, 1024, 0}, std::nullopt, KernelPath::fastest, target);
        const std::string s = clang19_assembly(ks, target, headers, dir);
        CHECK(s.find(fmt::format("amdgcn-amd-amdhsa--{}", target)) != std::string::npos);
        CHECK(s.find(ks.name + ":") != std::string::npos);
        CHECK(s.find(".vgpr_spill_count: 0") != std::string::npos);
        CHECK(s.find(".private_segment_fixed_size: 0") != std::string::npos);
        ++compiled;
      }
    std::filesystem::remove_all(dir);
    CHECK(compiled == 2 * static_cast<int>(backwards.size()));
  }

  TEST_CASE("AMD compile tier: gemm col_sum wave kernels compile for gfx90a and gfx1030 through hipRTC" * doctest::test_suite("hiprtc")) {
    if (!have_hiprtc()) return;
    const std::vector<Header> headers = template_headers();
    int compiled = 0;
    for (const auto& [spec, shape] : wave_col_sum_kernels())
      for (const char* target : {"gfx90a", "gfx1030"}) {
        INFO(to_string(spec.mainloop.a) << " " << spec.graph.outputs().size() << " outputs for " << std::string(target)
                                        << " at " << shape.m << "x" << shape.n << "x" << shape.k);
        const KernelSource ks = emit_kernel(spec, shape, std::nullopt, KernelPath::fastest, target);
        REQUIRE(ks.text.find("atomicAdd(counter, 1u)") != std::string::npos);
        const HiprtcBinary bin = compile_hip_isolated(inline_headers(ks.text, headers), ks.name + ".hip",
                                                      parse_amd_target(target));
        CHECK(is_elf(bin.code));
        ++compiled;
      }
    MESSAGE("compiled " << compiled << " wave col_sum kernels with " << hiprtc().version_string());
  }

  TEST_CASE("AMD compile tier, clang-19: gemm col_sum wave kernels give gfx1100 and gfx942 assembly without spills") {
    if (!have_clang19()) return;
    const std::vector<Header> headers = template_headers();
    const std::filesystem::path dir = scratch_dir("clang19_col_sum");
    int compiled = 0;
    for (const auto& [spec, shape] : wave_col_sum_kernels())
      for (const char* target : {"gfx1100", "gfx942"}) {
        INFO(to_string(spec.mainloop.a) << " " << spec.graph.outputs().size() << " outputs for " << std::string(target)
                                        << " at " << shape.m << "x" << shape.n << "x" << shape.k);
        const KernelSource ks = emit_kernel(spec, shape, std::nullopt, KernelPath::fastest, target);
        const std::string s = clang19_assembly(ks, target, headers, dir);
        CHECK(s.find(ks.name + ":") != std::string::npos);
        CHECK(s.find("global_atomic_add") != std::string::npos);  // the column tile's arrival counter
        CHECK(s.find(".vgpr_spill_count: 0") != std::string::npos);
        CHECK(s.find(".private_segment_fixed_size: 0") != std::string::npos);
        ++compiled;
      }
    std::filesystem::remove_all(dir);
    CHECK(compiled == 2 * static_cast<int>(wave_col_sum_kernels().size()));
  }
}
