// Probe: the layernorm backward at long rows with each row split over G blocks
// of the whole grid, the blocks of a row meeting in global memory (an L2
// counter and slots) instead of a thread-block cluster's shared memory. The
// row family's cluster tiles hold a row in 8 or 16 blocks, so at N = 262,144
// seven clusters of 16 fill 112 of an H100's 132 SMs (docs/perf/backward.md,
// "Open"); a grid of U units x G blocks can fill all of them. This times that
// shape of kernel by hand, before any of it goes into the family.
//
// f32, dy and x [M,N] row-major, w [N], the forward's mean and rstd [M]:
//   xhat = (x - mean) * rstd, g = w * dy,
//   dx   = rstd * (g - (sum(g) + xhat * sum(g * xhat)) / N),
//   dw   = col_sum(dy * xhat), db = col_sum(dy).
// Block b is rank b % G of unit b / G; unit u takes rows u, u + U, ... in
// batches of R rows, each batch one exchange: the block's 2R partial sums go
// to slots in global memory, a counter of the unit counts the blocks in, and
// every block adds the G partials in rank order (the same bits in every block).
// The next batch's x and dy are loaded before the exchange, so the wait
// overlaps their copies. Column sums stay in registers (a block owns its
// columns); with U > 1 a second kernel adds the units' partial rows in order.
// The grid is launched cooperatively: the driver refuses a grid whose blocks
// cannot all be resident, instead of the wait never ending.
//
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o grid_rows_probe tools/perf/grid_rows_probe.cu
// Run:   ./grid_rows_probe    (prints each configuration's time, % of the same run's copy ceiling, and its check)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(call)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

struct Args {
  const float4* x;
  const float4* dy;
  const float4* w;
  const float* mean;
  const float* rstd;
  float4* dx;
  float4* dw_part;  // [U][N/4]
  float4* db_part;
  float* slots;     // [U][2][2R][G]
  unsigned* counters;  // [U] arrivals, then one exit counter
  long long m, n4;  // rows, vectors a row
  int units, g;
};

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <int THREADS, int J, int R>
struct Block {
  static constexpr int WARPS = THREADS / 32;
  const Args& a;
  long long v0, nv;  // this block's vectors of a row
  int unit, rank;
  float4 w[J];
  float4 dw[J], db[J];
  float* red;   // [WARPS][2R]
  float* tot;   // [2R]

  __device__ bool has(int j) const { return threadIdx.x + (long long)j * THREADS < nv; }
  __device__ long long col(int j) const { return v0 + threadIdx.x + (long long)j * THREADS; }

  __device__ void load(long long batch, float4 (&xr)[R][J], float4 (&dr)[R][J]) const {
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const long long row = unit + (batch * R + k) * a.units;
#pragma unroll
      for (int j = 0; j < J; ++j) {
        if (row < a.m && has(j)) {
          xr[k][j] = __ldcs(a.x + row * a.n4 + col(j));
          dr[k][j] = __ldcs(a.dy + row * a.n4 + col(j));
        }
      }
    }
  }

  __device__ void run_batch(long long batch, float4 (&xr)[R][J], float4 (&dr)[R][J]) {
    float part[2 * R];
    float mean[R], rstd[R];
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const long long row = unit + (batch * R + k) * a.units;
      mean[k] = row < a.m ? a.mean[row] : 0.f;
      rstd[k] = row < a.m ? a.rstd[row] : 0.f;
      float s = 0.f, t = 0.f;
#pragma unroll
      for (int j = 0; j < J; ++j) {
        if (row < a.m && has(j)) {
          const float4 x = xr[k][j], d = dr[k][j], ww = w[j];
          const float g0 = ww.x * d.x, g1 = ww.y * d.y, g2 = ww.z * d.z, g3 = ww.w * d.w;
          s += (g0 + g1) + (g2 + g3);
          t += (g0 * ((x.x - mean[k]) * rstd[k]) + g1 * ((x.y - mean[k]) * rstd[k])) +
               (g2 * ((x.z - mean[k]) * rstd[k]) + g3 * ((x.w - mean[k]) * rstd[k]));
        }
      }
      part[2 * k] = s;
      part[2 * k + 1] = t;
    }
    // The block's partials: warps, then warp 0 across warps in order.
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < 2 * R; ++k)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) part[k] += __shfl_xor_sync(0xffffffffu, part[k], o);
    if (lane == 0)
