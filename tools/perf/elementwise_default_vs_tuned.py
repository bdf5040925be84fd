#!/usr/bin/env python3
"""The elementwise family's default tile against every tuner candidate, over chains,
dtypes and shapes (Note [Two vectors a thread], Note [Staged column loads];
docs/perf/elementwise.md).

    python3 tools/perf/elementwise_default_vs_tuned.py [--out DIR] [--configs NAME,...]
        [--shapes M,N ...] [--dtypes f32,bf16,...]

For each chain, dtype and shape:
  - `epifuse compile --json` (no --target: this GPU, its DeviceInfo; the disk cache off,
    so no earlier tune stands in) names the default tile, the one `compile()` and the
    Python module use without a tune;
  - `epifuse tune --json` times every candidate in turns in one process; the default is
    always among them (tile_candidates adds it), so its time over the fastest
    candidate's comes from one process and one method.
Chains (f32 examples with every dtype replaced, so f32 is the example itself):
  bgda      examples/chains/bias_gelu_dropout_add.json (Philox dropout, GELU)
  bga       the same without its dropout (y = gelu(x + bias) + residual)
  add_mul   examples/chains/add_mul.json ((x + y) * 0.5: a stream)
  bgda_bwd  `epifuse grad` of bgda (dropout regenerated, GELU', a column sum)
  bias_grad a bias's gradient alone, db = col_sum(dy) in dy's dtype (a Linear's dbias)
Prints a line per measurement as it goes, writes DIR/<config>_<dtype>_<M>x<N>.tune.json
and DIR/summary.txt, which ends with the counts of defaults within 5% and 10% of the
fastest candidate. Needs a GPU and build/epifuse (EPIFUSE to override).
"""
import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EPIFUSE = os.environ.get("EPIFUSE", str(ROOT / "build" / "epifuse"))
CONFIGS = ["bgda", "bga", "add_mul", "bgda_bwd", "bias_grad"]
DTYPES = ["f32", "bf16", "f16"]
# M*N = 2^27 at rows of 1,024 to 65,536, then 2^23 and 2^20 (the default's grid guard).
SHAPES = [(131072, 1024), (16384, 8192), (2048, 65536), (2048, 4096), (1024, 1024)]


def run(cmd):
    # The disk cache off: a tune stored by an earlier run would otherwise be what
    # `compile` reports as the default.
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "EPIFUSE_CACHE": "0"})
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {(r.stdout + r.stderr).strip()[-400:]}")
    return r.stdout


def chain_file(config, dtype, out):
    """The chain's JSON for `dtype`, written under `out`."""
    if config == "bgda_bwd":
        f32 = out / "bgda_bwd_f32.json"
        if not f32.exists():
            run([EPIFUSE, "grad", str(ROOT / "examples/chains/bias_gelu_dropout_add.json"), "--backward", str(f32)])
        text = f32.read_text()
    elif config == "bias_grad":
        text = json.dumps({"epifuse": 1, "name": "bias_grad", "mainloop": "elementwise",
                           "inputs": {"dy": {"dtype": "f32"}},
                           "ops": [{"name": "db", "op": "col_sum", "args": ["dy"]}],
                           "outputs": {"dbias": {"dtype": "f32", "value": "db"}}, "shape": [256, 1024]}, indent=1)
    else:
        name = "add_mul" if config == "add_mul" else "bias_gelu_dropout_add"
        text = (ROOT / "examples/chains" / f"{name}.json").read_text()
        if config == "bga":
            spec = json.loads(text)
            spec["name"] = "bias_gelu_add"
            spec["ops"] = [op for op in spec["ops"] if op["op"] != "dropout"]
            for op in spec["ops"]:
                op["args"] = ["g" if a == "d" else a for a in op["args"]]
            text = json.dumps(spec, indent=1)
    path = out / f"{config}_{dtype}.json"
    path.write_text(text.replace('"f32"', f'"{dtype}"'))
    return path


def default_tile(chain, shape):
    doc = json.loads(run([EPIFUSE, "compile", str(chain), "--shape", f"{shape[0]},{shape[1]}", "--json"]))
    m = re.search(r"tile=(\S+)", doc[0]["key"])
    return m.group(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="elementwise_default_vs_tuned", help="output folder")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated: " + ", ".join(DTYPES))
    ap.add_argument("--shapes", nargs="+", metavar="M,N", help="these shapes instead of the sweep")
    args = ap.parse_args()
    configs = [c for c in args.configs.split(",") if c]
    dtypes = [d for d in args.dtypes.split(",") if d]
    for c in configs:
        if c not in CONFIGS:
            ap.error(f"--configs: unknown {c!r} (known: {', '.join(CONFIGS)})")
    for d in dtypes:
        if d not in DTYPES:
            ap.error(f"--dtypes: unknown {d!r} (known: {', '.join(DTYPES)})")
    try:
        shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes else SHAPES
    except ValueError:
        ap.error("--shapes: each shape is M,N")
    if any(len(s) != 2 or min(s) < 1 for s in shapes):
        ap.error("--shapes: each shape is M,N with M, N >= 1")
    if not Path(EPIFUSE).exists():
        sys.exit(f"{EPIFUSE}: not built (tools/setup.sh), or set EPIFUSE")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:  # no GPU: one message, not one failure a measurement
        default_tile(chain_file("add_mul", "f32", out), (64, 64))
    except RuntimeError as e:
        sys.exit(f"elementwise_default_vs_tuned: needs a GPU: {e}")
    lines, within5, within10, total = [], 0, 0, 0
    for config in configs:
        for dtype in dtypes:
            chain = chain_file(config, dtype, out)
            for m, n in shapes:
                try:
                    tile = default_tile(chain, (m, n))
                    text = run([EPIFUSE, "tune", str(chain), "--shape", f"{m},{n}", "--json"])
                except RuntimeError as e:
                    line = f"{config} {dtype} {m}x{n}: failed: {e}"
                    print(line, flush=True)
                    lines.append(line)
                    continue
                tmp = out / f"{config}_{dtype}_{m}x{n}.tune.json.tmp"
                tmp.write_text(text)
                tmp.replace(out / f"{config}_{dtype}_{m}x{n}.tune.json")  # whole or not at all
                cands = {c["tile"]: c["ms"] for c in json.loads(text)["results"][0]["candidates"]}
                best_tile = min(cands, key=cands.get)
                if tile not in cands:
                    line = f"{config} {dtype} {m}x{n}: default {tile} is not among the candidates"
                else:
                    ratio = cands[tile] / cands[best_tile]
                    total += 1
                    within5 += ratio <= 1.05
                    within10 += ratio <= 1.10
                    line = (f"{config:8s} {dtype:4s} {m:>6}x{n:<6} default {tile:12s} {cands[tile] * 1e3:8.1f} us "
                            f"{ratio:.3f}x the fastest ({best_tile} {cands[best_tile] * 1e3:.1f} us)")
                print(line, flush=True)
                lines.append(line)
    lines.append(f"default within 5% of the fastest candidate: {within5} of {total}; within 10%: {within10} of {total}")
    print(lines[-1])
    tmp = out / "summary.txt.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(out / "summary.txt")


if __name__ == "__main__":
    main()
