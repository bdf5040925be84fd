#!/usr/bin/env python3
"""Summarise tools/perf/row_tune.sh: per chain and N, the fastest candidate
overall and the fastest with and without each tile feature (same process, same
data), as ratios to the fastest.
  tools/perf/row_tune_summary.py OUT_DIR"""
import glob, json, os, re, sys

FEATURES = {
    "keep": lambda t: "k" in re.sub(r"^r\d+v\d+x-?\d+", "", t),
    "c16": lambda t: "c16" in t,
    "ring": lambda t: re.search(r"s\d", t) is not None,
    # column-sum chains: the tree through the ring's shared memory, and a launch bound
    "tree": lambda t: "t" in t,
    "bound": lambda t: re.search(r"m\d", t) is not None,
}

def main(d):
    rows = []
    for path in sorted(glob.glob(os.path.join(d, "tune_*.json"))):
        m = re.match(r"tune_(.+)_(\d+)\.json", os.path.basename(path))
        try:
            doc = json.load(open(path))
        except json.JSONDecodeError:
            print(f"{path}: not JSON"); continue
        for res in doc.get("results", []):
            cands = [c for c in res["candidates"] if c["ms"] and c["ms"] > 0]
            best = min(cands, key=lambda c: c["ms"])
            line = f"{m.group(1):18} {int(m.group(2)):7}  best {best['tile']:18} {best['ms']*1e3:8.1f} us"
            for name, has in FEATURES.items():
                w = [c for c in cands if has(c["tile"])]
                wo = [c for c in cands if not has(c["tile"])]
                if w and wo:
                    bw, bwo = min(w, key=lambda c: c["ms"]), min(wo, key=lambda c: c["ms"])
                    line += f" | {name}: {bwo['ms']/bw['ms']:.3f}x ({bw['tile']})"
            rows.append((m.group(1), int(m.group(2)), line))
    for _, _, line in sorted(rows):
        print(line)

if __name__ == "__main__":
    main(sys.argv[1])
