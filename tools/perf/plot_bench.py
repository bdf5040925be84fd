#!/usr/bin/env python3
"""A chart (PNG) of `epifuse bench --json` results: GEMM chains as each row's time
over cuBLAS's GEMM alone measured in the same run (lower is better, 1.0 is cuBLAS),
memory-bound chains (elementwise and row kernels) as the fused kernel's share of the
same-run copy ceiling (higher is better, 100% is the copy).

    tools/perf/plot_bench.py --png OUT.png [--title TEXT] RESULT.json...

Needs matplotlib. The README's GEMM and row charts are made with it from the runs
named under their captions.
"""
import argparse
import json
import os
import sys


def chain_name(doc):
    return os.path.splitext(os.path.basename(doc["chain"]))[0]


def gemm_bars(results):
    """[(label, {row label: ratio})] for every GEMM result, in file order."""
    out = []
    for doc, r in results:
        g = r["gemm"]
        m, n, k = g["shape"]
        rows = {row["label"]: row["of_cublas"] for row in g["rows"].values() if "of_cublas" in row}
        out.append((f"{chain_name(doc)}\n{m}x{n}x{k}", rows))
    return out


def copy_bars(results):
    """[(label, % of copy)] for every memory-bound result, in file order."""
    out = []
    for doc, r in results:
        m, n = r["shape"]
        out.append((f"{chain_name(doc)}\n{m}x{n}", 100.0 * r["fused"]["of_copy"]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--png", required=True, help="the chart to write")
    ap.add_argument("--title", default="", help="a line above the panels (GPU, date, commit)")
    ap.add_argument("results", nargs="+", help="epifuse bench --json output files")
    args = ap.parse_args()

    gemm, rows = [], []
    for path in args.results:
        with open(path) as f:
            doc = json.load(f)
        if "error" in doc:
            sys.exit(f"{path}: the bench failed: {doc['error']}")
        for r in doc["results"]:
            (gemm if "gemm" in r else rows).append((doc, r))
    if not gemm and not rows:
        sys.exit("no results to plot")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for p in (("gemm", gemm), ("copy", rows)) if p[1]]
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 5.2), squeeze=False)
    for ax, (kind, results) in zip(axes[0], panels):
        if kind == "gemm":
            bars = gemm_bars(results)
            labels = sorted({label for _, rows_ in bars for label in rows_})
            width = 0.8 / max(1, len(labels))
            for j, label in enumerate(labels):
                xs = [i + (j - (len(labels) - 1) / 2) * width for i in range(len(bars))]
                ax.bar(xs, [rows_.get(label, 0) for _, rows_ in bars], width, label=label)
            ax.axhline(1.0, color="black", linewidth=0.8)
            top = max(v for _, rows_ in bars for v in rows_.values())
            ax.set_ylim(0.8, max(1.25, top + 0.05))
            ax.set_ylabel("time over cuBLAS's GEMM alone (lower is better)")
            ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=7, rotation=30, ha="right")
            ax.legend(fontsize=7, ncol=2)
            ax.set_title("GEMM chains")
        else:
            bars = copy_bars(results)
            ax.bar(range(len(bars)), [b[1] for b in bars], 0.6)
            ax.axhline(100.0, color="black", linewidth=0.8)
            ax.set_ylabel("% of the copy ceiling (higher is better)")
            ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=7, rotation=30, ha="right")
            ax.set_ylim(0, 110)
            ax.set_title("memory-bound chains")
            for i, (_, v) in enumerate(bars):
                ax.text(i, v + 1, f"{v:.0f}%", ha="center", fontsize=8)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print(f"plot_bench: wrote {args.png}")


if __name__ == "__main__":
    main()
