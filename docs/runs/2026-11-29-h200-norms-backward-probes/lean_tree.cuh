// variant: the column tree as a call of its own that holds few registers: the block's sums
// in local memory, one (sum, item) pair at a time, INFLIGHT children's loads in flight
template <int C, int ITEMS, int VEC, int THREADS, int GROUP, int F, int INFLIGHT, class ColOf, class Store>
__device__ __noinline__ void ef_col_sums_finish_lean(float (&cs)[C][ITEMS][VEC], float* buf, unsigned* flag,
                                                     unsigned* counters, float* partials, long long n, long long unit,
                                                     long long units, int rank, int cluster, ColOf col_of, Store store) {
  static_assert(THREADS == GROUP, "one row a block");
  long long idx = unit, count = units, span = 1, off = 0;
  while (count > 1) {
    const long long q = idx / F;
    const int expect = (int)(count - q * F < F ? count - q * F : F);
    if (expect > 1) {
#pragma unroll 1
      for (int kit = 0; kit < C * ITEMS; ++kit) {
        const int k = kit / ITEMS, it = kit % ITEMS;
        const long long col = col_of(it);
        if (col >= 0) ef_col_partial_store_vec<VEC>(partials + (k * units + idx * span) * n + col, cs[k][it]);
      }
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) {
        unsigned* c = counters + (off + q) * cluster + rank;
        const bool last = atomicAdd(c, 1u) == (unsigned)expect - 1;
        if (last) atomicExch(c, 0u);
        *flag = last ? 1u : 0u;
        __threadfence();
      }
      __syncthreads();
      if (*flag == 0) return;
#pragma unroll 1
      for (int kit = 0; kit < C * ITEMS; ++kit) {
        const int k = kit / ITEMS, it = kit % ITEMS;
        const long long col = col_of(it);
        if (col < 0) continue;
        float t[VEC];
#pragma unroll INFLIGHT
        for (int ch = 0; ch < expect; ++ch) {
          const long long child = q * F + ch;
          float v[VEC];
          if (child == idx) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[j] = cs[k][it][j];
          } else {
            ef_col_partial_load_vec<VEC>(partials + (k * units + child * span) * n + col, v);
          }
#pragma unroll
          for (int j = 0; j < VEC; ++j) t[j] = ch == 0 ? v[j] : t[j] + v[j];
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j) cs[k][it][j] = t[j];
      }
    }
    off += (count + F - 1) / F;
    idx = q;
    span *= F;
    count = (count + F - 1) / F;
  }
#pragma unroll 1
  for (int kit = 0; kit < C * ITEMS; ++kit) {
    const int k = kit / ITEMS, it = kit % ITEMS;
    const long long col = col_of(it);
    if (col >= 0) store(k, col, cs[k][it]);
  }
}
