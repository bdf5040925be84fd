"""Trains one small pre-norm transformer MLP block on synthetic data three ways in one
process (eager PyTorch, the same block built from epifuse.nn with the same initial
weights, and torch.compile of the torch module, last: what its compile leaves running
slowed a host-bound run after it) and compares their step times and loss curves:

    python examples/python/train_mlp.py [--block gpt|llama] [--dtype bf16|f32] [--steps 200]
    python examples/python/train_mlp.py --dropout 0 --check     # epifuse's curve must follow eager's

gpt is y = x + fc2(dropout(gelu_tanh(fc1(LayerNorm(x))))); llama is
y = x + down_proj(silu(gate_proj(h)) * up_proj(h)), h = RMSNorm(x), with no dropout
(LLaMA's MLP has none). The epifuse block (epifuse.nn.MLP, one op) runs fc1's bias, GELU
and dropout in its GEMM's epilogue and the residual add in fc2's (llama: GatedMLP, gate
and up as one dual GEMM, the residual in down_proj's). Step times are the median over the steps after `--warmup`,
from torch.cuda.Event pairs read after one synchronize. With no dropout the three runs
compute the same function from the same weights on the same batches, so their loss
curves differ by rounding only; `--check` exits 1 when epifuse's departs from eager's
by more than LOSS_BOUND (below). `--device cpu --eager-only` runs the eager path
alone, without a GPU or epifuse.

--dtype sets the parameters too: bf16 trains bf16 weights with no f32 master copy, so
an update below half a weight's ulp rounds away (the norms' weights, near 1, do not
move at lr 1e-3), the same in the three runs.
"""
import argparse
import copy
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}
RMS_EPS = 1e-6  # LLaMA's, given to both RMSNorms (torch.nn.RMSNorm's default would be finfo.eps)
POOL = 8        # distinct synthetic batches, made once and cycled

# Largest relative difference |loss - eager's| / eager's, over every step of the run,
# that --check accepts with dropout off. Both runs compute the same function from the
# same weights on the same data and differ only in where they round:
# - bf16 keeps 8 significant bits, so each rounding is within u = 2^-8 = 4e-3 relative.
#   A fused epilogue rounds once where eager rounds after the bias, the activation and
#   the residual add; norms scale by the weight before or after rounding; the GEMMs sum
#   in another order. So the two forwards differ by an ulp or so per element, and each
#   AdamW step stores bf16 weights that may differ by an ulp, which later steps carry.
#   The loss is a mean of tokens x hidden squared errors: independent per-element
#   differences average out of it, and what stays is the slow drift of the two weight
#   trajectories. 2e-2 (5u) is room for that drift over a few hundred steps; a real
#   fault (a missing bias, a wrong activation or gradient) changes the function or the
#   descent itself, which shows at the scale of the loss's own fall, well past 5u.
# - f32 (tf32 off, torch's default; the JSON records the flag) differs by summation
#   order alone, u = 2^-24 = 6e-8; 1e-4 leaves a thousand roundoffs of drift.
# torch.compile's difference from eager, printed beside epifuse's, is the same run's
# measure of this rounding noise (not checked: it is torch's).
LOSS_BOUND = {"bf16": 2e-2, "f32": 1e-4}


# ---- the blocks, as torch.nn modules
class GPTMLP(nn.Module):
    """fc2(dropout(gelu_tanh(fc1(h)))): GPT-2's MLP."""

    def __init__(self, hidden, ffn, dropout):
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn)
        self.act = nn.GELU(approximate="tanh")
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, h):
        return self.fc2(self.drop(self.act(self.fc1(h))))


class GPTBlock(nn.Module):
    """y = x + mlp(LayerNorm(x)): GPT-2's MLP half, pre-norm."""

    def __init__(self, hidden, ffn, dropout):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.mlp = GPTMLP(hidden, ffn, dropout)

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class LlamaMLP(nn.Module):
    """LLaMA's MLP (SwiGLU): down_proj(silu(gate_proj(h)) * up_proj(h)), no biases."""

    def __init__(self, hidden, ffn):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)
        self.act = nn.SiLU()

    def forward(self, h):
        return self.down_proj(self.act(self.gate_proj(h)) * self.up_proj(h))


