// variant: the column tree through shared memory, one (sum, item) at a time (ROWS == 1)
template <int C, int ITEMS, int VEC, int THREADS, int F, class ColOf, class Store>
__device__ __forceinline__ void ef_col_sums_finish_smem(const float (&cs)[C][ITEMS][VEC], float4* sm, unsigned* flag,
                                                   unsigned* counters, float* partials, long long n, long long unit,
                                                   long long units, int rank, int cluster, ColOf col_of, Store store) {
  static_assert(VEC % 4 == 0, "float4 slots");
  __syncthreads();  // every thread has read the ring's last row
#pragma unroll
  for (int k = 0; k < C; ++k)
#pragma unroll
    for (int it = 0; it < ITEMS; ++it)
#pragma unroll
      for (int q = 0; q < VEC / 4; ++q)
        sm[((k * ITEMS + it) * (VEC / 4) + q) * THREADS] =
            make_float4(cs[k][it][4 * q], cs[k][it][4 * q + 1], cs[k][it][4 * q + 2], cs[k][it][4 * q + 3]);
  auto slot_load = [&](int k, int it, float (&v)[VEC]) {
#pragma unroll
    for (int q = 0; q < VEC / 4; ++q) {
      const float4 w = sm[((k * ITEMS + it) * (VEC / 4) + q) * THREADS];
      v[4 * q] = w.x; v[4 * q + 1] = w.y; v[4 * q + 2] = w.z; v[4 * q + 3] = w.w;
    }
  };
  long long idx = unit, count = units, span = 1, off = 0;
  while (count > 1) {
    const long long q = idx / F;
    const int expect = (int)(count - q * F < F ? count - q * F : F);
    if (expect > 1) {
#pragma unroll 1
      for (int kit = 0; kit < C * ITEMS; ++kit) {
        const int k = kit / ITEMS, it = kit % ITEMS;
        const long long col = col_of(it);
        if (col < 0) continue;
        float v[VEC];
        slot_load(k, it, v);
        ef_col_partial_store_vec<VEC>(partials + (k * units + idx * span) * n + col, v);
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
#pragma unroll 4
        for (int ch = 0; ch < expect; ++ch) {
          const long long child = q * F + ch;
          float v[VEC];
          if (child == idx) slot_load(k, it, v);
          else ef_col_partial_load_vec<VEC>(partials + (k * units + child * span) * n + col, v);
#pragma unroll
          for (int j = 0; j < VEC; ++j) t[j] = ch == 0 ? v[j] : t[j] + v[j];
        }
#pragma unroll
        for (int qq = 0; qq < VEC / 4; ++qq)
          sm[((k * ITEMS + it) * (VEC / 4) + qq) * THREADS] = make_float4(t[4 * qq], t[4 * qq + 1], t[4 * qq + 2], t[4 * qq + 3]);
      }
    }
    off += (count + F - 1) / F;
    idx = q;
    span *= F;
    count = (count + F - 1) / F;
  }
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    const long long col = col_of(it);
    if (col < 0) continue;
#pragma unroll
    for (int k = 0; k < C; ++k) {
      float v[VEC];
      slot_load(k, it, v);
      store(k, col, v);
    }
  }
}