#pragma unroll
      for (int k = 0; k < 2 * R; ++k) red[warp * 2 * R + k] = part[k];
    __syncthreads();
    const int parity = (int)(batch & 1);
    float* slots = a.slots + ((long long)unit * 2 + parity) * 2 * R * a.g;
    unsigned* counter = a.counters + unit;
    if (threadIdx.x < 2 * R) {
      float s = 0.f;
      for (int w_ = 0; w_ < WARPS; ++w_) s += red[w_ * 2 * R + threadIdx.x];
      __stcg(slots + threadIdx.x * a.g + rank, s);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(counter, 1u);
      const unsigned target = (unsigned)((batch + 1) * a.g);
      long long spins = 0;
      while (ld_acquire(counter) < target) {
        if (++spins > (1ll << 26)) {
          printf("grid_rows_probe: block %d waited too long at batch %lld\n", blockIdx.x, batch);
          __trap();
        }
      }
      __threadfence();
    }
    __syncthreads();
    // Every block adds the G partials in the same order.
    if (warp == 0) {
      for (int k = 0; k < 2 * R; ++k) {
        float s = 0.f;
        for (int r = lane; r < a.g; r += 32) s += __ldcg(slots + k * a.g + r);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) tot[k] = s;
      }
    }
    __syncthreads();
    const float inv_n = 1.0f / (float)(a.n4 * 4);
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const long long row = unit + (batch * R + k) * a.units;
      const float sg = tot[2 * k] * inv_n, sgx = tot[2 * k + 1] * inv_n;
#pragma unroll
      for (int j = 0; j < J; ++j) {
        if (row < a.m && has(j)) {
          const float4 x = xr[k][j], d = dr[k][j], ww = w[j];
          const float m = mean[k], r = rstd[k];
          const float h0 = (x.x - m) * r, h1 = (x.y - m) * r, h2 = (x.z - m) * r, h3 = (x.w - m) * r;
          float4 o;
          o.x = r * (ww.x * d.x - (sg + h0 * sgx));
          o.y = r * (ww.y * d.y - (sg + h1 * sgx));
          o.z = r * (ww.z * d.z - (sg + h2 * sgx));
          o.w = r * (ww.w * d.w - (sg + h3 * sgx));
          __stcs(a.dx + row * a.n4 + col(j), o);
          dw[j].x += d.x * h0; dw[j].y += d.y * h1; dw[j].z += d.z * h2; dw[j].w += d.w * h3;
          db[j].x += d.x; db[j].y += d.y; db[j].z += d.z; db[j].w += d.w;
        }
      }
    }
  }
};

template <int THREADS, int J, int R>
__global__ void __launch_bounds__(THREADS, 1) ln_backward_grid(Args a) {
  __shared__ float red[(THREADS / 32) * 2 * R];
  __shared__ float tot[2 * R];
  Block<THREADS, J, R> b{a};
  b.unit = blockIdx.x / a.g;
  b.rank = blockIdx.x % a.g;
  b.v0 = a.n4 * b.rank / a.g;
  b.nv = a.n4 * (b.rank + 1) / a.g - b.v0;
  b.red = red;
  b.tot = tot;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    b.w[j] = b.has(j) ? a.w[b.col(j)] : make_float4(0.f, 0.f, 0.f, 0.f);
    b.dw[j] = make_float4(0.f, 0.f, 0.f, 0.f);
    b.db[j] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const long long rows = (a.m - b.unit + a.units - 1) / a.units;  // this unit's rows
  const long long batches = (rows + R - 1) / R;
  float4 xa[R][J], da[R][J], xb[R][J], db_[R][J];
  b.load(0, xa, da);
  for (long long i = 0; i < batches; i += 2) {
    if (i + 1 < batches) b.load(i + 1, xb, db_);
    b.run_batch(i, xa, da);
    if (i + 1 >= batches) break;
    if (i + 2 < batches) b.load(i + 2, xa, da);
    b.run_batch(i + 1, xb, db_);
  }
#pragma unroll
  for (int j = 0; j < J; ++j)
    if (b.has(j)) {
      a.dw_part[(long long)b.unit * a.n4 + b.col(j)] = b.dw[j];
      a.db_part[(long long)b.unit * a.n4 + b.col(j)] = b.db[j];
    }
  // The last block out sets the counters back to zero for the next launch.
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* exit_counter = a.counters + a.units;
    if (atomicAdd(exit_counter, 1u) == gridDim.x - 1) {
      for (int u = 0; u < a.units; ++u) a.counters[u] = 0u;
      *exit_counter = 0u;
      __threadfence();
    }
  }
}