class LegacyRMSNorm(nn.Module):
    """torch.nn.RMSNorm's formula for torch before 2.4, which lacks it (the --eager-only path)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class LlamaBlock(nn.Module):
    """y = x + mlp(RMSNorm(x)), mlp LLaMA's SwiGLU MLP."""

    def __init__(self, hidden, ffn):
        super().__init__()
        rms = getattr(nn, "RMSNorm", None)
        self.norm = rms(hidden, eps=RMS_EPS) if rms is not None else LegacyRMSNorm(hidden, RMS_EPS)
        self.mlp = LlamaMLP(hidden, ffn)

    def forward(self, x):
        return x + self.mlp(self.norm(x))


def torch_block(args, dropout):
    return GPTBlock(args.hidden, args.ffn, dropout) if args.block == "gpt" else LlamaBlock(args.hidden, args.ffn)


# ---- the same blocks from epifuse.nn
def _enn():
    """epifuse.nn, imported when an epifuse block is made (the --eager-only path needs no library)."""
    import epifuse.nn
    return epifuse.nn


class EpifuseGPTBlock(nn.Module):
    """GPTBlock from epifuse.nn: one MLP op, whose fc1 GEMM runs bias, GELU and dropout
    in its epilogue and fc2's its bias and the residual add of x."""

    def __init__(self, hidden, ffn, dropout):
        super().__init__()
        enn = _enn()
        self.norm = enn.LayerNorm(hidden)
        self.mlp = enn.MLP(hidden, ffn, "gelu_tanh", dropout=dropout)

    def forward(self, x):
        return self.mlp(self.norm(x), x)


class EpifuseLlamaBlock(nn.Module):
    """LlamaBlock from epifuse.nn: gate_proj and up_proj as one dual GEMM with
    silu(gate) * up in its epilogue, down_proj adding the residual x in its own."""

    def __init__(self, hidden, ffn):
        super().__init__()
        enn = _enn()
        self.norm = enn.RMSNorm(hidden, eps=RMS_EPS)
        self.mlp = enn.GatedMLP(hidden, ffn, activation="silu", residual=True)

    def forward(self, x):
        return self.mlp(self.norm(x), x)


def epifuse_twin(block, args, dropout):
    """The epifuse.nn block computing what torch block `block` computes, holding a copy
    of its weights: the parameter names are the same, and load_state_dict (strict)
    fails if one is missing or left over."""
    twin = EpifuseGPTBlock(args.hidden, args.ffn, dropout) if args.block == "gpt" else \
        EpifuseLlamaBlock(args.hidden, args.ffn)
    p = next(block.parameters())
    twin = twin.to(p.device, p.dtype)
    twin.load_state_dict(block.state_dict())
    return twin


# ---- data, timing, training
def batches(args, device, dtype):
    """POOL synthetic (x, target) batches of [tokens, hidden], target = sin(x) + noise:
    a function the residual block fits in part, so the loss falls and then levels."""
    g = torch.Generator(device=device).manual_seed(args.seed)
    pool = []
    for _ in range(min(POOL, args.steps)):
        x = torch.randn(args.tokens, args.hidden, generator=g, device=device)
        target = torch.sin(x) + 0.1 * torch.randn(args.tokens, args.hidden, generator=g, device=device)
        pool.append((x.to(dtype), target.to(dtype)))
    return pool


