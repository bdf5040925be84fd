#!/usr/bin/env python3
"""Prints the tables of an `epifuse bench --json` result file."""
import json
import sys

for path in sys.argv[1:]:
    doc = json.load(open(path))
    for r in doc["results"]:
        m, n = r["shape"]
        f, c = r["fused"], r["copy"]
        print(f"== {doc['chain']} {m} x {n} on {r['device']} ({r['bytes'] / 1e6:.1f} MB moved)")
        print(f"  {'copy ceiling (DtoD)':<30} {c['ms']:.4f} ms {c['gbps']:7.0f} GB/s  100.0%")
        print(f"  {'fused ' + f['tile']:<30} {f['ms']:.4f} ms {f['gbps']:7.0f} GB/s {100 * f['of_copy']:6.1f}%")
        if "unfused" in r:
            u = r["unfused"]
            gbps = r["bytes"] / u["ms"] / 1e6
            print(f"  {'unfused (%d kernels)' % u['kernels']:<30} {u['ms']:.4f} ms {gbps:7.0f} GB/s "
                  f"{100 * gbps / c['gbps']:6.1f}%   fused {u['speedup']:.2f}x faster")
        if r["sweep"]:
            print("  sweep: " + "  ".join(f"t{s['threads']}/{s['blocks_per_sm'] or 'cover'}:{100 * s['of_copy']:.0f}%"
                                          for s in r["sweep"]))
        h = r["host"]
        print(f"  host: cold compile {h['compile_ms']:.1f} ms, hit {h['hit_us']:.2f} us, launch {h['launch_us']:.2f} us")