// dw and db: the units' partial rows added in unit order.
__global__ void add_units(const float4* dw_part, const float4* db_part, float4* dw, float4* db, long long n4, int units) {
  for (long long v = blockIdx.x * (long long)blockDim.x + threadIdx.x; v < n4; v += (long long)gridDim.x * blockDim.x) {
    float4 s = dw_part[v], t = db_part[v];
    for (int u = 1; u < units; ++u) {
      const float4 p = dw_part[u * n4 + v], q = db_part[u * n4 + v];
      s.x += p.x; s.y += p.y; s.z += p.z; s.w += p.w;
      t.x += q.x; t.y += q.y; t.z += q.z; t.w += q.w;
    }
    dw[v] = s;
    db[v] = t;
  }
}

// The copy ceiling: x and dy read, one tensor written (the kernel's own traffic), and a plain copy.
__global__ void read2_write1(const float4* x, const float4* y, float4* o, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const float4 p = __ldcs(x + i), q = __ldcs(y + i);
    __stcs(o + i, make_float4(p.x + q.x, p.y + q.y, p.z + q.z, p.w + q.w));
  }
}
__global__ void copy_kernel(const float4* x, float4* o, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    __stcs(o + i, __ldcs(x + i));
}

struct Problem {
  long long m, n;
  float4 *x, *dy, *w, *dx, *dw, *db, *dw_part, *db_part;
  float *mean, *rstd, *slots;
  unsigned* counters;
};

template <class F>
float time_ms(F&& launch, int reps) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  launch();  // warm
  CK(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int r = 0; r < 5; ++r) {
    CK(cudaEventRecord(e0));
    for (int i = 0; i < reps; ++i) launch();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms / reps);
  }
  std::sort(t.begin(), t.end());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return t[t.size() / 2];
}