class StepClock:
    """Marks step boundaries: torch.cuda.Event on a GPU, read after one synchronize at
    the end (no sync between steps, so the CPU runs ahead as in training and a step's
    time is the larger of its launch and GPU times); perf_counter on the CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        if self.cuda:
            torch.cuda.synchronize(device)
        self.marks = []
        self.mark()

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append(e)
        else:
            self.marks.append(time.perf_counter())

    def step_ms(self):
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
        return [(b - a) * 1e3 for a, b in zip(self.marks, self.marks[1:])]


def train(model, pool, args, device):
    """--steps AdamW steps on the batch pool; the per-step losses and times (ms)."""
    torch.manual_seed(args.seed + 1)  # dropout's masks: each run draws from the same generator state
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model.train()
    losses = []
    clock = StepClock(device)
    for step in range(args.steps):
        x, target = pool[step % len(pool)]
        loss = F.mse_loss(model(x).float(), target.float())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())  # read after the run: no sync inside it
        clock.mark()
    ms = clock.step_ms()
    return [float(v) for v in torch.stack(losses).cpu()], ms


# ---- reporting
def git_commit():
    """HEAD of the checkout holding this script and whether its tree has changes, or None. A tree
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


def plot(path, results, title):
    """The loss curves and each run's |loss - eager's|, as a PNG, when matplotlib imports."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not importable: skipped the plot")
        return
    others = [n for n in results if n != "eager"]
    fig, axes = plt.subplots(1, 2 if others else 1, figsize=(12 if others else 6, 4), squeeze=False)
    curves = axes[0][0]
    color = {name: f"C{i}" for i, name in enumerate(results)}  # one color per run in both panels
    for name, r in results.items():
        curves.plot(r["losses"], label=name, color=color[name], linewidth=1)
    curves.set(xlabel="step", ylabel="MSE loss", yscale="log", title="loss")
    curves.legend()
    if others:
        diff = axes[0][1]
        eager = results["eager"]["losses"]
        gaps = {n: [abs(a - b) for a, b in zip(results[n]["losses"], eager)] for n in others}
        for name, gap in gaps.items():
            diff.plot(gap, label=name, color=color[name], linewidth=1)
        if any(v > 0 for gap in gaps.values() for v in gap):
            diff.set_yscale("log", nonpositive="mask")  # steps with no difference are left out
        diff.set(xlabel="step", ylabel="|loss - eager's|", title="difference from eager")
        diff.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--block", choices=["gpt", "llama"], default="gpt",
                    help="gpt: LayerNorm + MLP(gelu_tanh); llama: RMSNorm + SwiGLU gated MLP")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="parameters, activations and data")
    ap.add_argument("--tokens", type=int, default=8192, help="rows of a batch")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--ffn", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10, help="first steps left out of the timing (compiles happen there)")
    ap.add_argument("--dropout", type=float, default=None,
                    help="gpt's dropout after the activation (default 0.1; 0 to compare loss curves); llama has none")
    ap.add_argument("--lr", type=float, default=1e-3, help="AdamW's learning rate")
    ap.add_argument("--seed", type=int, default=0, help="initial weights, data and dropout masks")
    ap.add_argument("--check", action="store_true", help="exit 1 when epifuse's loss curve departs from eager's "
                                                         "by more than the bound (needs no dropout)")
    ap.add_argument("--plot", default="loss_curves.png", help="PNG of the loss curves ('' for none)")
    ap.add_argument("--json", default=None, help="write the numbers here")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:k, or cpu with --eager-only")
    ap.add_argument("--eager-only", action="store_true", help="the eager run alone (no torch.compile, no epifuse)")
    args = ap.parse_args()
    if args.block == "llama" and args.dropout:
        ap.error("the llama block has no dropout (LLaMA's MLP has none)")
    args.p = (0.1 if args.dropout is None else args.dropout) if args.block == "gpt" else 0.0
    if not 0.0 <= args.p < 1.0:
        ap.error(f"--dropout must be in [0, 1), got {args.p}")
    if args.check and args.p > 0:
        ap.error("--check compares loss curves, which needs --dropout 0 (masks differ between the runs)")
    if args.check and args.eager_only:
        ap.error("--check compares epifuse's curve with eager's: it cannot run with --eager-only")
    if args.steps <= args.warmup:
        ap.error(f"--steps ({args.steps}) must exceed --warmup ({args.warmup}) to leave steps to time")
    if min(args.tokens, args.hidden, args.ffn) < 1:
        ap.error("--tokens, --hidden and --ffn must be positive")
    args.device = torch.device(args.device)
    if args.device.type != "cuda" and not args.eager_only:
        ap.error("epifuse runs on CUDA: --device cpu needs --eager-only")
    if args.device.type == "cuda":
        if not torch.cuda.is_available():
            ap.error("no CUDA device: run with --device cpu --eager-only for the eager path alone")
        if args.device.index is None:
            args.device = torch.device("cuda", torch.cuda.current_device())
    if not args.eager_only and not hasattr(torch.library, "register_autograd"):
        ap.error(f"epifuse.nn needs torch 2.4 or newer (torch.library.register_autograd); this is torch "
                 f"{torch.__version__}: --eager-only runs the eager path alone")
    return args


def main():
    args = parse()
    device, dtype = args.device, DTYPES[args.dtype]
    if device.type == "cuda":
        torch.cuda.set_device(device)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    shape = f"tokens {args.tokens}, hidden {args.hidden}, ffn {args.ffn}"
    print(f"{args.block} block, {args.dtype}, {shape}, dropout {args.p}, {args.steps} steps on {gpu}, "
          f"torch {torch.__version__}", flush=True)

    torch.manual_seed(args.seed)
    base = torch_block(args, args.p).to(device, dtype)  # every run starts from these weights
    pool = batches(args, device, dtype)

    # torch.compile runs last: what its compile leaves behind (worker processes, caches)
    # is not there while eager and epifuse are timed.
    makers = {"eager": lambda: copy.deepcopy(base)}
    if not args.eager_only:
        makers["epifuse"] = lambda: epifuse_twin(base, args, args.p)
        makers["torch.compile"] = lambda: torch.compile(copy.deepcopy(base))
    results = {}
    for name, make in makers.items():
        losses, ms = train(make(), pool, args, device)
        results[name] = {"losses": losses, "step_ms": ms, "median_ms": statistics.median(ms[args.warmup:])}
        print(f"  {name:14s} loss {losses[0]:.5f} -> {losses[-1]:.5f}", flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()

    eager = results["eager"]
    print(f"\nper step, median of steps {args.warmup}..{args.steps - 1}:")
    print(f"  {'':14s} {'ms':>9s} {'/ eager':>8s} {'max |dloss|':>12s} {'max rel':>9s}")
    for name, r in results.items():
        r["ratio_to_eager"] = r["median_ms"] / eager["median_ms"]
        d = [abs(a - b) for a, b in zip(r["losses"], eager["losses"])]
        r["max_abs_loss_diff"] = max(d)
        r["max_rel_loss_diff"] = max(x / abs(b) if b else (math.inf if x else 0.0)
                                     for x, b in zip(d, eager["losses"]))
        print(f"  {name:14s} {r['median_ms']:9.3f} {r['ratio_to_eager']:8.3f} {r['max_abs_loss_diff']:12.3e} "
              f"{r['max_rel_loss_diff']:9.2e}")
    if args.p > 0 and len(results) > 1:
        print("  (dropout's masks are not the same across the runs: compare the curves with --dropout 0)")

    check = None
    if args.check:
        bound = LOSS_BOUND[args.dtype]
        worst = results["epifuse"]["max_rel_loss_diff"]
        check = {"bound_rel": bound, "epifuse_max_rel": worst, "passed": worst <= bound}
        print(f"\nepifuse's loss curve {'follows' if check['passed'] else 'DEPARTS FROM'} eager's: max relative "
              f"difference {worst:.2e}, bound {bound:.0e} at {args.dtype} "
              f"(torch.compile's: {results['torch.compile']['max_rel_loss_diff']:.2e})", flush=True)

    if args.plot:
        plot(args.plot, results, f"{args.block} block, {args.dtype}, {shape}, dropout {args.p}, {gpu}")
    if args.json:
        record = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": gpu, "torch": torch.__version__, "commit": git_commit(),
            "tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "config": {k: (str(v) if isinstance(v, torch.device) else v) for k, v in vars(args).items()},
            "results": results, "check": check,
        }
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.json}")
    sys.exit(0 if check is None or check["passed"] else 1)


if __name__ == "__main__":
    main()
