// CUDA driver backend end to end: compile with NVRTC, load, launch, check every
// value; time a device-to-device copy. Runs only where a GPU is present; elsewhere it
// prints "GPU suite skipped: <reason>" and passes.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "backend/cuda_driver.hpp"
#include "backend/nvrtc.hpp"
#include "epifuse/errors.hpp"

using namespace epifuse;
using namespace epifuse::backend;

namespace {

// Returns the driver, or nullptr after printing why the suite is skipped.
CudaDriver* cuda_or_skip() {
  CudaDriver* cu = cuda_or_null();
  if (!cu) {
    MESSAGE("GPU suite skipped: " << cuda_unavailable_reason());
    return nullptr;
  }
  if (!nvrtc_or_null()) {
    MESSAGE("GPU suite skipped: " << nvrtc_unavailable_reason());
    return nullptr;
  }
  return cu;
}

// out[i] = a[i] * 2 + i, 64-bit indexing.
const char* const kAxpiKernel = R"(
extern "C" __global__ void twice_plus_index(float* out, const float* a, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * 2.0f + (float)i;
}
)";

}  // namespace

TEST_SUITE("gpu_nvidia") {

TEST_CASE("driver: compile, launch over 1,000,003 elements, check every value") {
  CudaDriver* cu = cuda_or_skip();
  if (!cu) return;
  const DeviceInfo& dev = cu->device(0);
  const Target target = detect_target(0);
  MESSAGE(cu->version_string() << ", device 0: " << dev.name << " (cc " << dev.cc_major << "."
                               << dev.cc_minor << ", " << dev.multiprocessors << " SMs, L2 "
                               << dev.l2_bytes / (1024 * 1024) << " MiB, smem/block opt-in "
                               << dev.max_shared_per_block_optin << " B), target "
                               << target.str());
  CHECK(dev.multiprocessors > 0);
  CHECK(dev.max_threads_per_sm >= 1024);
  if (dev.cc_major == 9 && dev.cc_minor == 0) CHECK(target.str() == "sm_90a");

  CompiledBinary bin = nvrtc().compile(kAxpiKernel, "twice_plus_index.cu", target);
  Module mod(bin.cubin);
  CUfunction f = mod.function("twice_plus_index");
  CHECK_THROWS_WITH_AS(mod.function("no_such_kernel"), doctest::Contains("no_such_kernel"),
                       RuntimeError);
  const FunctionInfo info = cu->function_info(f);
  const int block = 256;
  const int blocks_per_sm = cu->max_active_blocks_per_sm(f, block);
  MESSAGE("kernel: " << info.registers << " registers, max " << info.max_threads_per_block
                     << " threads/block, " << blocks_per_sm << " blocks of " << block
                     << " per SM");
  CHECK(info.registers > 0);
  CHECK(blocks_per_sm > 0);

  long long n = 1'000'003;
  std::vector<float> a(static_cast<size_t>(n)), out(static_cast<size_t>(n), -1.0f);
  for (long long i = 0; i < n; ++i) a[static_cast<size_t>(i)] = static_cast<float>(i % 977) - 400.0f;
  DeviceBuffer d_a(n * sizeof(float)), d_out(n * sizeof(float));
  d_a.upload(a.data(), d_a.size());
  d_out.fill_bytes(0xff);  // NaN everywhere: a missed element cannot pass
  Stream stream;
  void* args[] = {&d_out.ptr(), &d_a.ptr(), &n};
  const unsigned grid = static_cast<unsigned>((n + block - 1) / block);
  cu->launch(f, {grid}, {block}, args, 0, stream.get());
  stream.synchronize();
  d_out.download(out.data(), d_out.size());

  long long wrong = 0, first_wrong = -1;
  for (long long i = 0; i < n; ++i) {
    // Integers below 2^24: exact in fp32, so equality is the right check.
    const float want = a[static_cast<size_t>(i)] * 2.0f + static_cast<float>(i);
    if (out[static_cast<size_t>(i)] != want) {
      if (first_wrong < 0) first_wrong = i;
      ++wrong;
    }
  }
  CAPTURE(first_wrong);
  CHECK(wrong == 0);
}

TEST_CASE("driver: errors name the call") {
  CudaDriver* cu = cuda_or_skip();
  if (!cu) return;
  CHECK_THROWS_WITH_AS(cu->alloc(size_t{1} << 60), doctest::Contains("cuMemAlloc failed: CUDA_ERROR_"),
                       RuntimeError);
  std::vector<char> junk(64, 'x');  // not ELF or fatbin: the driver reads it as PTX text,
  junk.back() = '\0';                // so it must be terminated
  CHECK_THROWS_WITH_AS(Module{junk}, doctest::Contains("cuModuleLoadData failed"), RuntimeError);
  CHECK_THROWS_AS(cu->device(cu->device_count()), UserError);
}

TEST_CASE("driver: time a 1 GiB device-to-device copy with events") {
  CudaDriver* cu = cuda_or_skip();
  if (!cu) return;
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer src(bytes), dst(bytes);
  src.fill_bytes(0x5a);
  cu->copy_device(dst.ptr(), src.ptr(), bytes);  // warm up
  cu->synchronize();
  const int reps = 5;
  EventTimer timer;
  timer.start();
  for (int r = 0; r < reps; ++r) cu->copy_device(dst.ptr(), src.ptr(), bytes);
  timer.stop();
  const double ms = timer.elapsed_ms() / reps;
  const double gbps = 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
  MESSAGE("cuMemcpyDtoD 1 GiB: " << ms << " ms, " << gbps << " GB/s (bytes read + written)");
  CHECK(ms > 0);
  unsigned char probe[16] = {};
  dst.download(probe, sizeof probe, bytes - sizeof probe);
  for (unsigned char c : probe) CHECK(c == 0x5a);
}

}  // TEST_SUITE("gpu_nvidia")