template <int THREADS, int J, int R>
void run_config(Problem& p, int units, int g, float ceiling_ms, const std::vector<double>& ref_dw,
                const std::vector<double>& ref_db, const std::vector<float>& hx, const std::vector<float>& hdy,
                const std::vector<float>& hw, const std::vector<float>& hmean, const std::vector<float>& hrstd) {
  const long long n4 = p.n / 4;
  const long long per_block = (n4 + g - 1) / g;
  if (per_block > (long long)THREADS * J) {
    std::printf("  U=%d G=%d t%d j%d r%d: a block's %lld vectors exceed %d\n", units, g, THREADS, J, R, per_block, THREADS * J);
    return;
  }
  int dev = 0, sms = 0, per_sm = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ln_backward_grid<THREADS, J, R>, THREADS, 0));
  if ((long long)units * g > (long long)sms * per_sm) {
    std::printf("  U=%d G=%d t%d j%d r%d: %d blocks do not fit %d x %d resident\n", units, g, THREADS, J, R, units * g, sms, per_sm);
    return;
  }
  Args a{p.x, p.dy, p.w, p.mean, p.rstd, p.dx, p.dw_part, p.db_part, p.slots, p.counters, p.m, n4, units, g};
  CK(cudaMemset(p.counters, 0, (units + 1) * sizeof(unsigned)));
  auto launch = [&] {
    void* params[] = {&a};
    CK(cudaLaunchCooperativeKernel((const void*)ln_backward_grid<THREADS, J, R>, dim3(units * g), dim3(THREADS), params, 0, 0));
    add_units<<<sms * 4, 256>>>(p.dw_part, p.db_part, p.dw, p.db, n4, units);
  };
  const float ms = time_ms(launch, 10);
  // Check: dw and db over all rows, dx on sampled rows, against double on the host.
  std::vector<float> dw(p.n), db(p.n), dx(p.n);
  CK(cudaMemcpy(dw.data(), p.dw, p.n * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(db.data(), p.db, p.n * 4, cudaMemcpyDeviceToHost));
  double err = 0, scale = 0;
  for (long long c = 0; c < p.n; ++c) {
    err = std::max(err, std::max(std::fabs(dw[c] - ref_dw[c]), std::fabs(db[c] - ref_db[c])));
    scale = std::max(scale, std::max(std::fabs(ref_dw[c]), std::fabs(ref_db[c])));
  }
  double dx_err = 0, dx_scale = 0;
  for (long long row : {0ll, p.m / 3, p.m - 1}) {
    CK(cudaMemcpy(dx.data(), reinterpret_cast<float*>(p.dx) + row * p.n, p.n * 4, cudaMemcpyDeviceToHost));
    double sg = 0, sgx = 0;
    for (long long c = 0; c < p.n; ++c) {
      const double h = ((double)hx[row * p.n + c] - hmean[row]) * hrstd[row];
      const double gg = (double)hw[c] * hdy[row * p.n + c];
      sg += gg;
      sgx += gg * h;
    }
    for (long long c = 0; c < p.n; ++c) {
      const double h = ((double)hx[row * p.n + c] - hmean[row]) * hrstd[row];
      const double ref = hrstd[row] * ((double)hw[c] * hdy[row * p.n + c] - (sg + h * sgx) / (double)p.n);
      dx_err = std::max(dx_err, std::fabs(dx[c] - ref));
      dx_scale = std::max(dx_scale, std::fabs(ref));
    }
  }
  const bool ok = err <= 1e-4 * scale && dx_err <= 1e-4 * dx_scale;
  std::printf("  U=%-2d G=%-3d t%-4d j%d r%d: %.4f ms, %.1f%% of copy | dw,db max err %.2e of %.2e, dx %.2e of %.2e: %s\n",
              units, g, THREADS, J, R, ms, 100.0 * ceiling_ms / ms, err, scale, dx_err, dx_scale, ok ? "ok" : "MISMATCH");
}

