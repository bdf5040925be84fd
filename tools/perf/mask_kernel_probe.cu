// Probe: what a dropout mask costs when a kernel of its own draws it at full
// occupancy, as packed keep bits, against cuBLAS's bf16 GEMM of the shapes
// whose epilogues carry dropout (docs/dropout-mask.md). In a wgmma epilogue
// the same Philox work does not overlap the running mainloop and cost the
// dgrad with dropout 1.11-1.26x the dropout-free one (docs/perf/backward.md);
// the design reads the bits in the epilogue instead, so its cost is this
// kernel's time plus the bits' reads.
//
// The mask is docs/design.md §4's, bit for bit: element (r, c) of an [M,N]
// output draws word (i & 3) of Philox4x32-10 at counter
// {q_lo, (q_hi & 0xFFFF) | (stream << 16), offset_lo, offset_hi}, q = i >> 2,
// i = r*N + c, and is kept iff draw >= thr * 256 (templates/common/philox.cuh,
// the one definition). Word w of row r holds columns 32w .. 32w+31, bit j
// column 32w + j: [M, N/32] u32, N a multiple of 32 here.
//
// Variants: ELEMS = 32 or 64 columns a thread (one u32 or a u32 pair stored).
// Every time is the median of 20 launches after 3 warm-ups, cudaEvent-timed,
// in one process with the GEMMs and a copy of the mask's bytes; a sample of
// words is checked against the same header compiled for the host.
//
// Build: nvcc -O3 -std=c++17 -I templates -gencode=arch=compute_90a,code=sm_90a \
//          -o mask_kernel_probe tools/perf/mask_kernel_probe.cu -lcublas
// Run:   ./mask_kernel_probe
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/philox.cuh"

#define CHECK_CUDA(x)                                                                    \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

