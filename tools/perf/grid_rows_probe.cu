// Probe: the layernorm backward at long rows with each row split over G blocks
// of the whole grid, the blocks of a row meeting in global memory (an L2
// counter and slots) instead of a thread-block cluster's shared memory. The
// row family's cluster tiles hold a row in 8 or 16 blocks, so at N = 262,144
// seven clusters of 16 fill 112 of an H100's 132 SMs (docs/grid-rows.md); a
// grid of U units x G blocks can fill all of them. This times that shape of
// kernel by hand, before any of it goes into the family.
//
// dy and x [M,N] row-major (f32 or bf16), w [N] and the forward's mean and
// rstd [M] in f32, as examples/backward/layernorm_backward.json has them
// (its weight in f32 here):
//   xhat = (x - mean) * rstd, g = w * dy,
//   dx   = rstd * (g - (sum(g) + xhat * sum(g * xhat)) / N)   (x's dtype),
//   dw   = col_sum(dy * xhat), db = col_sum(dy)                (f32).
// Block b is rank b % G of unit b / G; unit u takes rows u, u + U, ... in
// batches of R rows, each batch one exchange: the block's 2R partial sums go
// to slots in global memory, a counter of the unit counts the blocks in, and
// every block adds the G partials in rank order (the same bits in every block).
// The next batch's x and dy are loaded before the exchange, so the wait
// overlaps their copies. Measured on an H200 it reached 42-60% of copy where the
// cluster tiles reach 63-89%: the exchange costs 4-5 us (docs/grid-rows.md). Column sums stay in registers (a block owns its
// columns); a second kernel adds the units' partial rows in unit order.
// The grid is launched cooperatively: the driver refuses a grid whose blocks
// cannot all be resident, instead of the wait never ending.
//
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o grid_rows_probe tools/perf/grid_rows_probe.cu
// Run:   ./grid_rows_probe    (each configuration's time, % of the same run's copy ceiling, and its check)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(call)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

