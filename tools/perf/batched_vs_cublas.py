#!/usr/bin/env python3
"""Batched GEMM through the Python module against torch.bmm (cuBLAS's strided-batched
GEMM) in one process: the acceptance bar of docs/strided-batched.md, within 1.10x of
cuBLAS at batch 32-256 of [512..2048]-sized problems, plain and with an epilogue.

Each configuration (dtype, B's layout, batch, M,N,K) calls a GEMM chain with 3-D
operands, a [B, M, K] and b [B, K, N] (row-major, contiguous; or, with --b-layouts col,
the transpose of a contiguous [B, N, K], as attention's Q·Kᵀ passes K): both operands
have a batch of their own, so the call is one batched launch (ef_jit_compile_batched)
and never folds its batches into M (docs/python.md, "Batched GEMM"). The script asks
epifuse.batching.plan_gemm_call before the first call and the prepared launch after
it, and reports a configuration that would fold as failed. The default path: no
tuning (a batched launch is never tuned), outputs into preallocated tensors (out=).

Rows, timed in turns (tools/perf/turns.py: --launches back-to-back calls between one
torch.cuda.Event pair, queued behind a short GPU sleep; every round samples each row
once, the first row rotating; medians over --rounds rounds after --warmup):
  bmm          torch.bmm(a, b, out=c): cuBLAS's strided-batched GEMM
  epifuse      the chain y = acc (the GEMM alone)
  eager        torch: gelu_tanh(torch.bmm(a, b) + bias), the eager epilogue (--epilogues bias_gelu)
  epifuse+epi  the chain y = gelu_tanh(acc + bias), bias a row [N] shared by every batch
Printed per configuration: epifuse / bmm; epifuse+epi / eager and over bmm. Summary
lines: how many configurations are within --bar (1.10x) and the worst ratio.

Check, before timing: epifuse's output against torch's (bmm's for the GEMM alone,
eager's for the epilogue) elementwise in float, by CHECK_RULE below; a failure is
printed and makes the exit status 1. Configurations whose tensors would need more than
--max-gb GB are skipped, with the estimate printed.

    PYTHONPATH=python python3 tools/perf/batched_vs_cublas.py [--dtypes bf16,f16] [--b-layouts row,col]
        [--batches 32,64,128,256] [--shape M,N,K ...] [--epilogues plain,bias_gelu]
        [--rounds 10] [--launches 20] [--max-gb 20] [--json PATH] [--dry-run]

Default shapes (M,N,K): 512,512,512; 1024,1024,1024; 2048,2048,2048; 512,2048,1024;
2048,512,2048. --dry-run prints each configuration's memory estimate and launch plan
and exits, with neither torch nor a GPU (the plan needs the epifuse library).
"""
import argparse
import gc
import json
import math
import statistics
import sys
from pathlib import Path

import turns

try:
    import torch
except ImportError:  # --dry-run runs without torch
    torch = None

DEVICE = "cuda"
DTYPES = ("bf16", "f16")
LAYOUTS = ("row", "col")
EPILOGUES = ("plain", "bias_gelu")
ELEMENT_BYTES = {"f16": 2, "bf16": 2}
SHAPES = [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (512, 2048, 1024), (2048, 512, 2048)]
TORCH_DTYPES = {} if torch is None else {"f16": torch.float16, "bf16": torch.bfloat16}

# CHECK_RULE: every element passes when |got - ref| <= TOL * (|ref| + rms), rms the
# root mean square of ref over its batch's [M, N], TOL = 4 * the dtype's epsilon
# (bf16 2^-5, f16 2^-8). got and ref are the same sums in fp32, in another order, each
# rounded to the dtype once (eager's epilogue rounds after the GEMM, the add and the
# GELU: three times, and GELU's slope is at most 1.13), so they differ by a few units
# in the last place of the value; the rms term covers values near zero, where a
# relative bound means nothing (GELU's tail, sums that cancel). A wrong batch, tile or
# bias is off by the order of rms itself.
TOL = {"bf16": 4 * 2.0 ** -7, "f16": 4 * 2.0 ** -10}
CHECK_CHUNK = 1 << 26  # elements of a chunk of batches the check copies to float at once