namespace {

struct MaskArgs {
  unsigned int* bits;
  long long m, n;
  unsigned long long seed, offset;
  unsigned int stream, thr256;
};

// Thread t draws ELEMS consecutive columns of one row: ELEMS / 4 Philox calls,
// ELEMS / 32 words stored.
template <int ELEMS>
__global__ void __launch_bounds__(256) mask_kernel(MaskArgs a) {
  const long long words_per_row = a.n / 32;
  const long long groups = a.m * (a.n / ELEMS);
  for (long long g = blockIdx.x * (long long)blockDim.x + threadIdx.x; g < groups;
       g += (long long)gridDim.x * blockDim.x) {
    const long long i0 = g * ELEMS;  // rows are whole groups: N % ELEMS == 0
    unsigned int w[ELEMS / 32];
#pragma unroll
    for (int k = 0; k < ELEMS / 32; ++k) w[k] = 0u;
#pragma unroll
    for (int c = 0; c < ELEMS / 4; ++c) {
      const ef_u32x4 d = ef_philox4_draws(a.seed, a.offset, a.stream, (unsigned long long)(i0 >> 2) + c);
      const unsigned int bits = (unsigned int)ef_dropout_keep_scaled(d.x, a.thr256) |
                                (unsigned int)ef_dropout_keep_scaled(d.y, a.thr256) << 1 |
                                (unsigned int)ef_dropout_keep_scaled(d.z, a.thr256) << 2 |
                                (unsigned int)ef_dropout_keep_scaled(d.w, a.thr256) << 3;
      w[c / 8] |= bits << (4 * (c % 8));
    }
    const long long row = i0 / a.n, word = (i0 % a.n) / 32;
    unsigned int* out = a.bits + row * words_per_row + word;
    if constexpr (ELEMS == 64)
      *reinterpret_cast<uint2*>(out) = make_uint2(w[0], w[1]);
    else
      *out = w[0];
  }
}

float median_ms(std::vector<float> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <class F>
float time_ms(F&& launch) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> t;
  for (int i = 0; i < 20; ++i) {
    CHECK_CUDA(cudaEventRecord(a));
    launch();
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  return median_ms(t);
}

// The host's bit for element (r, c), from the same header.
bool host_keep(const MaskArgs& a, long long r, long long c) {
  const unsigned long long i = (unsigned long long)(r * a.n + c);
  return ef_dropout_keep_scaled(ef_philox4_draw(a.seed, a.offset, a.stream, i), a.thr256);
}

}  // namespace

int main() {
  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, %d SMs; times in ms (median of 20); GEMM: cublasGemmEx bf16, f32 accumulate, "
              "row-major C = A B as cuBLAS's column-major C^T = B^T A^T\n",
              prop.name, sms);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
  struct Shape {
    long long m, n, k;
  };
  const Shape shapes[] = {{8192, 8192, 2048}, {16384, 8192, 2048}, {8192, 16384, 4096},
                          {16384, 16384, 4096}, {8192, 8192, 8192}, {2048, 8192, 2048}};
  std::printf("%-20s %9s %9s %9s %9s %9s %8s %8s %6s\n", "M,N,K", "gemm", "mask32", "mask64", "copy",
              "issue", "m32/gemm", "m64/gemm", "check");
  for (const Shape& s : shapes) {
    const long long mn = s.m * s.n;
    __nv_bfloat16 *A, *B, *C;
    CHECK_CUDA(cudaMalloc(&A, s.m * s.k * 2));
    CHECK_CUDA(cudaMalloc(&B, s.k * s.n * 2));
    CHECK_CUDA(cudaMalloc(&C, mn * 2));
    CHECK_CUDA(cudaMemset(A, 0x3c, s.m * s.k * 2));  // small non-zero values
    CHECK_CUDA(cudaMemset(B, 0x3c, s.k * s.n * 2));
    unsigned int *bits, *bits2, *copy_dst;
    CHECK_CUDA(cudaMalloc(&bits, mn / 8));
    CHECK_CUDA(cudaMalloc(&bits2, mn / 8));
    CHECK_CUDA(cudaMalloc(&copy_dst, mn / 8));
    const float alpha = 1.0f, beta = 0.0f;
    const float gemm = time_ms([&] {
      cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)s.n, (int)s.m, (int)s.k, &alpha, B, CUDA_R_16BF, (int)s.n, A,
                   CUDA_R_16BF, (int)s.k, &beta, C, CUDA_R_16BF, (int)s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    });
    MaskArgs a{bits, s.m, s.n, 0x243f6a8885a308d3ull, 12345, 0, (unsigned int)std::llround(0.1 * (1 << 24)) * 256u};
    MaskArgs a2 = a;
    a2.bits = bits2;
    const int grid = sms * 8;  // 8 blocks of 256 threads a multiprocessor: full occupancy
    const float m32 = time_ms([&] { mask_kernel<32><<<grid, 256>>>(a); });
    const float m64 = time_ms([&] { mask_kernel<64><<<grid, 256>>>(a2); });
    const float copy = time_ms([&] { cudaMemcpyAsync(copy_dst, bits, mn / 8, cudaMemcpyDeviceToDevice); });
    // Both variants against the host on a sample of words, and against each other whole.
    std::vector<unsigned int> w(mn / 32), w2(mn / 32);
    CHECK_CUDA(cudaMemcpy(w.data(), bits, mn / 8, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(w2.data(), bits2, mn / 8, cudaMemcpyDeviceToHost));
    bool ok = w == w2;
    long long kept = 0;
    for (long long j = 0; j < 4096 && ok; ++j) {
      const long long word = (j * 2654435761ll) % (mn / 32);
      const long long r = word / (s.n / 32), c0 = (word % (s.n / 32)) * 32;
      for (int b = 0; b < 32; ++b) {
        const bool k = (w[word] >> b) & 1u;
        kept += k;
        ok = ok && k == host_keep(a, r, c0 + b);
      }
    }
    ok = ok && kept > 4096 * 32 * 85 / 100 && kept < 4096 * 32 * 95 / 100;  // p = 0.1
    // Issue bound: about 11 instructions an element for a quarter Philox call and
    // 2 for the test and the bit (docs/perf/elementwise.md), 128 lanes an SM a clock.
    int clock_khz = 0;
    CHECK_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    const double issue = mn * 13.0 / (sms * 128.0 * clock_khz * 1e3) * 1e3;
    char name[64];
    std::snprintf(name, sizeof name, "%lld,%lld,%lld", s.m, s.n, s.k);
    std::printf("%-20s %9.4f %9.4f %9.4f %9.4f %9.4f %8.3f %8.3f %6s\n", name, gemm, m32, m64, copy, issue,
                m32 / gemm, m64 / gemm, ok ? "ok" : "FAIL");
    CHECK_CUDA(cudaFree(A));
    CHECK_CUDA(cudaFree(B));
    CHECK_CUDA(cudaFree(C));
    CHECK_CUDA(cudaFree(bits));
    CHECK_CUDA(cudaFree(bits2));
    CHECK_CUDA(cudaFree(copy_dst));
  }
  cublasDestroy(h);
  return 0;
}
