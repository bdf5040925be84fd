// The mma.sync ceiling of this GPU: m16n8k16 f16 (and bf16) -> f32 from
// registers only, no memory traffic, for several warps per SM and independent
// accumulators per warp. It says what an mma.sync GEMM mainloop can reach at
// best (docs/perf/gemm.md, "mma.sync and FFMA"). Build: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a
// (or sm_80) -o mma_ceiling tools/perf/mma_ceiling.cu; run: ./mma_ceiling
#include <cstdio>
#include <cuda_runtime.h>

template <int CHAINS>
__global__ void mma_loop(float* out, int iters) {
  unsigned a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = 0x3c003c00u ^ (threadIdx.x * (i + 1));
  b[0] = 0x3c003c00u ^ threadIdx.x;
  b[1] = 0x3c003c00u;
  float d[CHAINS][4] = {};
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int c = 0; c < CHAINS; ++c)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  float s = 0;
  for (int c = 0; c < CHAINS; ++c) s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
  if (s == 12345.0f) out[0] = s;
}

// The warp tile's own pattern: MI x NI accumulators, A fragments reused
// across a row (mi outer) or B fragments across a column (ni outer), the
// operands changing every k step as in the GEMM mainloop (from registers here).
template <int MI, int NI, bool NI_OUTER>
__global__ void mma_tile(float* out, int iters) {
  unsigned a[2][MI][4], b[2][NI][2];
  for (int s = 0; s < 2; ++s) {
    for (int i = 0; i < MI; ++i)
      for (int j = 0; j < 4; ++j) a[s][i][j] = 0x3c003c00u ^ (threadIdx.x * (i + 7 * j + s + 1));
    for (int i = 0; i < NI; ++i)
      for (int j = 0; j < 2; ++j) b[s][i][j] = 0x3c003c00u ^ (threadIdx.x * (3 * i + j + s + 2));
  }
  float d[MI][NI][4] = {};
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
      for (int x = 0; x < (NI_OUTER ? NI : MI); ++x)
#pragma unroll
        for (int y = 0; y < (NI_OUTER ? MI : NI); ++y) {
          const int mi = NI_OUTER ? y : x, ni = NI_OUTER ? x : y;
          asm volatile(
              "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
              "{%0,%1,%2,%3};\n"
              : "+f"(d[mi][ni][0]), "+f"(d[mi][ni][1]), "+f"(d[mi][ni][2]), "+f"(d[mi][ni][3])
              : "r"(a[s][mi][0]), "r"(a[s][mi][1]), "r"(a[s][mi][2]), "r"(a[s][mi][3]), "r"(b[s][ni][0]),
                "r"(b[s][ni][1]));
        }
  }
  float sum = 0;
  for (int i = 0; i < MI; ++i)
    for (int j = 0; j < NI; ++j) sum += d[i][j][0] + d[i][j][1] + d[i][j][2] + d[i][j][3];
  if (sum == 12345.0f) out[0] = sum;
}

template <int MI, int NI, bool NI_OUTER>
void run_tile(int sms, int warps_per_sm) {
  float* out;
  cudaMalloc(&out, 4);
  const int threads = warps_per_sm * 32, blocks = sms, iters = 2048;
  mma_tile<MI, NI, NI_OUTER><<<blocks, threads>>>(out, 16);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  mma_tile<MI, NI, NI_OUTER><<<blocks, threads>>>(out, iters);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  const cudaError_t err = cudaGetLastError();
  const double flops = 2.0 * 16 * 8 * 16 * MI * NI * 2 * double(iters) * blocks * warps_per_sm;
  std::printf("warp tile %dx%d (%s outer), warps/SM %2d: %7.1f TFLOP/s %s\n", MI * 16, NI * 8,
              NI_OUTER ? "ni" : "mi", warps_per_sm, flops / ms / 1e9, err ? cudaGetErrorString(err) : "");
  cudaFree(out);
}

template <int CHAINS>
void run(int sms, int warps_per_sm) {
  float* out;
  cudaMalloc(&out, 4);
  const int threads = warps_per_sm * 32 > 1024 ? 1024 : warps_per_sm * 32;
  const int blocks = sms * (warps_per_sm * 32 / threads);
  const int iters = 4096;
  mma_loop<CHAINS><<<blocks, threads>>>(out, 16);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  mma_loop<CHAINS><<<blocks, threads>>>(out, iters);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  const double flops = 2.0 * 16 * 8 * 16 * CHAINS * double(iters) * blocks * threads / 32;
  std::printf("warps/SM %3d  chains/warp %2d  %7.1f TFLOP/s\n", warps_per_sm, CHAINS, flops / ms / 1e9);
  cudaFree(out);
}

int main() {
  cudaDeviceProp p;
  cudaGetDeviceProperties(&p, 0);
  std::printf("%s, %d SMs\n", p.name, p.multiProcessorCount);
  const int sms = p.multiProcessorCount;
  for (int w : {4, 8, 16}) {
    run<8>(sms, w);
    run<32>(sms, w);
  }
  for (int w : {4, 8}) {
    run_tile<4, 8, false>(sms, w);
    run_tile<4, 8, true>(sms, w);
  }
  run_tile<4, 4, false>(sms, 8);
  run_tile<4, 4, false>(sms, 16);
  run_tile<2, 8, false>(sms, 16);
  return 0;
}
