import re, sys
# usage: mkcut.py in.cu out.cu what   (what: noclwait | nocs | both) -- timing probes, wrong values
src, dst, what = sys.argv[1:4]
t = open(src).read()
helper = r'''
// probe: the block's sum only (no cluster exchange): wrong values, timing only
template <int THREADS_, int K>
__device__ __forceinline__ void probe_block_sum(float (&v)[K], float* scratch, unsigned& ph) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v[k] += __shfl_xor_sync(0xffffffffu, v[k], o);
  float* half = scratch + ph * K * (THREADS_ / 32);
  ph ^= 1u;
  if (lane == 0)
#pragma unroll
    for (int k = 0; k < K; ++k) half[k * (THREADS_ / 32) + warp] = v[k];
  __syncthreads();
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float w = lane < THREADS_ / 32 ? half[k * (THREADS_ / 32) + lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) w += __shfl_xor_sync(0xffffffffu, w, o);
    v[k] = w;
  }
}
'''
if what in ("noclwait", "both"):
    k = t.index('extern "C" __global__')
    t = t[:k] + helper + t[k:]
    t = t.replace("  red.start();\n", "  red.start();\n  unsigned probe_ph = 0;\n", 1)
    n1 = t.count("red.sum_n(")
    t = re.sub(r"red\.sum_n\((\w+)\);", r"probe_block_sum<THREADS>(\1, scratch, probe_ph);", t)
    def one(m):
        return f"[&]{{ float a_[1] = {{{m.group(1)}}}; probe_block_sum<THREADS>(a_, scratch, probe_ph); return a_[0]; }}()"
    t, n2 = re.subn(r"red\.sum\((\w+)\)", one, t)
    assert n1 + n2 > 0
if what in ("nocs", "both"):
    t, n = re.subn(r"        cs\[\d+\]\[it\]\[j\] \+= c\d+;  // Note \[Column sums\]\n", "", t)
    assert n > 0
open(dst, "w").write(t)
