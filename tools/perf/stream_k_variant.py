#!/usr/bin/env python3
"""The stream-K probe of docs/stream-k.md: a GEMM chain's wgmma kernel, emitted by
`epifuse emit`, with its walk of whole units replaced by a stream-K walk, written as a
`--variant` source for `epifuse bench`, which times it in turns with the kernel it was
made from and checks its outputs against that kernel's.

    python3 tools/perf/stream_k_variant.py CHAIN.json --shape M,N,K [--tile T] -o VARIANT.cu
    build/epifuse bench CHAIN.json --shape M,N,K --tile T --variant VARIANT.cu --no-unfused --no-sweep

Without --tile the variant is of the default tile (bench it with --no-tune). The walk:
the whole waves but one run whole units as before; the last partial wave's units and one
whole wave's are cut into even shares of BK steps, one a block. A block's piece of a unit
whose first step another block holds goes to a partial-sum buffer with a flag; the
unit's first block adds those pieces in block order and runs the epilogue. The buffers
and flags are module globals here (a probe); the product would keep them in the kernel's
workspace and launch cooperatively (docs/stream-k.md).

The edits are exact-text replacements of the template's walk: if the template changes,
this fails with the text it could not find rather than writing a wrong kernel.
Wgmma tiles without a cluster only.
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HELPERS = '''
// ---- Stream-K probe (docs/stream-k.md, tools/perf/stream_k_variant.py): the
// whole-unit walk of the last partial wave and one whole wave before it replaced
// by even shares of BK steps. Partial sums and flags in module globals (a probe:
// the product would keep them in the kernel's workspace).
constexpr int SK_MAX_BLOCKS = 160;
__device__ float sk_partials[SK_MAX_BLOCKS * BM * BN];  // a block's one piece that another block owns
__device__ unsigned sk_flags[SK_MAX_BLOCKS];            // 1 while that piece waits to be added
// Ping-pong: a warpgroup holds a whole tile and syncs alone; cooperative: the two
// warpgroups hold the two halves of one tile and sync together.
constexpr int SK_SYNC_THREADS = PINGPONG ? 128 : 256;

struct SkWalk {
  int G, KT, dp_units;
  long long T;  // the cut units' k steps, laid end to end
};
__device__ __forceinline__ SkWalk sk_walk(int units, int G, int KT) {
  const int waves = units / G, rem = units % G;
  int dp = rem == 0 ? units : (waves == 0 ? 0 : (waves - 1) * G);
  if ((long long)(units - dp) * KT < G) dp = units;  // fewer steps than blocks: some shares would be empty
  return {G, KT, dp, (long long)(units - dp) * KT};
}
// f(unit, kb, ke, owner, cut) for block b's pieces in walk order: its whole
// units, then its share [T b / G, T (b + 1) / G) of the cut units' steps. Only
// a share's first piece can start inside a unit, so a block has at most one
// piece that another block owns.
template <class F>
__device__ __forceinline__ void sk_for_each(const SkWalk& w, int b, F&& f) {
  for (int unit = b; unit < w.dp_units; unit += w.G) f(unit, 0, w.KT, true, false);
  const long long lo = w.T * b / w.G, hi = w.T * (b + 1) / w.G;
  for (long long s0 = lo; s0 < hi;) {
    const int u = (int)(s0 / w.KT);
    const long long ub = (long long)u * w.KT, e = hi < ub + w.KT ? hi : ub + w.KT;
    const int kb = (int)(s0 - ub), ke = (int)(e - ub);
    f(w.dp_units + u, kb, ke, kb == 0, !(kb == 0 && ke == w.KT));
    s0 = e;
  }
}

// The producer's copy of one B tile'''

FIXUP = '''    if (cut) {
      // A piece another block owns: its partial sum to this block's buffer, then
      // the flag (after every thread's stores: fence, barrier). The owner adds the
      // unit's other pieces in block order (the same bits every run), then runs
      // the epilogue on the whole sum.
      const int tid = threadIdx.x % 128 + (PINGPONG ? 0 : wg * 128 * MI * NI * 4);
      const unsigned sync_id = PINGPONG ? 1 + wg : 1;
      if (!owner) {
        float* const part = sk_partials + (long long)blockIdx.x * (BM * BN);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int e = 0; e < 4; ++e) __stcg(part + ((mi * NI + ni) * 4 + e) * 128 + tid, acc[mi][ni][e]);
        __threadfence();
        ef_named_barrier_sync(sync_id, SK_SYNC_THREADS);
        if (threadIdx.x % SK_SYNC_THREADS == 0) ef_release_flag(sk_flags + blockIdx.x, 1u);
        return;
      }
      const long long unit_end = (long long)(unit - w.dp_units + 1) * w.KT;
      int j = blockIdx.x + 1;
      for (; j < w.G && w.T * j / w.G < unit_end; ++j) {
        ef_wait_flag(sk_flags + j, 1u);
        const float* const part = sk_partials + (long long)j * (BM * BN);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mi][ni][e] += __ldcg(part + ((mi * NI + ni) * 4 + e) * 128 + tid);
      }
      ef_named_barrier_sync(sync_id, SK_SYNC_THREADS);  // all have read: the flags go back to 0 for the next launch
      if (threadIdx.x % SK_SYNC_THREADS == 0)
        for (int i = blockIdx.x + 1; i < j; ++i) sk_flags[i] = 0u;
    }
'''

EDITS = [
    ("\n// The producer's copy of one B tile", HELPERS),
    ("  const int KT = (int)((p.k + BK - 1) / BK);\n",
     "  const int KT = (int)((p.k + BK - 1) / BK);\n"
     "  if (gridDim.x > SK_MAX_BLOCKS || CLUSTER != 1) __trap();\n"
     "  const SkWalk w = sk_walk(units, (int)gridDim.x, KT);\n"),
    # The producer walks the same pieces.
    ("      for (int unit = first_unit; unit < units; unit += unit_step) {\n"
     "        int m0, n0;\n"
     "        tile_origin(unit, units_m, tiles_n, rank, m0, n0);\n"
     "        for (int k0 = 0; k0 < KT * BK; k0 += BK) {",
     "      sk_for_each(w, blockIdx.x, [&](int unit, int kb, int ke, bool, bool) {\n"
     "        int m0, n0;\n"
     "        tile_origin(unit, units_m, tiles_n, rank, m0, n0);\n"
     "        for (int k0 = kb * BK; k0 < ke * BK; k0 += BK) {"),
    ("            phase ^= 1u;\n          }\n        }\n      }\n    }\n  } else {",
     "            phase ^= 1u;\n          }\n        }\n      });\n    }\n  } else {"),
    # The consumers: a piece's first step in the ring is the walk's steps before it.
    ("  for (int unit = first_unit; unit < units; unit += unit_step) {\n"
     "    ++local;\n"
     "    if (PINGPONG && (local & 1) != wg) continue;  // the other warpgroup's tile\n"
     "    // Where this tile's first k step sits in the ring (ping-pong skips the\n"
     "    // other warpgroup's KT steps; 64-bit: local * KT may pass 2^31).\n"
     "    const long long first = (long long)local * KT;",
     "  long long steps_before = 0;  // the walk's k steps before this piece: where its first sits in the ring\n"
     "  sk_for_each(w, blockIdx.x, [&](int unit, int kb, int ke, bool owner, bool cut) {\n"
     "    ++local;\n"
     "    const long long first = steps_before;\n"
     "    steps_before += ke - kb;\n"
     "    if (PINGPONG && (local & 1) != wg) return;  // the other warpgroup's piece"),
    ("    for (int kt = 0; kt < KT; ++kt) {\n      ef_mbar_wait(bars + 8 * s, phase);",
     "    for (int kt = kb; kt < ke; ++kt) {\n      ef_mbar_wait(bars + 8 * s, phase);"),
    ("          if constexpr (DUAL) ef_fence_register(acc1[mi][ni][e]);\n        }\n",
     "          if constexpr (DUAL) ef_fence_register(acc1[mi][ni][e]);\n        }\n" + FIXUP),
    ("    }\n  }\n  }\n  // No block leaves while its peer may still copy into it or arrive on its barriers.",
     "    }\n  });\n  }\n  // No block leaves while its peer may still copy into it or arrive on its barriers."),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("chain")
    ap.add_argument("--shape", required=True, help="M,N,K")
    ap.add_argument("--tile", help="a wgmma tile without a cluster (default: the chain's default tile)")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--epifuse", default=str(ROOT / "build" / "epifuse"))
    opt = ap.parse_args()
    cmd = [opt.epifuse, "emit", opt.chain, "--shape", opt.shape, "--target", "sm_90a"]
    if opt.tile:
        cmd += ["--tile", opt.tile]
    # The disk cache could hold a tuned tile for the chain: the default is what bench --no-tune times.
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "EPIFUSE_CACHE": "0"})
    if p.returncode != 0:
        sys.exit(f"stream_k_variant: {' '.join(cmd)} failed:\n{p.stderr}")
    src = p.stdout
    if "wgmma + TMA" not in src.splitlines()[0] or "constexpr bool DUAL = true;" in src:
        sys.exit("stream_k_variant: the kernel is not a single-GEMM wgmma kernel (pass a wgmma --tile, sm_90a)")
    for old, new in EDITS:
        if src.count(old) != 1:
            sys.exit(f"stream_k_variant: the template's text changed; expected once, found {src.count(old)} times:\n{old}")
        src = src.replace(old, new)
    if "CLUSTER = 1;" not in src:
        sys.exit("stream_k_variant: the tile has a cluster; the probe walks single blocks")
    out = Path(opt.output)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(src)
    tmp.replace(out)
    print(f"stream_k_variant: wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
