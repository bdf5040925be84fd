#!/usr/bin/env python3
"""Training speed of one transformer MLP block, forward + backward in bf16 on one GPU,
against the cuBLAS GEMMs that the step must run, in one process.

Blocks, x [tokens, hidden], weights in nn.Linear's [out, in] layout:
  gpt    y = x + fc2(dropout(act(fc1(x)), p))                biases; p = --dropout (0.1),
                                                              act = --activation (gelu_tanh)
  llama  y = x + down_proj(silu(gate_proj(x)) * up_proj(x))  SwiGLU; no bias, no dropout

Rows, each one training step: forward, then backward(dy) into x and every parameter:
  gemms    the step's GEMMs alone through torch.matmul (cuBLAS) on preallocated bf16
           tensors of its shapes and layouts, nn.Linear's conventions: forward x @ W.T,
           dgrad dy @ W, wgrad dy.T @ x (W.grad's [out, in]). gpt: 6 (fc1 and fc2
           forward, dgrad, wgrad); llama: 9 (gate, up and down forward, dgrad, wgrad,
           gate and up as two GEMMs as nn.Linear runs them). One event pair around all.
  eager    the torch.nn block
  compile  torch.compile of the eager block (default mode); reported as failed, with
           the exception's first line, if it raises
  epifuse  epifuse.nn.MLP / epifuse.nn.GatedMLP (residual=True) with the eager block's
           state_dict loaded (the same weights), as users get it: one block op whose
           backward runs the upper layer's dgrad GEMM through torch.mm, then the lower
           layer's backward as its own kernel
  efused   the same module with fused_dgrad=True: the lower layer's backward in the
           epilogue of the upper layer's dgrad GEMM
  epiop    the epifuse row with every call through the registered torch.library op
           (epifuse.torch.direct = False): what eager calls cost before they skipped
           the dispatcher (Note [Eager calls skip the dispatcher])
Each row's median over --rounds rounds after --warmup rounds; every round times each
row once, in turns, the first row rotating from round to round. A step is timed with a
torch.cuda.Event pair and a torch.cuda.synchronize before and after it; the gradients
are set to None before the synchronize, outside the events, in every row (the gemms
row writes into its preallocated outputs). Printed: ms, the ratio to the gemms row's
median, and TFLOP/s of the GEMMs' operations (2·M·N·K each) over the row's time.
That per-step time counts the host's time to the first kernel and any stretch where
the GPU waits for the host. --loop N adds a second time per row: N steps back to back
between one event pair with no synchronize inside (as a training loop that does not
read its loss every step runs), ms a step and its ratio to the gemms row's own.

Before timing, each block and shape is checked once with dropout 0 on fresh random
x and dy: the output and every gradient of epifuse and of eager are compared with an
f32 run of the same weights by ‖got − ref‖ / ‖ref‖ (CHECK_RULE below). A mismatch
is printed and recorded; --check makes it exit status 1.

    python3 tools/perf/mlp_block.py [--block gpt|llama|both] [--shape T,H,F ...]
        [--dropout 0.1] [--rounds 30] [--warmup 3] [--loop N] [--check] [--json PATH]
Default shapes (tokens, hidden, ffn): gpt 16384,4096,16384 and 8192,2048,8192; llama
16384,4096,11008 and 8192,2048,5504; --shape (repeatable) sets them for every block.
Exit status 1 when a row other than compile fails, or with --check on a mismatch.
Needs a CUDA GPU, torch 2.4 or newer and epifuse importable (PYTHONPATH=python with
the checkout's build/).
"""
import argparse
import copy
import datetime
import gc
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import torch
from torch import nn

DEVICE = "cuda"
DTYPE = torch.bfloat16
SHAPES = {"gpt": [(16384, 4096, 16384), (8192, 2048, 8192)],
          "llama": [(16384, 4096, 11008), (8192, 2048, 5504)]}
ROWS = ("gemms", "eager", "compile", "epifuse", "efused", "epiop")
GPT_ACTIVATIONS = {"gelu_tanh": lambda: nn.GELU(approximate="tanh"), "relu": nn.ReLU}
gpt_activation = "gelu_tanh"  # --activation
MAY_FAIL = {"compile"}  # rows whose failure is reported without failing the run

