"""Summarize the `TL` lines that a `variant_probe.py timeline` kernel prints: where a
persistent wgmma kernel's time goes, block by block and tile by tile.

    python3 tools/perf/timeline_summary.py BENCH_OUTPUT.txt [--ideal-cycles N]

A TL line: block, SM, globaltimer at the block's start and end (ns), then in clock64
cycles from the block's start: its end, and (start, mainloop end) of its tiles 0-3.
Printed: the blocks' start skew and end spread (ns), and per tile position the median
cycles from the block's start to the tile's start, of its mainloop, and of what follows
the mainloop until the next tile starts (the epilogue and the turn to the next tile;
for the last tile, until the block ends). --ideal-cycles: the mainloop at the tensor
cores' peak (a 128x256 tile at K = 4096: 128 * 256 * 4096 * 2 / 4096 FLOP a clock).
"""
import argparse
import statistics
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--ideal-cycles", type=float, default=0)
    a = ap.parse_args()
    rows = []
    for line in open(a.path):
        f = line.split()
        if len(f) == 14 and f[0] == "TL":
            rows.append([int(x) for x in f[1:]])
    if not rows:
        sys.exit(f"{a.path}: no TL lines")
    g0 = min(r[2] for r in rows)
    starts = [r[2] - g0 for r in rows]
    ends = [r[3] - g0 for r in rows]
    print(f"{len(rows)} blocks; start skew {max(starts)} ns (median {statistics.median(starts):.0f}); "
          f"ends from {min(ends)} to {max(ends)} ns after the first start (spread {max(ends) - min(ends)} ns)")
    print(f"block cycles: median {statistics.median(r[4] for r in rows):.0f}, max {max(r[4] for r in rows)}")
    for t in range(4):
        have = [r for r in rows if r[5 + 2 * t + 1] > 0]
        if not have:
            continue
        begin = [r[5 + 2 * t] for r in have]
        main_ = [r[5 + 2 * t + 1] - r[5 + 2 * t] for r in have]
        after = []
        for r in have:
            nxt = r[5 + 2 * (t + 1)] if t < 3 and r[5 + 2 * (t + 1) + 1] > 0 else r[4]
            after.append(nxt - r[5 + 2 * t + 1])
        ideal = f" ({statistics.median(main_) / a.ideal_cycles:.3f}x the ideal)" if a.ideal_cycles else ""
        print(f"tile {t}: {len(have)} blocks; starts at {statistics.median(begin):.0f}; mainloop "
              f"{statistics.median(main_):.0f} (min {min(main_)}, max {max(main_)}){ideal}; then "
              f"{statistics.median(after):.0f} until the next tile or the end")


if __name__ == "__main__":
    main()