// A 16-byte vector of the [M,N] tensors: 4 f32 or 8 bf16 elements.
struct F32 {
  static constexpr int VEC = 4;
  static constexpr const char* name = "f32";
  __device__ static void unpack(const uint4 r, float (&v)[VEC]) {
    v[0] = __uint_as_float(r.x); v[1] = __uint_as_float(r.y); v[2] = __uint_as_float(r.z); v[3] = __uint_as_float(r.w);
  }
  __device__ static uint4 pack(const float (&v)[VEC]) {
    return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
  }
};
struct BF16 {
  static constexpr int VEC = 8;
  static constexpr const char* name = "bf16";
  __device__ static void unpack(const uint4 r, float (&v)[VEC]) {
    const unsigned w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
  __device__ static unsigned round(float f) {  // to nearest even; the inputs here are finite
    const unsigned u = __float_as_uint(f);
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  }
  __device__ static uint4 pack(const float (&v)[VEC]) {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = round(v[2 * i]) | (round(v[2 * i + 1]) << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
};

struct Args {
  const uint4* x;
  const uint4* dy;
  const float* w;
  const float* mean;
  const float* rstd;
  uint4* dx;
  float* dw_part;      // [U][N]
  float* db_part;
  float* slots;        // [U][2][2R][G]
  unsigned* counters;  // [U] arrivals, then one exit counter
  long long m, nv, n;  // rows, vectors a row, elements a row
  int units, g;
};

constexpr int k_max_g = 160;  // blocks a row

__device__ __forceinline__ void arrive_release(unsigned* p) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" : : "l"(p) : "memory");
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <class E, int THREADS, int J, int R, bool SYNC_WARP>
struct Block {
  static constexpr int WARPS = THREADS / 32, VEC = E::VEC;
  const Args& a;
  long long v0, nvb;  // this block's first vector of a row, and how many it has
  int unit, rank;
  float w[J][VEC];
  float dw[J][VEC], db[J][VEC];
  float* red;  // [WARPS][2R]
  float* tot;  // [2R]

  // With SYNC_WARP the block has one more warp, without data: it does the exchange's
  // arrival and wait, so its release has none of the prefetched loads to wait for
  // (at the price of registers: 17 warps leave 96 a thread where 16 leave 128).
  // Without it, thread 0 does.
  __device__ bool has(int j) const { return threadIdx.x < THREADS && threadIdx.x + (long long)j * THREADS < nvb; }
  __device__ long long vec(int j) const { return v0 + threadIdx.x + (long long)j * THREADS; }
  __device__ long long row_of(long long batch, int k) const { return unit + (batch * R + k) * a.units; }

  __device__ void load(long long batch, uint4 (&xr)[R][J], uint4 (&dr)[R][J]) const {
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const long long row = row_of(batch, k);
#pragma unroll
      for (int j = 0; j < J; ++j)
        if (row < a.m && has(j)) {
          xr[k][j] = __ldcs(a.x + row * a.nv + vec(j));
          dr[k][j] = __ldcs(a.dy + row * a.nv + vec(j));
        }
    }
  }

  __device__ void run_batch(long long batch, const uint4 (&xr)[R][J], const uint4 (&dr)[R][J]) {
    float part[2 * R], mean[R], rstd[R];
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const long long row = row_of(batch, k);
      mean[k] = row < a.m ? a.mean[row] : 0.f;
      rstd[k] = row < a.m ? a.rstd[row] : 0.f;
      float s = 0.f, t = 0.f;
#pragma unroll
      for (int j = 0; j < J; ++j)
        if (row < a.m && has(j)) {
          float x[VEC], d[VEC];
          E::unpack(xr[k][j], x);
          E::unpack(dr[k][j], d);
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            const float g = w[j][i] * d[i];
            s += g;
            t += g * ((x[i] - mean[k]) * rstd[k]);
          }
        }
      part[2 * k] = s;
      part[2 * k + 1] = t;
    }
    // The block's partials: each warp's, then the warps' in order.
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < 2 * R; ++k)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) part[k] += __shfl_xor_sync(0xffffffffu, part[k], o);
    if (lane == 0 && warp < WARPS)
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
    // A grid barrier in one unit: the block's stores, a barrier, then the sync
    // warp's release arrival and its acquire spin.
    __syncthreads();
    if (threadIdx.x == (SYNC_WARP ? THREADS : 0)) {
      arrive_release(counter);
      const unsigned target = (unsigned)((batch + 1) * a.g);
      long long spins = 0;
      while (ld_acquire(counter) < target)
        if (++spins > (1ll << 28)) {
          printf("grid_rows_probe: block %d waited too long at batch %lld\n", blockIdx.x, batch);
          __trap();
        }
    }
    __syncthreads();
    // Every block adds the G partials of each sum in the same order (a warp a sum,
    // all its loads issued at once, then a fixed tree): the same bits in every block.
    for (int k = warp; k < 2 * R; k += WARPS + SYNC_WARP) {
      float v[k_max_g / 32];
#pragma unroll
      for (int q = 0; q < k_max_g / 32; ++q) {
        const int r = lane + 32 * q;
        v[q] = r < a.g ? __ldcg(slots + k * a.g + r) : 0.f;
      }
      float s = 0.f;
#pragma unroll
      for (int q = 0; q < k_max_g / 32; ++q) s += v[q];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (lane == 0) tot[k] = s;
    }
    __syncthreads();
    const float inv_n = 1.0f / (float)a.n;
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const long long row = row_of(batch, k);
      const float sg = tot[2 * k] * inv_n, sgx = tot[2 * k + 1] * inv_n, m = mean[k], r = rstd[k];
#pragma unroll
      for (int j = 0; j < J; ++j)
        if (row < a.m && has(j)) {
          float x[VEC], d[VEC], o[VEC];
          E::unpack(xr[k][j], x);
          E::unpack(dr[k][j], d);
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            const float h = (x[i] - m) * r;
            o[i] = r * (w[j][i] * d[i] - (sg + h * sgx));
            dw[j][i] += d[i] * h;
            db[j][i] += d[i];
          }
          __stcs(a.dx + row * a.nv + vec(j), E::pack(o));
        }
    }
  }
};