# ---- chains and operands
def bmm_chain(dtype, b_layout, epilogue):
    """y = acc (plain) or y = gelu_tanh(acc + bias) (bias_gelu), a row-major A and B in
    `b_layout`, built with the builder."""
    import epifuse
    c = epifuse.Chain(f"bmm_{epilogue}", {"kind": "gemm", "a": dtype, "b": dtype, "a_layout": "row",
                                          "b_layout": b_layout})
    v = c.accumulator()
    if epilogue == "bias_gelu":
        v = c.gelu_tanh(c.add(v, c.input("bias", dtype, "row")))
    c.output("y", v, dtype)
    return c


def operand_layout(batch, m, n, k, layout):
    """(shapes, strides) of a and b as the script makes them (no torch needed)."""
    a = ((batch, m, k), (m * k, k, 1))
    b = ((batch, k, n), (k * n, n, 1)) if layout == "row" else ((batch, k, n), (n * k, 1, k))
    return [a[0], b[0]], [a[1], b[1]]


def launch_plan(chain, layout, epilogue, shapes, strides):
    """epifuse.batching.plan_gemm_call for this call: how the module will run it."""
    from epifuse import batching
    inputs = [("a", "full"), ("b", "full")] + ([("bias", "row")] if epilogue == "bias_gelu" else [])
    shapes, strides = list(shapes), list(strides)
    if epilogue == "bias_gelu":
        shapes.append((shapes[1][2],))
        strides.append((1,))
    return batching.plan_gemm_call(chain, [("a", "row"), ("b", layout)], inputs, [("y", "full")], shapes, strides)


def estimate_bytes(batch, m, n, k, dtype, epilogues):
    """Device memory a configuration holds at its peak: the operands, epifuse's and
    bmm's outputs and, with the epilogue, epifuse's output and two of eager's
    temporaries ([B, M, N] each), plus the check's four float tensors of a chunk."""
    outputs = 2 + (3 if "bias_gelu" in epilogues else 0)
    return (ELEMENT_BYTES[dtype] * batch * (m * k + k * n + outputs * m * n)
            + 4 * 4 * min(batch * m * n, CHECK_CHUNK))


def make_operands(batch, m, n, k, layout, dt, gen):
    """a [B, M, K] and b [B, K, N] (row) or the transpose of [B, N, K] (col): normal
    values, b scaled by K^-1/2 so the products stay near 1 (GELU then bends them)."""
    a = torch.randn(batch, m, k, device=DEVICE, dtype=dt, generator=gen)
    if layout == "row":
        b = torch.randn(batch, k, n, device=DEVICE, dtype=dt, generator=gen).mul_(k ** -0.5)
    else:
        b = torch.randn(batch, n, k, device=DEVICE, dtype=dt, generator=gen).mul_(k ** -0.5).transpose(-1, -2)
    return a, b


