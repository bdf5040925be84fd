#!/usr/bin/env python3
"""Table of tools/perf/row_bench.sh's output: % of the same-run copy ceiling per chain and N."""
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print(f"{'chain':18} {'N':>7}  {'tile':16} {'regs':>4}  {'fused':>6}  {'1 blk/row':>9}  {'copy GB/s':>9}")
for d in rows:
    if not d["bench"] or "results" not in d["bench"]:
        print(f"{d['chain']:18} {d['n']:7}  failed rc {d['rc']}: {d['bench']}")
        continue
    r = d["bench"]["results"][0]
    c, f, p = r["copy"]["ms"], r["fused"], r.get("per_row_grid")
    per_row = f"{c / p['ms'] * 100:8.1f}%" if p else f"{'':9}"
    print(f"{d['chain']:18} {d['n']:7}  {f['tile']:16} {f['registers']:4}  {c / f['ms'] * 100:5.1f}%  {per_row}  "
          f"{r['copy']['gbps']:9.0f}")