template <class E, int THREADS, int J, int R, bool SYNC_WARP>
__global__ void __launch_bounds__(THREADS + 32 * SYNC_WARP, 1) ln_backward_grid(Args a) {
  __shared__ float red[(THREADS / 32) * 2 * R];
  __shared__ float tot[2 * R];
  constexpr int VEC = E::VEC;
  Block<E, THREADS, J, R, SYNC_WARP> b{a};
  b.unit = blockIdx.x / a.g;
  b.rank = blockIdx.x % a.g;
  b.v0 = a.nv * b.rank / a.g;
  b.nvb = a.nv * (b.rank + 1) / a.g - b.v0;
  b.red = red;
  b.tot = tot;
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      b.w[j][i] = b.has(j) ? a.w[b.vec(j) * VEC + i] : 0.f;
      b.dw[j][i] = 0.f;
      b.db[j][i] = 0.f;
    }
  const long long rows = (a.m - b.unit + a.units - 1) / a.units;  // this unit's rows
  const long long batches = (rows + R - 1) / R;
  uint4 x0[R][J], d0[R][J], x1[R][J], d1[R][J];
  b.load(0, x0, d0);
  for (long long i = 0; i < batches; i += 2) {
    if (i + 1 < batches) b.load(i + 1, x1, d1);
    b.run_batch(i, x0, d0);
    if (i + 1 >= batches) break;
    if (i + 2 < batches) b.load(i + 2, x0, d0);
    b.run_batch(i + 1, x1, d1);
  }
#pragma unroll
  for (int j = 0; j < J; ++j)
    if (b.has(j))
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        a.dw_part[(long long)b.unit * a.n + b.vec(j) * VEC + i] = b.dw[j][i];
        a.db_part[(long long)b.unit * a.n + b.vec(j) * VEC + i] = b.db[j][i];
      }
  // The last block out sets the counters back to zero for the next launch.
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* exit_counter = a.counters + a.units;
    __threadfence();
    if (atomicAdd(exit_counter, 1u) == gridDim.x - 1) {
      for (int u = 0; u < a.units; ++u) a.counters[u] = 0u;
      *exit_counter = 0u;
      __threadfence();
    }
  }
}

// dw and db: the units' partial rows added in unit order.
__global__ void add_units(const float* dw_part, const float* db_part, float* dw, float* db, long long n, int units) {
  for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < n; c += (long long)gridDim.x * blockDim.x) {
    float s = dw_part[c], t = db_part[c];
    for (int u = 1; u < units; ++u) {
      s += dw_part[u * n + c];
      t += db_part[u * n + c];
    }
    dw[c] = s;
    db[c] = t;
  }
}

// The copy ceiling's kernel: 16-byte vectors, grid-stride.
__global__ void copy_kernel(const uint4* x, uint4* o, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    __stcs(o + i, __ldcs(x + i));
}

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

// One problem on the device, with its host copy (x and dy as the device holds them) and
// the double reference of dw and db.
struct Problem {
  const char* dtype;
  int bytes;  // of an element
  long long m, n;
  void *x, *dy, *dx;
  float *w, *dw, *db, *dw_part, *db_part, *mean, *rstd, *slots;
  unsigned* counters;
  std::vector<float> hx, hdy, hw, hmean, hrstd;
  std::vector<double> ref_dw, ref_db;
  float ceiling_ms;
};
constexpr int k_max_units = 8;