# ---- the check
def check_error(got, ref, dtype):
    """max |got - ref| / (|ref| + rms) over every element (CHECK_RULE), NaN where
    either is not finite; in chunks of batches so the float copies stay small."""
    batch, m, n = ref.shape
    step = max(1, CHECK_CHUNK // max(1, m * n))
    worst = 0.0
    for i in range(0, batch, step):
        g, r = got[i:i + step].float(), ref[i:i + step].float()
        rms = r.pow(2).mean(dim=(1, 2), keepdim=True).sqrt().clamp_min(1e-30)
        e = ((g - r).abs() / (r.abs() + rms)).amax().item()
        if not math.isfinite(e):
            return float("nan")
        worst = max(worst, e)
    return worst


def launch_info(fn):
    """{"batch", "kernel", "tile"} of the callable's last prepared launch, read from its
    launch record (the module's private state, for the report only: {} if that changes)."""
    try:
        from epifuse import _lib
        launch = fn._last_launch
        kb = json.loads(_lib.take_string(_lib.lib.ef_kernel_bindings, launch.kernel.h))
        return {"batch": launch.batch, "kernel": kb["name"], "tile": kb["tile"]}
    except Exception:  # noqa: BLE001 - a report detail, never a failure
        return {}


# ---- one configuration
def run_config(fns, dtype, layout, batch, m, n, k, args, queue, gen):
    dt = TORCH_DTYPES[dtype]
    rec = {"dtype": dtype, "b_layout": layout, "batch": batch, "m": m, "n": n, "k": k,
           "gb_estimate": estimate_bytes(batch, m, n, k, dtype, args.epilogues) / 1e9}
    a, b = make_operands(batch, m, n, k, layout, dt, gen)
    shapes, strides = [tuple(a.shape), tuple(b.shape)], [a.stride(), b.stride()]
    for epi in args.epilogues:
        p = launch_plan(fns[epi].chain.name, layout, epi, shapes, strides)
        if p.folded or p.batch != batch:
            raise RuntimeError(f"the module would run this call {'folded into M' if p.folded else 'unbatched'}, "
                               "not as one batched launch")
    c_bmm = torch.empty(batch, m, n, device=DEVICE, dtype=dt)
    rows, checks = {}, {}
    rows["bmm"] = lambda: torch.bmm(a, b, out=c_bmm)
    rows["bmm"]()
    if "plain" in args.epilogues:
        c_ef = torch.empty(batch, m, n, device=DEVICE, dtype=dt)
        rows["epifuse"] = lambda: fns["plain"](a, b, out=c_ef)
        rows["epifuse"]()
        checks["plain"] = check_error(c_ef, c_bmm, dtype)
    if "bias_gelu" in args.epilogues:
        gelu = torch.nn.functional.gelu
        bias = torch.randn(n, device=DEVICE, dtype=dt, generator=gen)
        c_efe = torch.empty(batch, m, n, device=DEVICE, dtype=dt)
        rows["eager"] = lambda: gelu(torch.bmm(a, b) + bias, approximate="tanh")
        rows["epifuse+epi"] = lambda: fns["bias_gelu"](a, b, bias, out=c_efe)
        rows["epifuse+epi"]()
        ref = rows["eager"]()
        checks["bias_gelu"] = check_error(c_efe, ref, dtype)
        del ref
    torch.cuda.synchronize()
    rec["launch"] = {epi: launch_info(fns[epi]) for epi in args.epilogues}
    for epi, info in rec["launch"].items():
        if info and info["batch"] != batch:
            raise RuntimeError(f"{epi}: the prepared launch has batch {info['batch']}, not one batched launch "
                               f"of {batch}")
    rec["check"] = {epi: {"error": e, "tol": TOL[dtype], "passed": e <= TOL[dtype]} for epi, e in checks.items()}
    times = turns.time_in_turns(rows, args.launches, args.warmup, args.rounds, queue)
    rec["rows"] = {name: turns.summary(ms) for name, ms in times.items()}
    med = {name: r["ms"] for name, r in rec["rows"].items()}
    flops = 2.0 * batch * m * n * k
    rec["tflops"] = {name: flops / ms / 1e9 for name, ms in med.items()}
    rec["ratios"] = {}
    if "epifuse" in med:
        rec["ratios"]["epifuse/bmm"] = med["epifuse"] / med["bmm"]
    if "epifuse+epi" in med:
        rec["ratios"]["epifuse+epi/eager"] = med["epifuse+epi"] / med["eager"]
        rec["ratios"]["epifuse+epi/bmm"] = med["epifuse+epi"] / med["bmm"]
    rec["passed"] = all(c["passed"] for c in rec["check"].values())
    return rec


# ---- report
RATIOS = ("epifuse/bmm", "epifuse+epi/eager", "epifuse+epi/bmm")


def name_of(rec):
    return f"{rec['dtype']} {rec['b_layout']} {rec['batch']}x{rec['m']},{rec['n']},{rec['k']}"


def table_header(epilogues):
    cols = f"{'config':28} {'bmm ms':>8}"
    if "plain" in epilogues:
        cols += f" {'epifuse':>8} {'ef/bmm':>7}"
    if "bias_gelu" in epilogues:
        cols += f" {'eager':>8} {'ef+epi':>8} {'/eager':>7} {'/bmm':>7}"
    return cols + "  check  tile"


def table_line(rec, epilogues):
    if "error" in rec:
        return f"{name_of(rec):28} failed: {rec['error']}"
    if "skipped" in rec:
        return f"{name_of(rec):28} skipped: {rec['skipped']}"
    ms, r = {n: v["ms"] for n, v in rec["rows"].items()}, rec["ratios"]
    line = f"{name_of(rec):28} {ms['bmm']:8.4f}"
    if "plain" in epilogues:
        line += f" {ms['epifuse']:8.4f} {r['epifuse/bmm']:6.3f}x"
    if "bias_gelu" in epilogues:
        line += (f" {ms['eager']:8.4f} {ms['epifuse+epi']:8.4f} {r['epifuse+epi/eager']:6.3f}x"
                 f" {r['epifuse+epi/bmm']:6.3f}x")
    verdict = "ok" if rec["passed"] else "FAILED " + ", ".join(
        f"{e} {c['error']:.2e} > {c['tol']:.2e}" for e, c in rec["check"].items() if not c["passed"])
    tiles = sorted({i["tile"] for i in rec["launch"].values() if i})
    return line + f"  {verdict:5}  {','.join(tiles) or '?'}"


def summaries(results, bar):
    """{ratio name: {"within", "of", "worst", "worst_config", "median"}} over the timed configurations."""
    out = {}
    for ratio in RATIOS:
        got = [(r["ratios"][ratio], name_of(r)) for r in results if ratio in r.get("ratios", {})]
        if not got:
            continue
        worst = max(got)
        out[ratio] = {"within": sum(1 for v, _ in got if v <= bar), "of": len(got), "worst": worst[0],
                      "worst_config": worst[1], "median": statistics.median(v for v, _ in got)}
    return out


SUMMARY_TEXT = {"epifuse/bmm": "epifuse GEMM / torch.bmm",
                "epifuse+epi/eager": "epifuse bias+GELU / (torch.bmm + eager bias+GELU)",
                "epifuse+epi/bmm": "epifuse bias+GELU / torch.bmm alone"}


# ---- dry run
def dry_run(args):
    """Each configuration's memory estimate and launch plan, without torch or a GPU."""
    print(f"# dry run: {args.rounds} rounds after {args.warmup}, {args.launches} launches a sample, "
          f"at most {args.max_gb} GB a configuration")
    try:
        chain_names = {(dt, lay, epi): bmm_chain(dt, lay, epi).name for dt in args.dtypes for lay in args.b_layouts
                 for epi in args.epilogues}
    except ImportError as e:
        print(f"# epifuse not importable ({e}): the configurations only")
        chain_names = None
    status = 0
    for dtype, layout, (m, n, k), batch in configs(args):
        gb = estimate_bytes(batch, m, n, k, dtype, args.epilogues) / 1e9
        line = f"{dtype} {layout} {batch}x{m},{n},{k}: {gb:6.2f} GB"
        if gb > args.max_gb:
            print(f"{line}, skipped (over --max-gb)")
            continue
        if chain_names is None:
            print(line)
            continue
        shapes, strides = operand_layout(batch, m, n, k, layout)
        plans = []
        for epi in args.epilogues:
            p = launch_plan(chain_names[(dtype, layout, epi)], layout, epi, shapes, strides)
            batched = p.batch == batch and not p.folded
            status |= 0 if batched else 1
            plans.append(f"{epi}: {'one batched launch' if batched else 'NOT batched'} of {p.batch}, "
                         f"batch strides {p.batch_strides}")
        print(f"{line}; " + "; ".join(plans))
    return status


# ---- arguments
def configs(args):
    """(dtype, layout, (M, N, K), batch) in the order they run: per dtype and layout,
    per shape, the batches."""
    for dtype in args.dtypes:
        for layout in args.b_layouts:
            for shape in args.shape or SHAPES:
                for batch in args.batches:
                    yield dtype, layout, shape, batch


def shape_arg(text):
    try:
        v = tuple(int(x) for x in text.split(","))
    except ValueError:
        v = ()
    if len(v) != 3 or min(v) < 1:
        raise argparse.ArgumentTypeError(f"--shape takes three positive integers M,N,K, got {text!r}")
    return v


def ints(text):
    try:
        v = [int(x) for x in text.split(",") if x]
    except ValueError:
        v = []
    if not v or min(v) < 2:
        raise argparse.ArgumentTypeError(f"--batches takes integers of 2 or more (a batch of 1 runs the unbatched "
                                         f"kernel), got {text!r}")
    return v


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--dtypes", type=turns.name_list(DTYPES, "--dtypes"), default=list(DTYPES),
                    help="comma-separated (default bf16,f16)")
    ap.add_argument("--b-layouts", type=turns.name_list(LAYOUTS, "--b-layouts"), default=["row"],
                    help="B as [B, K, N] rows (row, the default) and/or the transpose of [B, N, K] (col)")
    ap.add_argument("--batches", type=ints, default=[32, 64, 128, 256], help="comma-separated (default 32,64,128,256)")
    ap.add_argument("--shape", type=shape_arg, action="append", default=None, metavar="M,N,K",
                    help="a problem size (repeatable); replaces the default shapes")
    ap.add_argument("--epilogues", type=turns.name_list(EPILOGUES, "--epilogues"), default=list(EPILOGUES),
                    help="plain (the GEMM alone), bias_gelu, or both (the default)")
    ap.add_argument("--max-gb", type=float, default=20.0, help="skip configurations over this estimate (default 20)")
    ap.add_argument("--bar", type=float, default=1.10, help="the ratio the summary counts against (default 1.10)")
    turns.add_timing_arguments(ap, 10, 2, "timed rounds; each samples every row once (default 10)")
    ap.add_argument("--seed", type=int, default=0, help="the operands' generator")
    turns.add_output_arguments(ap)
    ap.add_argument("--dry-run", action="store_true",
                    help="print each configuration's estimate and launch plan, and exit (no torch or GPU needed)")
    args = ap.parse_args(argv)
    turns.check_timing_arguments(ap, args)
    if args.max_gb <= 0 or args.bar <= 0:
        ap.error("--max-gb and --bar must be positive")
    turns.check_gpu(ap, args, torch)
    return args