# CHECK_RULE: a tensor passes when epifuse's error against the f32 run is at most
# max(2 * eager's error, bf16's epsilon 2^-7), errors as ‖got − ref‖ / ‖ref‖. Both run
# the same function from the same bf16 weights and inputs and differ only in where they
# round: bf16 keeps 8 significant bits and every GEMM output, activation and gradient is
# stored in it, so eager's own distance from f32 (1e-3 to 5e-3, the weight gradients
# the most) is the scale of honest rounding. A fused epilogue rounds once where eager
# rounds after each op, and sums in another order: its error may land either side of
# eager's, within a factor of two. The floor keeps a tensor on which eager happens to
# come very close from failing on noise. A wrong bias, activation or gradient moves the
# tensors it touches by more: a forward without fc1's bias, at 256 x 128 x 512, is 1.9e-2
# off in y (whose residual x dominates), 5e-2 to 1 in the gradients. NaN never passes.
BF16_EPS = 2.0 ** -7


# ---- the blocks, as torch.nn modules with epifuse.nn's parameter names
class GPTMLP(nn.Module):
    """y = x + fc2(dropout(act(fc1(x)))): epifuse.nn.MLP's parameters."""

    def __init__(self, hidden, ffn, p, device=None, dtype=None):
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn, device=device, dtype=dtype)
        self.act = GPT_ACTIVATIONS[gpt_activation]()
        self.drop = nn.Dropout(p)
        self.fc2 = nn.Linear(ffn, hidden, device=device, dtype=dtype)

    def forward(self, x):
        return x + self.fc2(self.drop(self.act(self.fc1(x))))


class LlamaMLP(nn.Module):
    """y = x + down_proj(silu(gate_proj(x)) * up_proj(x)): epifuse.nn.GatedMLP's parameters."""

    def __init__(self, hidden, ffn, device=None, dtype=None):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn, bias=False, device=device, dtype=dtype)
        self.up_proj = nn.Linear(hidden, ffn, bias=False, device=device, dtype=dtype)
        self.down_proj = nn.Linear(ffn, hidden, bias=False, device=device, dtype=dtype)
        self.act = nn.SiLU()

    def forward(self, x):
        return x + self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


def torch_block(block, hidden, ffn, p):
    if block == "gpt":
        return GPTMLP(hidden, ffn, p, device=DEVICE, dtype=DTYPE)
    return LlamaMLP(hidden, ffn, device=DEVICE, dtype=DTYPE)


def epifuse_block(block, hidden, ffn, p, ref, fused_dgrad=None):
    """(module, forward) of the epifuse.nn block computing `ref`'s function from a copy
    of its weights; load_state_dict is strict, so a missing or extra name fails."""
    import epifuse.nn as enn
    if block == "gpt":
        m = enn.MLP(hidden, ffn, gpt_activation, dropout=p, device=DEVICE, dtype=DTYPE, fused_dgrad=fused_dgrad)
        forward = m
    else:
        m = enn.GatedMLP(hidden, ffn, "silu", residual=True, device=DEVICE, dtype=DTYPE, fused_dgrad=fused_dgrad)

        def forward(x):
            return m(x, x)
    m.load_state_dict(ref.state_dict())
    return m, forward


# ---- the rows
def gemm_plan(block, ref, tokens, hidden, ffn, gen):
    """(name, a, b, out) for each GEMM of the block's training step, out = a @ b.
    Weights are `ref`'s; activations and gradients random (never zeros, which can run
    faster than real data). a and b are views (transposes, no copies); out is allocated
    here, once."""
    def rand(*shape):
        return torch.randn(*shape, device=DEVICE, dtype=DTYPE, generator=gen)

    x, dy = rand(tokens, hidden), rand(tokens, hidden)
    if block == "gpt":
        w1, w2 = ref.fc1.weight.detach(), ref.fc2.weight.detach()
        h, dh = rand(tokens, ffn), rand(tokens, ffn)
        plan = [("fc1 forward", x, w1.t()), ("fc2 forward", h, w2.t()),
                ("fc2 dgrad", dy, w2), ("fc2 wgrad", dy.t(), h),
                ("fc1 dgrad", dh, w1), ("fc1 wgrad", dh.t(), x)]
    else:
        wg, wu, wd = (m.weight.detach() for m in (ref.gate_proj, ref.up_proj, ref.down_proj))
        h, dg, du = rand(tokens, ffn), rand(tokens, ffn), rand(tokens, ffn)
        plan = [("gate forward", x, wg.t()), ("up forward", x, wu.t()), ("down forward", h, wd.t()),
                ("down dgrad", dy, wd), ("down wgrad", dy.t(), h),
                ("gate dgrad", dg, wg), ("gate wgrad", dg.t(), x),
                ("up dgrad", du, wu), ("up wgrad", du.t(), x)]
    return [(name, a, b, torch.empty(a.shape[0], b.shape[1], device=DEVICE, dtype=DTYPE)) for name, a, b in plan]