template <class E, int THREADS, int J, int R, bool SYNC_WARP = false>
void run_config(Problem& p, int units, int g) {
  constexpr int BLOCK = THREADS + 32 * SYNC_WARP;
  constexpr int VEC = E::VEC;
  const long long nv = p.n / VEC, per_block = (nv + g - 1) / g;
  std::printf("  %-4s U=%-2d G=%-3d t%-4d j%d r%d%s: ", E::name, units, g, THREADS, J, R, SYNC_WARP ? " +sync warp" : "");
  if (per_block > (long long)THREADS * J) {
    std::printf("a block's %lld vectors exceed %d\n", per_block, THREADS * J);
    return;
  }
  int dev = 0, sms = 0, per_sm = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ln_backward_grid<E, THREADS, J, R, SYNC_WARP>, BLOCK, 0));
  if (units > k_max_units || 2 * R > 16 || g > k_max_g || (long long)units * g > (long long)sms * per_sm) {
    std::printf("%d blocks do not fit (%d SMs x %d resident, at most %d units and 8 rows a batch)\n", units * g, sms,
                per_sm, k_max_units);
    return;
  }
  Args a{static_cast<const uint4*>(p.x), static_cast<const uint4*>(p.dy), p.w, p.mean, p.rstd, static_cast<uint4*>(p.dx),
         p.dw_part, p.db_part, p.slots, p.counters, p.m, nv, p.n, units, g};
  CK(cudaMemset(p.counters, 0, (k_max_units + 1) * sizeof(unsigned)));
  auto launch = [&] {
    void* params[] = {&a};
    CK(cudaLaunchCooperativeKernel((const void*)ln_backward_grid<E, THREADS, J, R, SYNC_WARP>, dim3(units * g), dim3(BLOCK),
                                   params, 0, 0));
    add_units<<<sms * 4, 256>>>(p.dw_part, p.db_part, p.dw, p.db, p.n, units);
  };
  const float ms = time_ms(launch, 10);
  // Check: dw and db over all rows, dx on three rows, against double on the host.
  std::vector<float> dw(p.n), db(p.n);
  CK(cudaMemcpy(dw.data(), p.dw, p.n * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(db.data(), p.db, p.n * 4, cudaMemcpyDeviceToHost));
  double err = 0, scale = 0;
  for (long long c = 0; c < p.n; ++c) {
    err = std::max(err, std::max(std::fabs(dw[c] - p.ref_dw[c]), std::fabs(db[c] - p.ref_db[c])));
    scale = std::max(scale, std::max(std::fabs(p.ref_dw[c]), std::fabs(p.ref_db[c])));
  }
  std::vector<unsigned char> raw(p.n * p.bytes);
  double dx_err = 0, dx_scale = 0;
  for (long long row : {0ll, p.m / 3, p.m - 1}) {
    CK(cudaMemcpy(raw.data(), static_cast<unsigned char*>(p.dx) + row * p.n * p.bytes, p.n * p.bytes,
                  cudaMemcpyDeviceToHost));
    double sg = 0, sgx = 0;
    for (long long c = 0; c < p.n; ++c) {
      const double h = ((double)p.hx[row * p.n + c] - p.hmean[row]) * p.hrstd[row];
      const double gg = (double)p.hw[c] * p.hdy[row * p.n + c];
      sg += gg;
      sgx += gg * h;
    }
    for (long long c = 0; c < p.n; ++c) {
      const double h = ((double)p.hx[row * p.n + c] - p.hmean[row]) * p.hrstd[row];
      const double ref = p.hrstd[row] * ((double)p.hw[c] * p.hdy[row * p.n + c] - (sg + h * sgx) / (double)p.n);
      float got;
      if (p.bytes == 4) {
        std::memcpy(&got, raw.data() + c * 4, 4);
      } else {
        const unsigned u = (unsigned)(raw[c * 2] | (raw[c * 2 + 1] << 8)) << 16;
        std::memcpy(&got, &u, 4);
      }
      dx_err = std::max(dx_err, std::fabs(got - ref));
      dx_scale = std::max(dx_scale, std::fabs(ref));
    }
  }
  const double dx_tol = p.bytes == 4 ? 1e-4 : 1e-2;  // bf16 dx: its own rounding, 2^-8 relative
  const bool ok = err <= 1e-4 * scale && dx_err <= dx_tol * dx_scale;
  std::printf("%.4f ms, %.1f%% of copy | dw,db max err %.2e of %.2e, dx %.2e of %.2e: %s\n", ms,
              100.0 * p.ceiling_ms / ms, err, scale, dx_err, dx_scale, ok ? "ok" : "MISMATCH");
}

