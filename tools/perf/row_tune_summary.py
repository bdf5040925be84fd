#!/usr/bin/env python3
"""Summarise tools/perf/row_tune.sh: per chain and N, the fastest candidate
overall and the fastest with and without each tile feature (same process, same
data), as ratios to the fastest; and where row_tune.sh recorded it, the default
tile's time over the fastest, and the default with the column tree (t) added.
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
            dpath = os.path.join(d, f"default_{m.group(1)}_{m.group(2)}.txt")
            default = open(dpath).read().strip() if os.path.exists(dpath) else ""
            times = {c["tile"]: c["ms"] for c in cands}
            if default in times:
                line += f" | default {default} {times[default]/best['ms']:.3f}x"
                # t sits before k, kr and b in the tile's text
                tree = re.sub(r"(kr?)?(b)?$", r"t\1\2", default, count=1) if "t" not in default else ""
                if tree in times:
                    line += f", +t {times[tree]/best['ms']:.3f}x"
            rows.append((m.group(1), int(m.group(2)), line))
    for _, _, line in sorted(rows):
        print(line)

if __name__ == "__main__":
    main(sys.argv[1])