int main() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("# %s, %d SMs; layernorm backward f32 (dx, dw, db), M x N = 2^27\n", prop.name, sms);
  for (long long n : {262144ll, 65536ll}) {
    Problem p;
    p.n = n;
    p.m = (1ll << 27) / n;
    const long long e = p.m * p.n;
    std::vector<float> hx(e), hdy(e), hw(n), hmean(p.m), hrstd(p.m);
    unsigned s = 12345u;
    auto rnd = [&s] { s = s * 1664525u + 1013904223u; return (float)((s >> 8) * (1.0 / 16777216.0)) * 2.f - 1.f; };
    for (auto& v : hx) v = rnd();
    for (auto& v : hdy) v = rnd();
    for (auto& v : hw) v = 1.f + 0.5f * rnd();
    for (long long r = 0; r < p.m; ++r) {
      hmean[r] = 0.1f * rnd();
      hrstd[r] = 1.5f + 0.5f * rnd();
    }
    std::vector<double> ref_dw(n, 0.0), ref_db(n, 0.0);
    for (long long r = 0; r < p.m; ++r)
      for (long long c = 0; c < n; ++c) {
        const double d = hdy[r * n + c];
        ref_dw[c] += d * (((double)hx[r * n + c] - hmean[r]) * hrstd[r]);
        ref_db[c] += d;
      }
    const int max_units = 8;
    CK(cudaMalloc(&p.x, e * 4));
    CK(cudaMalloc(&p.dy, e * 4));
    CK(cudaMalloc(&p.dx, e * 4));
    CK(cudaMalloc(&p.w, n * 4));
    CK(cudaMalloc(&p.dw, n * 4));
    CK(cudaMalloc(&p.db, n * 4));
    CK(cudaMalloc(&p.dw_part, n * 4 * max_units));
    CK(cudaMalloc(&p.db_part, n * 4 * max_units));
    CK(cudaMalloc(&p.mean, p.m * 4));
    CK(cudaMalloc(&p.rstd, p.m * 4));
    CK(cudaMalloc(&p.slots, (size_t)max_units * 2 * 2 * 16 * 1024 * 4));
    CK(cudaMalloc(&p.counters, (max_units + 1) * 4));
    CK(cudaMemcpy(p.x, hx.data(), e * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p.dy, hdy.data(), e * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p.w, hw.data(), n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p.mean, hmean.data(), p.m * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p.rstd, hrstd.data(), p.m * 4, cudaMemcpyHostToDevice));
    const long long v = e / 4;
    const float r2w1 = time_ms([&] { read2_write1<<<sms * 8, 256>>>(p.x, p.dy, p.dx, v); }, 10);
    // The copy ceiling: a copy's time for the kernel's bytes (x to dx, 2 x 512 MB moved, scaled).
    const float copy = time_ms([&] { copy_kernel<<<sms * 8, 256>>>(p.x, p.dx, v); }, 10);
    const double bytes = 3.0 * e * 4;
    const float ceiling = copy * (float)(bytes / (2.0 * (double)e * 4));
    std::printf("N = %lld, M = %lld: %.0f MB moved; copy ceiling %.4f ms (%.0f GB/s), read 2 write 1 %.4f ms (%.1f%% of copy)\n",
                n, p.m, bytes / 1e6, ceiling, bytes / ceiling / 1e6, r2w1, 100.0 * ceiling / r2w1);
    if (n == 262144) {
      run_config<512, 1, 1>(p, 1, sms, ceiling, ref_dw, ref_db, hx, hdy, hw, hmean, hrstd);
      run_config<512, 1, 2>(p, 1, sms, ceiling, ref_dw, ref_db, hx, hdy, hw, hmean, hrstd);
      run_config<512, 1, 4>(p, 1, sms, ceiling, ref_dw, ref_db, hx, hdy, hw, hmean, hrstd);
      run_config<512, 1, 8>(p, 1, sms, ceiling, ref_dw, ref_db, hx, hdy, hw, hmean, hrstd);
      run_config<512, 2, 2>(p, 2, sms / 2, ceiling, ref_dw, ref_db, hx, hdy, hw, hmean, hrstd);
      run_config<512, 2, 4>(p, 2, sms / 2, ceiling, ref_dw, ref_db, hx, hdy, hw, hmean, hrstd);
      run_config<512, 4, 1>(p, 4, sms / 4, ceiling, ref_dw, ref_db, hx, hdy, hw, hmean, hrstd);
      run_config<512, 4, 2>(p, 4, sms / 4, ceiling, ref_dw, ref_db, hx, hdy, hw, hmean, hrstd);
    } else {
      run_config<128, 1, 4>(p, 1, sms, ceiling, ref_dw, ref_db, hx, hdy, hw, hmean, hrstd);
      run_config<128, 1, 8>(p, 1, sms, ceiling, ref_dw, ref_db, hx, hdy, hw, hmean, hrstd);
      run_config<256, 1, 4>(p, 2, sms / 2, ceiling, ref_dw, ref_db, hx, hdy, hw, hmean, hrstd);
      run_config<256, 1, 8>(p, 2, sms / 2, ceiling, ref_dw, ref_db, hx, hdy, hw, hmean, hrstd);
      run_config<512, 1, 2>(p, 4, sms / 4, ceiling, ref_dw, ref_db, hx, hdy, hw, hmean, hrstd);
      run_config<512, 1, 4>(p, 4, sms / 4, ceiling, ref_dw, ref_db, hx, hdy, hw, hmean, hrstd);
    }
    for (void* q : {(void*)p.x, (void*)p.dy, (void*)p.dx, (void*)p.w, (void*)p.dw, (void*)p.db, (void*)p.dw_part,
                    (void*)p.db_part, (void*)p.mean, (void*)p.rstd, (void*)p.slots, (void*)p.counters})
      CK(cudaFree(q));
  }
  return 0;
}