def gemm_row(plan):
    def step():
        for _, a, b, out in plan:
            torch.matmul(a, b, out=out)
    return (lambda: None), step


def module_row(forward, params, x, dy):
    """(prep, step) of one forward + backward(dy) of `forward` on a leaf sharing x's data."""
    x = x.detach().requires_grad_(True)
    leaves = [x, *params]

    def prep():
        for t in leaves:
            t.grad = None

    def step():
        forward(x).backward(dy)
    return prep, step


def through_op(row):
    """(prep, step) of `row` with epifuse.torch.direct off during the step."""
    import epifuse.torch as et
    prep, step = row

    def step_op():
        et.direct = False
        try:
            step()
        finally:
            et.direct = True
    return prep, step_op


def first_line(e):
    """The exception's type and the first line of its message."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def time_step(prep, step):
    prep()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def time_loop(prep, step, n):
    """ms a step of n steps run back to back between one event pair, with no
    synchronize between them: a training loop's view, where the host queues the next
    step while the GPU runs this one, so host time shows only where it exceeds the GPU's."""
    prep()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        prep()
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def time_rows(rows, warmup, rounds, failed, loop=0):
    """Per-round ms of each row (the warm-up rounds left out), rows timed in turns with
    the first rotating; a row that raises is recorded in `failed` and left out after.
    With loop > 0 each round also times `loop` steps back to back (time_loop). Returns
    (times, loop times), each {row: [ms]}."""
    names = list(rows)
    times = {n: [] for n in names}
    loops = {n: [] for n in names}
    for r in range(warmup + rounds):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            if name in failed:
                continue
            try:
                ms = time_step(*rows[name])
                looped = time_loop(*rows[name], loop) if loop else None
            except Exception as e:  # noqa: BLE001 - a row's failure is reported, not fatal
                failed[name] = first_line(e)
                continue
            if r >= warmup:
                times[name].append(ms)
                if looped is not None:
                    loops[name].append(looped)
    return times, loops


def profile_rows(rows, failed, top):
    """Prints each row's `top` kernels by GPU time over three steps (torch.profiler):
    where a row's time goes beyond its GEMMs."""
    from torch.profiler import ProfilerActivity, profile
    for name, (prep, step) in rows.items():
        if name in failed:
            continue
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                prep()
                step()
            torch.cuda.synchronize()
        events = [e for e in prof.key_averages() if getattr(e, "self_device_time_total", 0) > 0]
        events.sort(key=lambda e: -e.self_device_time_total)
        total = sum(e.self_device_time_total for e in events) / 3 / 1e3
        print(f"  profile {name}: {total:.3f} ms of kernels a step")
        for e in events[:top]:
            ms = e.self_device_time_total / 3 / 1e3
            print(f"    {ms:8.3f} ms {e.count // 3:3d}x  {e.key[:110]}")


# ---- the correctness check
def grads_of(module, forward, x, dy):
    """y and the gradients of x and of each parameter (by name) of forward(x).backward(dy)."""
    x = x.detach().requires_grad_(True)
    y = forward(x)
    y.backward(dy)
    out = {"y": y.detach(), "x.grad": x.grad}
    out.update({f"{n}.grad": p.grad for n, p in module.named_parameters()})
    return out