def reduced_precision_flags():
    """torch's flags letting cuBLAS reduce split-K partial sums in f16 / bf16, or None."""
    flags = {}
    for name in ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
        try:
            flags[name] = bool(getattr(torch.backends.cuda.matmul, name))
        except (AttributeError, AssertionError):  # AssertionError: torch.backends.cuda's "Unknown attribute"
            flags[name] = None
    return flags


def main(argv=None):
    args = parse(argv)
    if args.dry_run:
        return dry_run(args)
    prov = turns.provenance()
    queue = turns.QueueAhead(not args.no_queue_ahead)
    print(turns.header(prov))
    print(f"# batched GEMM (3-D a and b, one batched launch) against torch.bmm; median of {args.rounds} rounds "
          f"after {args.warmup}, {args.launches} launches a sample, queue-ahead {queue.describe()}")
    print(table_header(args.epilogues))
    gen = torch.Generator(device=DEVICE)
    results = []
    fns = {}
    for dtype, layout, (m, n, k), batch in configs(args):
        key = (dtype, layout)
        if key not in fns:  # this dtype and layout's callables (kernels compile per shape); the last ones go
            fns = {key: {epi: bmm_chain(dtype, layout, epi).compile(tune=False) for epi in args.epilogues}}
        gen.manual_seed(args.seed)
        gb = estimate_bytes(batch, m, n, k, dtype, args.epilogues) / 1e9
        if gb > args.max_gb:
            rec = {"dtype": dtype, "b_layout": layout, "batch": batch, "m": m, "n": n, "k": k, "gb_estimate": gb,
                   "skipped": f"about {gb:.1f} GB, over --max-gb {args.max_gb:g}"}
        else:
            try:
                rec = run_config(fns[key], dtype, layout, batch, m, n, k, args, queue, gen)
            except Exception as e:  # noqa: BLE001 - reported, and the exit status says so
                lines = str(e).strip().splitlines()
                rec = {"dtype": dtype, "b_layout": layout, "batch": batch, "m": m, "n": n, "k": k, "gb_estimate": gb,
                       "error": f"{type(e).__name__}: {lines[0] if lines else ''}", "passed": False}
        results.append(rec)
        print(table_line(rec, args.epilogues), flush=True)
        gc.collect()
        torch.cuda.empty_cache()

    sums = summaries([r for r in results if "rows" in r], args.bar)
    print(f"\n# {prov['gpu']}: summary over {sum(1 for r in results if 'rows' in r)} timed configurations")
    for ratio, s in sums.items():
        print(f"{SUMMARY_TEXT[ratio]}: {s['within']} of {s['of']} within {args.bar:.2f}x; worst {s['worst']:.3f}x "
              f"({s['worst_config']}); median {s['median']:.3f}x")
    failed = [name_of(r) for r in results if "skipped" not in r and not r["passed"]]
    skipped = [name_of(r) for r in results if "skipped" in r]
    if skipped:
        print(f"skipped (memory): {', '.join(skipped)}")
    if args.json:
        record = {**prov, "reduced_precision_reduction": reduced_precision_flags(),
                  "timing": "median of rounds; each round samples every row once, the first rotating; a sample is "
                            "one torch.cuda.Event pair around `launches` calls; epifuse and bmm into preallocated "
                            f"outputs; queue-ahead {queue.describe()}",
                  "check_rule": "|got - ref| <= tol * (|ref| + rms(ref of its batch)), tol = 4 eps of the dtype",
                  "config": vars(args), "results": results, "summary": sums}
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.json}")
    if failed:
        print(f"failed (check or run): {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
