#!/usr/bin/env python3
"""Prints the tables of an `epifuse bench --json` result file."""
import json
import sys


def print_gemm(doc, r):
    g = r["gemm"]
    m, n, k = g["shape"]
    print(f"== {doc['chain']} {m} x {n} x {k} on {r['device']}")
    if g["cublaslt"]:
        print(f"  {g['cublaslt']}")
    print(f"  {'':<32} {'ms':>10} {'TFLOP/s':>9} {'time/cuBLAS':>12}")
    for row in g["rows"].values():
        ratio = f"{row['of_cublas']:.2f}x" if "of_cublas" in row else "-"
        print(f"  {row['label']:<32} {row['ms']:10.4f} {row['tflops']:9.1f} {ratio:>12}   {row['detail']}")
    for line in g["skipped"]:
        print(f"  {line}")
    for c in g["checks"]:
        print(f"  check {c['what']}: max |diff| {c['max_abs_diff']} (max |value| {c['max_abs']:.4g}): "
              f"{'ok' if c['ok'] else 'MISMATCH'}")


for path in sys.argv[1:]:
    doc = json.load(open(path))
    for r in doc["results"]:
        h = r["host"]
        if "gemm" in r:
            print_gemm(doc, r)
            print(f"  host: cold compile {h['compile_ms']:.1f} ms, hit {h['hit_us']:.2f} us, launch {h['launch_us']:.2f} us")
            continue
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
        print(f"  host: cold compile {h['compile_ms']:.1f} ms, hit {h['hit_us']:.2f} us, launch {h['launch_us']:.2f} us")