def rel_err(got, ref):
    """‖got − ref‖ / ‖ref‖ in f32; inf for a missing tensor, NaN when either is not finite."""
    if got is None or ref is None:
        return float("inf")
    ref = ref.float()
    return ((got.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def check(block, hidden, ffn, tokens, ref, gen):
    """Output and gradients of epifuse and eager, dropout 0, against an f32 run of the
    same weights on fresh random x and dy (CHECK_RULE)."""
    x = torch.randn(tokens, hidden, device=DEVICE, dtype=DTYPE, generator=gen)
    dy = torch.randn(tokens, hidden, device=DEVICE, dtype=DTYPE, generator=gen)
    eager = torch_block(block, hidden, ffn, 0.0)
    eager.load_state_dict(ref.state_dict())
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference multiplies in f32
    try:
        exact_mod = copy.deepcopy(eager).float()
        exact = grads_of(exact_mod, exact_mod, x.float(), dy.float())
        del exact_mod
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    theirs = grads_of(eager, eager, x, dy)
    try:
        mod, forward = epifuse_block(block, hidden, ffn, 0.0, ref)
        ours = grads_of(mod, forward, x, dy)
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        return {"passed": False, "error": first_line(e), "tensors": {}}
    tensors = {}
    for name in exact:
        e = {"epifuse": rel_err(ours.get(name), exact[name]), "eager": rel_err(theirs[name], exact[name]),
             "epifuse_vs_eager": rel_err(ours.get(name), theirs[name])}
        e["bound"] = max(2 * e["eager"], BF16_EPS)
        e["passed"] = e["epifuse"] <= e["bound"]  # False for NaN
        tensors[name] = e
    worst = max(tensors, key=lambda n: tensors[n]["epifuse"] if tensors[n]["passed"] else float("inf"))
    return {"passed": all(e["passed"] for e in tensors.values()), "error": None, "worst": worst,
            "tensors": tensors}


def check_line(c):
    if c["error"]:
        return f"check (dropout 0): FAILED to run epifuse: {c['error']}"
    w = c["tensors"][c["worst"]]
    verdict = "passed" if c["passed"] else "MISMATCH"
    return (f"check (dropout 0), error vs f32: epifuse max {w['epifuse']:.2e} at {c['worst']} (eager "
            f"{w['eager']:.2e}, bound {w['bound']:.2e}; epifuse vs eager {w['epifuse_vs_eager']:.2e}): {verdict}")


# ---- one block at one shape
def run_config(block, tokens, hidden, ffn, args):
    p = args.dropout if block == "gpt" else 0.0
    torch.manual_seed(args.seed)  # weights; dropout's masks then draw from here
    gen = torch.Generator(device=DEVICE).manual_seed(args.seed)
    ref = torch_block(block, hidden, ffn, p)
    act = f" {gpt_activation}" if block == "gpt" else ""
    print(f"\n{block}{act} tokens {tokens} hidden {hidden} ffn {ffn} dropout {p}", flush=True)
    checked = check(block, hidden, ffn, tokens, ref, gen)
    print("  " + check_line(checked), flush=True)
    gc.collect()
    torch.cuda.empty_cache()

    plan = gemm_plan(block, ref, tokens, hidden, ffn, gen)
    gemms = [{"name": n, "m": a.shape[0], "n": b.shape[1], "k": a.shape[1]} for n, a, b, _ in plan]
    flops = sum(2 * g["m"] * g["n"] * g["k"] for g in gemms)
    x = torch.randn(tokens, hidden, device=DEVICE, dtype=DTYPE, generator=gen)
    dy = torch.randn(tokens, hidden, device=DEVICE, dtype=DTYPE, generator=gen)

    def compiled():
        try:
            from torch import _dynamo
            _dynamo.reset()  # a fresh compile per shape: no dynamic-shape recompile from the last one
        except ImportError:
            pass
        m = torch.compile(copy.deepcopy(ref))
        return module_row(m, list(m.parameters()), x, dy)

    def fused(fused_dgrad=None):
        m, forward = epifuse_block(block, hidden, ffn, p, ref, fused_dgrad)
        return module_row(forward, list(m.parameters()), x, dy)

    makers = {"gemms": lambda: gemm_row(plan), "eager": lambda: module_row(ref, list(ref.parameters()), x, dy),
              "compile": compiled, "epifuse": fused,
              "efused": lambda: fused(True), "epiop": lambda: through_op(fused())}
    rows, failed = {}, {}
    for name in ROWS:
        if name not in args.rows:
            continue
        try:
            rows[name] = makers[name]()
        except Exception as e:  # noqa: BLE001 - a row's failure is reported, not fatal
            failed[name] = first_line(e)
    times, loops = time_rows(rows, args.warmup, args.rounds, failed, args.loop)
    if args.profile:
        profile_rows(rows, failed, args.profile)

    base = statistics.median(times["gemms"]) if times.get("gemms") and "gemms" not in failed else None
    loop_base = statistics.median(loops["gemms"]) if loops.get("gemms") and "gemms" not in failed else None
    results = {}
    for name in ROWS:
        ms = times.get(name) or []
        if name not in args.rows:
            results[name] = {"failed": None, "skipped": True, "ms": None, "ratio_to_gemms": None, "rounds_ms": []}
            continue
        if name in failed or not ms:
            results[name] = {"failed": failed.get(name, "no timed rounds"), "ms": None, "ratio_to_gemms": None,
                             "rounds_ms": ms}
            continue
        med = statistics.median(ms)
        q = statistics.quantiles(ms, n=4) if len(ms) > 1 else [med, med, med]
        results[name] = {"failed": None, "ms": med, "ratio_to_gemms": med / base if base else None,
                         "tflops": flops / med / 1e9, "iqr_pct": 100 * (q[2] - q[0]) / med, "rounds_ms": ms}
        if loops.get(name):
            lm = statistics.median(loops[name])
            results[name].update({"loop_ms": lm, "loop_ratio_to_gemms": lm / loop_base if loop_base else None,
                                  "loop_rounds_ms": loops[name]})
    return {"block": block, "activation": gpt_activation if block == "gpt" else "silu", "tokens": tokens,
            "hidden": hidden, "ffn": ffn, "dropout": p, "gemm_flops": flops, "gemms": gemms, "check": checked,
            "rows": results}


def table(res):
    looped = any("loop_ms" in r for r in res["rows"].values())
    lines = [f"  {'row':8} {'ms':>9} {'x gemms':>8} {'TFLOP/s':>8} {'IQR':>6}"
             + (f" {'loop ms':>9} {'x gemms':>8}" if looped else "")]
    for name in ROWS:
        r = res["rows"][name]
        if r.get("skipped"):
            continue
        if r["failed"]:
            lines.append(f"  {name:8} failed: {r['failed']}")
            continue
        ratio = f"{r['ratio_to_gemms']:8.3f}" if r["ratio_to_gemms"] is not None else f"{'-':>8}"
        line = f"  {name:8} {r['ms']:9.3f} {ratio} {r['tflops']:8.1f} {r['iqr_pct']:5.1f}%"
        if "loop_ms" in r:
            lr = r["loop_ratio_to_gemms"]
            line += f" {r['loop_ms']:9.3f} " + (f"{lr:8.3f}" if lr is not None else f"{'-':>8}")
        lines.append(line)
    return "\n".join(lines)


# ---- reporting
def summary(results, ms_key, ratio_key, checked):
    """One line a block: the gemms row's time and every other row's ratio to it (ms_key, ratio_key: the
    per-step or the loop numbers), and with `checked` the gradient check's verdict."""
    print(f"{'block':6} {'T,H,F':>18} {'gemms':>9} " + " ".join(f"{n:>8}" for n in ROWS[1:])
          + (f" {'check':>9}" if checked else ""))
    for res in results:
        rows = res["rows"]
        cells = [f"{'failed':>8}" if rows[n]["failed"] else f"{'-':>8}" if rows[n].get(ratio_key) is None else
                 f"{rows[n][ratio_key]:7.3f}x" for n in ROWS[1:]]
        g = rows["gemms"]
        gms = f"{'failed':>9}" if g["failed"] else f"{'-':>9}" if g.get(ms_key) is None else f"{g[ms_key]:9.3f}"
        shape = f"{res['tokens']},{res['hidden']},{res['ffn']}"
        line = f"{res['block']:6} {shape:>18} {gms} {' '.join(cells)}"
        if checked:
            line += f" {'passed' if res['check']['passed'] else 'not run' if res['check']['error'] else 'MISMATCH':>9}"
        print(line)


def git_commit():
    """HEAD of the checkout holding this script and whether its tracked files have changes, or None. A tree
    copied without its git history names its commit in EPIFUSE_COMMIT instead."""
    if os.environ.get("EPIFUSE_COMMIT"):
        return {"sha": os.environ["EPIFUSE_COMMIT"], "dirty": False}
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip() != ""
    except (OSError, subprocess.CalledProcessError):
        return None
    return {"sha": sha, "dirty": dirty}


def reduced_precision_reduction():
    """torch's flag letting cuBLAS reduce bf16 GEMMs' split-K partial sums in bf16, or None if unknown."""
    try:
        return bool(torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction)
    except (AttributeError, AssertionError):  # AssertionError: torch.backends.cuda's "Unknown attribute"
        return None


def shape_arg(text):
    try:
        shape = tuple(int(v) for v in text.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"--shape takes three positive integers T,H,F, got {text!r}")
    return shape


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--block", choices=["gpt", "llama", "both"], default="both")
    ap.add_argument("--shape", type=shape_arg, action="append", default=None, metavar="T,H,F",
                    help="tokens,hidden,ffn (repeatable); replaces every block's default shapes")
    ap.add_argument("--dropout", type=float, default=0.1, help="gpt's dropout after the GELU (llama has none)")
    ap.add_argument("--activation", choices=sorted(GPT_ACTIVATIONS), default="gelu_tanh", help="gpt's activation")
    ap.add_argument("--rows", default=",".join(ROWS), metavar="R,R,...",
                    help=f"the rows to time, gemms among them (default all: {','.join(ROWS)})")
    ap.add_argument("--rounds", type=int, default=30, help="timed rounds; each times every row once")
    ap.add_argument("--warmup", type=int, default=3, help="untimed rounds first (compiles happen there)")
    ap.add_argument("--seed", type=int, default=0, help="weights, inputs and dropout masks")
    ap.add_argument("--check", action="store_true", help="exit 1 when epifuse's output or a gradient mismatches")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after timing, print each row's N kernels by GPU time (torch.profiler)")
    ap.add_argument("--loop", type=int, default=0, metavar="N",
                    help="each round also times N steps back to back with no synchronize between them (a "
                         "training loop's view); 0: off")
    ap.add_argument("--json", default=None, metavar="PATH", help="write every number here, per-round times too")
    args = ap.parse_args(argv)
    if not 0.0 <= args.dropout < 1.0:
        ap.error(f"--dropout must be in [0, 1), got {args.dropout}")
    args.rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in args.rows if r not in ROWS]
    if unknown or "gemms" not in args.rows:
        ap.error(f"--rows takes rows of {','.join(ROWS)}, gemms among them; got {','.join(args.rows)}")
    if args.loop < 0:
        ap.error(f"--loop must be 0 or more, got {args.loop}")
    if args.rounds < 1 or args.warmup < 1:
        ap.error("--rounds and --warmup must be at least 1 (the first round compiles)")
    if not torch.cuda.is_available():
        ap.error("no CUDA device")
    if not hasattr(torch.library, "register_autograd"):
        ap.error(f"epifuse.nn needs torch 2.4 or newer (torch.library.register_autograd); this is torch "
                 f"{torch.__version__}")
    return args


def main(argv=None):
    global gpt_activation
    args = parse(argv)
    gpt_activation = args.activation
    blocks = ["gpt", "llama"] if args.block == "both" else [args.block]
    gpu = torch.cuda.get_device_name()
    commit = git_commit()
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    at = f"{commit['sha'][:12]}{' (dirty)' if commit['dirty'] else ''}" if commit else "unknown commit"
    print(f"# {gpu}, torch {torch.__version__} (CUDA {torch.version.cuda}), bf16, commit {at}, {date}")
    print(f"# median of {args.rounds} rounds after {args.warmup}; grads set to None outside the timed region")
    results = []
    for block in blocks:
        for tokens, hidden, ffn in args.shape or SHAPES[block]:
            res = run_config(block, tokens, hidden, ffn, args)
            gc.collect()  # the config's tensors, held by its rows' closures until now
            torch.cuda.empty_cache()
            print(table(res), flush=True)
            results.append(res)

    print(f"\n# {gpu}, commit {at}: ms of a forward + backward step, x = ratio to the gemms row")
    summary(results, "ms", "ratio_to_gemms", checked=True)
    if args.loop:
        print(f"\n# the same in loops of {args.loop} steps with no synchronize inside: ms a step, x = ratio to the "
              "gemms row's loop")
        summary(results, "loop_ms", "loop_ratio_to_gemms", checked=False)

    if args.json:
        record = {
            "date": date, "gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda, "commit": commit,
            "dtype": "bf16",
            "bf16_reduced_precision_reduction": reduced_precision_reduction(),
            "timing": "median of rounds; each round times every row once in turns (first row rotating); "
                      "torch.cuda.Event pair per step, synchronize before and after; grads set to None "
                      "outside the events in every row; loop_ms (--loop N): N steps between one event pair, "
                      "no synchronize inside, ms a step",
            "config": vars(args), "check_rule": "epifuse <= max(2 * eager, 2^-7), errors norm(got - f32) / norm(f32)",
            "results": results,
        }
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.json}")
    failed = [f"{r['block']} {name}" for r in results for name in args.rows
              if r["rows"][name]["failed"] and name not in MAY_FAIL]
    mismatched = [f"{r['block']} {r['tokens']},{r['hidden']},{r['ffn']}" for r in results if not r["check"]["passed"]]
    if failed:
        print(f"failed rows: {', '.join(failed)}", file=sys.stderr)
    if args.check and mismatched:
        print(f"epifuse does not match eager: {', '.join(mismatched)}", file=sys.stderr)
    return 1 if failed or (args.check and mismatched) else 0


if __name__ == "__main__":
    sys.exit(main())