// bf16 bits of a float, rounded to nearest even (finite inputs), and back.
unsigned short to_bf16(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(unsigned short h) {
  const unsigned u = (unsigned)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

Problem make_problem(long long n, bool bf16, int sms) {
  Problem p;
  p.dtype = bf16 ? "bf16" : "f32";
  p.bytes = bf16 ? 2 : 4;
  p.n = n;
  p.m = (1ll << 27) / n;
  const long long e = p.m * p.n;
  p.hx.resize(e);
  p.hdy.resize(e);
  p.hw.resize(n);
  p.hmean.resize(p.m);
  p.hrstd.resize(p.m);
  unsigned s = 12345u;
  auto rnd = [&s] {
    s = s * 1664525u + 1013904223u;
    return (float)((s >> 8) * (1.0 / 16777216.0)) * 2.f - 1.f;
  };
  for (auto& v : p.hx) v = bf16 ? from_bf16(to_bf16(rnd())) : rnd();
  for (auto& v : p.hdy) v = bf16 ? from_bf16(to_bf16(rnd())) : rnd();
  for (auto& v : p.hw) v = 1.f + 0.5f * rnd();
  for (long long r = 0; r < p.m; ++r) {
    p.hmean[r] = 0.1f * rnd();
    p.hrstd[r] = 1.5f + 0.5f * rnd();
  }
  p.ref_dw.assign(n, 0.0);
  p.ref_db.assign(n, 0.0);
  for (long long r = 0; r < p.m; ++r)
    for (long long c = 0; c < n; ++c) {
      const double d = p.hdy[r * n + c];
      p.ref_dw[c] += d * (((double)p.hx[r * n + c] - p.hmean[r]) * p.hrstd[r]);
      p.ref_db[c] += d;
    }
  CK(cudaMalloc(&p.x, e * p.bytes));
  CK(cudaMalloc(&p.dy, e * p.bytes));
  CK(cudaMalloc(&p.dx, e * p.bytes));
  CK(cudaMalloc(&p.w, n * 4));
  CK(cudaMalloc(&p.dw, n * 4));
  CK(cudaMalloc(&p.db, n * 4));
  CK(cudaMalloc(&p.dw_part, n * 4 * k_max_units));
  CK(cudaMalloc(&p.db_part, n * 4 * k_max_units));
  CK(cudaMalloc(&p.mean, p.m * 4));
  CK(cudaMalloc(&p.rstd, p.m * 4));
  CK(cudaMalloc(&p.slots, (size_t)k_max_units * 2 * 16 * 1024 * 4));  // [U][2][2R <= 16][G <= 1024]
  CK(cudaMalloc(&p.counters, (k_max_units + 1) * 4));
  if (bf16) {
    std::vector<unsigned short> h(e);
    for (long long i = 0; i < e; ++i) h[i] = to_bf16(p.hx[i]);
    CK(cudaMemcpy(p.x, h.data(), e * 2, cudaMemcpyHostToDevice));
    for (long long i = 0; i < e; ++i) h[i] = to_bf16(p.hdy[i]);
    CK(cudaMemcpy(p.dy, h.data(), e * 2, cudaMemcpyHostToDevice));
  } else {
    CK(cudaMemcpy(p.x, p.hx.data(), e * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p.dy, p.hdy.data(), e * 4, cudaMemcpyHostToDevice));
  }
  CK(cudaMemcpy(p.w, p.hw.data(), n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(p.mean, p.hmean.data(), p.m * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(p.rstd, p.hrstd.data(), p.m * 4, cudaMemcpyHostToDevice));
  // The copy ceiling: a copy's time for the kernel's bytes (x to dx, scaled from e * bytes each way).
  const long long vectors = e * p.bytes / 16;
  const float copy = time_ms([&] { copy_kernel<<<sms * 8, 256>>>(static_cast<const uint4*>(p.x), static_cast<uint4*>(p.dx), vectors); }, 10);
  const double moved = 3.0 * e * p.bytes;
  p.ceiling_ms = copy * (float)(moved / (2.0 * e * p.bytes));
  std::printf("%s, N = %lld, M = %lld: %.0f MB moved (x, dy, dx); copy ceiling %.4f ms (%.0f GB/s)\n", p.dtype, n, p.m,
              moved / 1e6, p.ceiling_ms, moved / p.ceiling_ms / 1e6);
  return p;
}

void free_problem(Problem& p) {
  for (void* q : {p.x, p.dy, p.dx, (void*)p.w, (void*)p.dw, (void*)p.db, (void*)p.dw_part, (void*)p.db_part,
                  (void*)p.mean, (void*)p.rstd, (void*)p.slots, (void*)p.counters})
    CK(cudaFree(q));
}

int main() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("# %s, %d SMs; layernorm backward (dx, dw, db), M x N = 2^27; U units x G blocks a row\n", prop.name, sms);
  {
    Problem p = make_problem(262144, false, sms);  // a block's part: 65,536 / G vectors of 4
    run_config<F32, 512, 1, 1>(p, 1, sms);
    run_config<F32, 512, 1, 2>(p, 1, sms);
    run_config<F32, 512, 1, 4>(p, 1, sms);
    run_config<F32, 512, 1, 8>(p, 1, sms);
    run_config<F32, 512, 2, 2>(p, 2, sms / 2);
    run_config<F32, 512, 2, 4>(p, 2, sms / 2);
    run_config<F32, 512, 4, 1>(p, 4, sms / 4);
    run_config<F32, 512, 4, 2>(p, 4, sms / 4);
    run_config<F32, 512, 1, 2, true>(p, 1, sms);
    run_config<F32, 512, 1, 4, true>(p, 1, sms);
    run_config<F32, 512, 2, 2, true>(p, 2, sms / 2);
    run_config<F32, 512, 4, 1, true>(p, 4, sms / 4);
    free_problem(p);
  }
  {
    Problem p = make_problem(65536, false, sms);  // 16,384 / G vectors of 4
    run_config<F32, 128, 1, 4>(p, 1, sms);
    run_config<F32, 128, 1, 8>(p, 1, sms);
    run_config<F32, 256, 1, 4>(p, 2, sms / 2);
    run_config<F32, 256, 1, 8>(p, 2, sms / 2);
    run_config<F32, 512, 1, 2>(p, 4, sms / 4);
    run_config<F32, 512, 1, 4>(p, 4, sms / 4);
    run_config<F32, 128, 1, 8, true>(p, 1, sms);
    run_config<F32, 256, 1, 8, true>(p, 2, sms / 2);
    run_config<F32, 512, 1, 4, true>(p, 4, sms / 4);
    free_problem(p);
  }
  {
    Problem p = make_problem(262144, true, sms);  // 32,768 / G vectors of 8
    run_config<BF16, 256, 1, 4>(p, 1, sms);
    run_config<BF16, 256, 1, 8>(p, 1, sms);
    run_config<BF16, 512, 1, 2>(p, 2, sms / 2);
    run_config<BF16, 512, 1, 4>(p, 2, sms / 2);
    run_config<BF16, 512, 2, 2>(p, 4, sms / 4);
    run_config<BF16, 256, 1, 8, true>(p, 1, sms);
    run_config<BF16, 512, 1, 4, true>(p, 2, sms / 2);
    run_config<BF16, 512, 2, 2, true>(p, 4, sms / 4);
    free_problem(p);
  }
  {
    Problem p = make_problem(65536, true, sms);  // 8,192 / G vectors of 8
    run_config<BF16, 64, 1, 8>(p, 1, sms);
    run_config<BF16, 128, 1, 4>(p, 2, sms / 2);
    run_config<BF16, 128, 1, 8>(p, 2, sms / 2);
    run_config<BF16, 256, 1, 4>(p, 4, sms / 4);
    run_config<BF16, 256, 1, 8>(p, 4, sms / 4);
    run_config<BF16, 64, 1, 8, true>(p, 1, sms);
    run_config<BF16, 128, 1, 8, true>(p, 2, sms / 2);
    run_config<BF16, 256, 1, 8, true>(p, 4, sms / 4);
    free_problem(p);
  }
  return 0;
}
