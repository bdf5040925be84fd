#!/usr/bin/env python3
"""The default tile against the tuned one and cuBLAS, over a sweep of GEMM shapes
(docs/perf/default-tiles.md).

    python3 tools/perf/default_vs_tuned.py [--configs NAME,...] [--out DIR]
        [--quick | --validation | --few-rows | --wide-192 | --shapes M,N,K ...]

For each chain configuration (the chains `epifuse.nn` builds: nn.Linear's column-major
weight unless the name says `brow`) and each shape M,N,K:
  - `epifuse bench --no-tune --json`: the default tile, its time, cuBLAS's GEMM alone and
    cuBLASLt's fused epilogue where the chain has that form, timed in turns in one process;
  - `epifuse tune --json`: every candidate timed in turns (first round, 9 batches), so the
    default's time over the fastest candidate's comes from one process and one method.
Prints one line per shape as it goes and writes DIR/<config>.json (whole, after each
config) and DIR/summary.txt, which ends with the bar's two counts: the default within
5% and 10% of the fastest candidate, and no slower than cuBLASLt's fused epilogue.
Needs a GPU, build/epifuse and the Python module (EPIFUSE_LIBRARY or build/).

    python3 tools/perf/default_vs_tuned.py --rescore DIR [DIR ...] [--target sm_90a]

scores this build's default rule against recorded runs, without a GPU: for every
<config>.json in the folders, `epifuse emit --json` of the recorded chain gives today's
default at each shape, and the recorded candidate times (one process, in turns) give its
time over the fastest. `emit` assumes the target's reference device (132 SMs for sm_90a,
as the H100 SXM and the H200 have); a default that was not a candidate then prints n/a.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
os.environ.setdefault("EPIFUSE_LIBRARY", str(ROOT / "build" / "libepifuse_c.so"))

from epifuse.layers import gated_chain, linear_chain  # noqa: E402

EPIFUSE = str(ROOT / "build" / "epifuse")

# M from 16 to 16384, N and K from 256 to 16384, square and rectangular; the MLP
# layers of the training benches (tokens x FFN x hidden and back) among them.
SHAPES = [
    (16, 4096, 4096), (128, 4096, 4096), (256, 8192, 2048), (512, 1024, 1024),
    (512, 16384, 4096), (1024, 1024, 1024), (2048, 2048, 2048), (2048, 16384, 256),
    (4096, 256, 4096), (4096, 4096, 4096), (8192, 2048, 8192), (8192, 8192, 2048),
    (8192, 8192, 8192), (16384, 1024, 4096), (16384, 4096, 16384), (16384, 16384, 4096),
]
QUICK = [(1024, 1024, 1024), (4096, 4096, 4096), (16384, 4096, 16384)]
# Shapes no rule was fitted to (--validation): checks Note [Default GEMM tile] out of sample.
VALIDATION = [
    (64, 8192, 4096), (192, 4096, 4096), (768, 3072, 768), (1536, 6144, 1536), (2560, 10240, 2560),
    (3072, 3072, 3072), (4096, 14336, 4096), (6144, 12288, 3072), (8192, 1536, 6144), (12288, 4096, 12288),
]
# Few rows (--few-rows; single GEMMs): decode and small-batch shapes, whole and partial
# 64-row tiles, under a wave of 64x64 tiles and past it (docs/perf/default-tiles.md, "Few rows").
FEW_ROWS = [
    (64, 4096, 4096), (64, 8192, 4096), (64, 14336, 4096), (64, 4096, 14336), (64, 2048, 8192),
    (128, 4096, 4096), (128, 2048, 4096), (128, 8192, 1024), (256, 2048, 4096), (64, 11008, 4096),
    (96, 4096, 4096), (192, 2048, 2048), (64, 6144, 4096), (64, 8192, 2048), (128, 4096, 1024),
    (192, 2048, 4096), (320, 1536, 2048), (512, 1024, 1024), (64, 2048, 2048), (80, 8192, 4096),
    (112, 5120, 4096), (64, 1536, 8192), (64, 5120, 14336),
]
# Where 128x192 tiles hold more of the outputs in their waves than 128x128 ones (--wide-192;
# docs/perf/default-tiles.md, "192-column tiles"), and large controls where they do not.
WIDE_192 = [
    (768, 12288, 2048), (1536, 6144, 1536), (2560, 6144, 2560), (3072, 3072, 3072), (3072, 5120, 5120),
    (5120, 3072, 2048), (6144, 1536, 4096), (12288, 768, 1024), (512, 6144, 2048), (768, 3072, 768),
    (768, 4096, 4096), (1024, 3072, 1024), (1536, 14336, 4096), (2048, 1536, 2048), (2560, 11008, 4096),
    (14336, 1536, 2048), (2048, 8192, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 4096),
]
DUAL_VALIDATION = [(64, 11008, 4096), (512, 11008, 4096), (2048, 11008, 4096), (4096, 5632, 2048),
                   (8192, 14336, 4096), (16384, 5632, 2048)]
DUAL_SHAPES = [
    (16, 4096, 4096), (128, 11008, 4096), (512, 2048, 2048), (1024, 1024, 1024),
    (2048, 5632, 2048), (4096, 4096, 4096), (4096, 11008, 4096), (8192, 5632, 2048),
    (8192, 11008, 4096), (16384, 11008, 4096), (16384, 2048, 8192), (16384, 4096, 1024),
]


def row_b(chain_json):
    d = json.loads(chain_json)
    d["mainloop"]["b_layout"] = "row"
    return json.dumps(d)


CONFIGS = {
    "bf16_bias_gelu": lambda: linear_chain("bf16", True, "gelu_tanh").to_json(),
    "f16_bias_gelu_brow": lambda: row_b(linear_chain("f16", True, "gelu_tanh").to_json()),
    "bf16_bias_relu_dropout": lambda: linear_chain("bf16", True, "relu", 0.1).to_json(),
    "tf32_gemm_brow": lambda: row_b(linear_chain("f32", False, None, tf32=True).to_json()),
    "bf16_swiglu": lambda: gated_chain("bf16", "silu").to_json(),
    # What training runs: the forwards that write what their backward saves.
    "bf16_fc1_saved": lambda: linear_chain("bf16", True, "gelu_tanh", 0.1).grad().forward.to_json(),
    "bf16_swiglu_saved": lambda: gated_chain("bf16", "silu").grad().forward.to_json(),
    "tf32_gemm": lambda: linear_chain("f32", False, None, tf32=True).to_json(),
}


def cli(args, env=None):
    p = subprocess.run([EPIFUSE, *args, "--json"], capture_output=True, text=True, env=env)
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError:
        return {"error": {"kind": "no JSON", "message": (p.stderr or p.stdout)[-2000:]}}


def measure(chain_path, shape):
    s = ",".join(map(str, shape))
    # The disk cache keeps what an earlier `tune` chose for this chain and shape, and
    # a bench reads it: without the cache the bench times the rule's default tile.
    bench = cli(["bench", chain_path, "--shape", s, "--no-tune", "--no-unfused", "--no-sweep"],
                env={**os.environ, "EPIFUSE_CACHE": "0"})
    tune = cli(["tune", chain_path, "--shape", s])
    row = {"shape": list(shape)}
    if "error" in bench or "error" in tune:
        row["error"] = bench.get("error") or tune.get("error")
        return row
    b = bench["results"][0]
    rows = b["gemm"]["rows"]
    row["device"] = b["device"]
    row["default_tile"] = b["fused"]["tile"]
    row["default_of_cublas"] = rows["fused"]["of_cublas"]
    if "cublaslt_epilogue" in rows:
        row["cublaslt_epilogue_of_cublas"] = rows["cublaslt_epilogue"]["of_cublas"]
    t = tune["results"][0]
    cands = {c["tile"]: c["ms"] for c in t["candidates"]}
    best_tile = min(cands, key=cands.get)
    row["tuned_tile"] = t["tile"]
    row["fastest_first_round"] = best_tile
    row["candidates"] = cands
    row["default_over_best"] = cands[row["default_tile"]] / cands[best_tile] if row["default_tile"] in cands else None
    return row


def line(cfg, r):
    if "error" in r:
        return f"{cfg:24} {str(tuple(r['shape'])):22} error: {r['error'].get('message', '')[:160]}"
    dob = r["default_over_best"]
    lt = r.get("cublaslt_epilogue_of_cublas")
    return (f"{cfg:24} {str(tuple(r['shape'])):22} default {r['default_tile']:20} {r['default_of_cublas']:.3f}x cuBLAS"
            f"  default/best {'  n/a' if dob is None else f'{dob:.3f}'} (best {r['fastest_first_round']})"
            + (f"  cuBLASLt epi {lt:.3f}x" if lt else ""))


def emitted_tile(chain_path, shape, target):
    p = subprocess.run([EPIFUSE, "emit", chain_path, "--shape", ",".join(map(str, shape)), "--target", target, "--json"],
                       capture_output=True, text=True, env={**os.environ, "EPIFUSE_CACHE": "0"})
    try:
        return json.loads(p.stdout)["tile"]
    except (json.JSONDecodeError, KeyError):
        sys.exit(f"default_vs_tuned: epifuse emit failed for {chain_path} at {shape}: {(p.stderr or p.stdout)[-500:]}")


def summary_line(ratios):
    within5 = sum(r <= 1.05 for r in ratios)
    within10 = sum(r <= 1.10 for r in ratios)
    return (f"shapes {len(ratios)}: default within 5% of the fastest at {within5} "
            f"({100 * within5 / len(ratios):.0f}%), within 10% at {within10}; worst {max(ratios):.3f}")


def cublaslt_line(rows):
    """The default against cuBLASLt's fused epilogue, where the chain has one: both timed
    against the same process's cuBLAS GEMM, so their ratio is the default's time over it."""
    pairs = [r["default_of_cublas"] / r["cublaslt_epilogue_of_cublas"] for r in rows
             if "error" not in r and r.get("cublaslt_epilogue_of_cublas") and r.get("default_of_cublas")]
    if not pairs:
        return None
    return (f"cuBLASLt's fused epilogue, {len(pairs)} shapes with one: the default no slower at "
            f"{sum(x <= 1.0 for x in pairs)}, within 5% at {sum(x <= 1.05 for x in pairs)}; "
            f"worst {max(pairs):.3f}x its time")


def rescore(folders, target):
    """This build's defaults against the candidate times recorded in `folders`."""
    lines, ratios = [], []
    files = sorted(f for d in folders for f in Path(d).glob("*.json"))
    if not files:
        sys.exit(f"default_vs_tuned: no <config>.json in {', '.join(folders)}")
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            try:
                doc = json.loads(f.read_text())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                print(f"default_vs_tuned: {f}: skipped, not readable JSON ({e})", file=sys.stderr)
                continue
            if not isinstance(doc, dict) or not {"config", "chain", "results"} <= doc.keys():
                print(f"default_vs_tuned: {f}: skipped, not a run's <config>.json", file=sys.stderr)
                continue
            chain_path = f"{tmp}/{doc['config']}.json"
            Path(chain_path).write_text(json.dumps(doc["chain"]))
            for r in doc["results"]:
                cands = r.get("candidates")
                if not cands:
                    continue
                now = emitted_tile(chain_path, r["shape"], target)
                best = min(cands.values())
                ratio = cands[now] / best if now in cands else None
                if ratio is not None:
                    ratios.append(ratio)
                was = r.get("default_tile", "?")
                lines.append(f"{doc['config']:24} {str(tuple(r['shape'])):22} default {now:20}"
                             f"{'' if now == was else f' (recorded {was})':30} default/best "
                             f"{'  n/a' if ratio is None else f'{ratio:.3f}'} (best {min(cands, key=cands.get)})")
                print(lines[-1], flush=True)
    if ratios:
        lines.append(summary_line(ratios))
        print(lines[-1])
    elif not lines:
        sys.exit(f"default_vs_tuned: no recorded candidate times in {', '.join(folders)}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    ap.add_argument("--out", default="default_vs_tuned", help="output folder")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--quick", action="store_true", help="three shapes a configuration")
    which.add_argument("--validation", action="store_true", help="the shapes no default rule was fitted to")
    which.add_argument("--few-rows", action="store_true", help="decode and small-batch shapes, 64 to 512 rows")
    which.add_argument("--wide-192", action="store_true", help="where 192-column tiles fill the waves better, and controls")
    which.add_argument("--shapes", nargs="+", metavar="M,N,K", help="these shapes instead of a sweep (every configuration)")
    which.add_argument("--rescore", nargs="+", metavar="DIR",
                       help="no GPU: this build's defaults against the candidate times recorded in these folders")
    ap.add_argument("--target", default="sm_90a", help="--rescore: the target whose default rule to apply")
    opt = ap.parse_args()
    if opt.rescore:
        rescore(opt.rescore, opt.target)
        return
    given = []
    for s in opt.shapes or []:
        try:
            shape = tuple(int(v) for v in s.split(","))
        except ValueError:
            shape = ()
        if len(shape) != 3 or min(shape) < 1:
            sys.exit(f"default_vs_tuned: --shapes takes M,N,K of positive integers, got {s!r}")
        given.append(shape)
    out = Path(opt.out)
    out.mkdir(parents=True, exist_ok=True)
    summary, measured = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for cfg in opt.configs.split(","):
            if cfg not in CONFIGS:
                sys.exit(f"default_vs_tuned: unknown configuration {cfg!r}; known: {', '.join(CONFIGS)}")
            path = f"{tmp}/{cfg}.json"
            Path(path).write_text(CONFIGS[cfg]())
            dual = "swiglu" in cfg
            if given:
                shapes = given
            elif opt.quick:
                shapes = QUICK
            elif opt.validation:
                shapes = DUAL_VALIDATION if dual else VALIDATION
            elif opt.few_rows:
                shapes = FEW_ROWS
            elif opt.wide_192:
                shapes = WIDE_192
            else:
                shapes = DUAL_SHAPES if dual else SHAPES
            rows = []
            for shape in shapes:
                t0 = time.time()
                r = measure(path, shape)
                r["seconds"] = round(time.time() - t0, 1)
                rows.append(r)
                measured.append(r)
                summary.append(line(cfg, r))
                print(summary[-1], flush=True)
            tmp_out = out / f".{cfg}.json.tmp"
            tmp_out.write_text(json.dumps({"config": cfg, "chain": json.loads(CONFIGS[cfg]()), "results": rows}, indent=1))
            tmp_out.replace(out / f"{cfg}.json")
    ratios = [float(s.split("default/best ")[1].split()[0]) for s in summary if "default/best " in s
              and "n/a" not in s.split("default/best ")[1][:5]]
    if ratios:
        summary.append(summary_line(ratios))
        print(summary[-1])
    lt = cublaslt_line(measured)
    if lt:
        summary.append(lt)
        print(lt)
    (out / "summary.txt").write_text("\n".join(summary) + "\n")


if __name__ == "__main__":
    main()
