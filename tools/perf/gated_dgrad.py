#!/usr/bin/env python3
"""The gated MLP's dgrad (SwiGLU, GEGLU) in one process: the fused dgrad epilogue against
cuBLAS's two dgrad GEMMs, the bar of docs/gemm-backward.md §4.

A LLaMA MLP's backward, given dy [T, H] and the forward's saved gate and up
pre-activations g, u [T, F], computes dh = dy·Wd (down_proj's dgrad, K = H), then
dg = dh·u·act'(g) and du = dh·act(g), then dX = dg·Wg + du·Wu (K = 2F). Rows, each a
triton do_bench median on one GPU, bf16, weights in nn.Linear's layout:
  cublas      the two dgrad GEMMs alone: dy @ Wd, then [dg du] @ [Wg; Wu] (one K = 2F
              GEMM on preallocated, concatenated tensors): the floor
  two_step    torch.mm(dy, Wd), epifuse's backward kernel (dg, du), then dX as
              torch.mm + addmm_: what epifuse.nn.GatedMLP runs by default
  fused       the dgrad GEMM with the gated chain's backward as its epilogue (default
              tile), then the same dX: GatedMLP with fused_dgrad=True
  two_step_cat, fused_cat
              the same with dg and du written into the two halves of one [T, 2F]
              buffer (strided out=), then dX as the one K = 2F GEMM against the
              weights concatenated once, outside the timing (a packed weight)
Each row's time over cublas's in the same round, rounds in turns (median and range).
Every GEMM operand holds random data: on zeros cuBLAS runs 10-20% faster. The fused
dgrad's outputs are checked against the two-step ones (bf16 rounding of dh is the only
difference: exit 1 past 2e-2 relative), and its strided outputs against its dense
ones, bit for bit.

`--pieces` times each launch alone as well, against its own count: the GEMMs against
their FLOPs at the rate the K = 2F GEMM reaches, the elementwise backward and the
fused dgrad's epilogue against the bytes they move at the rate a [T, F] copy reaches
in the same run (docs/gemm-backward.md §4, "The model on an H200").

    python3 tools/perf/gated_dgrad.py [--shape T,H,F ...] [--activation silu|gelu_tanh] [--pieces]
        [--rounds N]
Default shapes: 8192,4096,11008 (the bar's) and 16384,4096,11008.
"""
import argparse
import statistics
import sys

import torch
import triton.testing

from epifuse.layers import gated_chain


def bench(fn):
    return triton.testing.do_bench(fn, return_mode="median")


def run(tokens, hidden, ffn, activation, pieces, rounds):
    dt, dev = torch.bfloat16, "cuda"
    g = gated_chain("bf16", activation).grad()
    backward = g.backward.compile()
    dgrad = g.backward.as_gemm_epilogue("dy", {"kind": "gemm", "a": "bf16", "b": "bf16", "a_layout": "row",
                                              "b_layout": "row"}).compile()
    gen = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape, scale=1.0):
        return torch.randn(*shape, device=dev, dtype=dt, generator=gen) * scale

    dy = rand(tokens, hidden)
    wd = rand(hidden, ffn, scale=ffn ** -0.5)            # down_proj.weight [H, F]
    wg, wu = rand(ffn, hidden, scale=hidden ** -0.5), rand(ffn, hidden, scale=hidden ** -0.5)
    saved = {"saved_acc0": rand(tokens, ffn), "saved_acc1": rand(tokens, ffn)}
    w_cat = torch.cat([wg, wu], 0)                        # [2F, H]
    d_cat = rand(tokens, 2 * ffn)                         # never zeros: cuBLAS runs 10-20% faster on them
    dx = torch.empty(tokens, hidden, device=dev, dtype=dt)
    dh = torch.empty(tokens, ffn, device=dev, dtype=dt)

    def named(compiled, given):
        return [given[n] for n in compiled.input_names]

    def outputs(out, compiled_chain_outputs=("dacc0", "dacc1")):
        return dict(zip(compiled_chain_outputs, out))

    def cublas():
        torch.mm(dy, wd, out=dh)
        torch.mm(d_cat, w_cat, out=dx)

    def two_step():
        h = torch.mm(dy, wd)
        d = outputs(backward(*named(backward, {"dy": h, **saved})))
        x = torch.mm(d["dacc0"], wg)
        x.addmm_(d["dacc1"], wu)
        return d

    def fused():
        d = outputs(dgrad(*named(dgrad, {"a": dy, "b": wd, **saved})))
        x = torch.mm(d["dacc0"], wg)
        x.addmm_(d["dacc1"], wu)
        return d

    halves = (d_cat[:, :ffn], d_cat[:, ffn:])

    def two_step_cat():
        h = torch.mm(dy, wd)
        backward(*named(backward, {"dy": h, **saved}), out=halves)
        torch.mm(d_cat, w_cat, out=dx)

    def fused_cat():
        dgrad(*named(dgrad, {"a": dy, "b": wd, **saved}), out=halves)
        torch.mm(d_cat, w_cat, out=dx)

    a, b = two_step(), fused()
    errs = {k: ((a[k].float() - b[k].float()).norm() / a[k].float().norm()).item() for k in a}
    if not max(errs.values()) <= 2e-2:  # dh's bf16 rounding gives ~3e-3; NaN fails too
        sys.exit(f"the fused dgrad's outputs differ from the two steps': relative errors {errs}")
    fused_cat()
    assert torch.equal(halves[0], b["dacc0"]) and torch.equal(halves[1], b["dacc1"]), \
        "the fused dgrad's outputs differ between dense and strided out="
    rows = {"cublas": cublas, "two_step": two_step, "fused": fused, "two_step_cat": two_step_cat,
            "fused_cat": fused_cat}
    times = {k: [] for k in rows}
    for _ in range(rounds):                                # in turns: the GPU's clock drifts
        for k, f in rows.items():
            times[k].append(bench(f))
    base = times["cublas"]

    def ratio(k):
        r = sorted(t / b for t, b in zip(times[k], base))
        return f"{statistics.median(times[k]):.3f} ms {statistics.median(r):.3f}x ({r[0]:.3f}-{r[-1]:.3f})"
    print(f"{activation} T,H,F = {tokens},{hidden},{ffn}, {rounds} rounds: cublas {statistics.median(base):.3f} ms | "
          + " | ".join(f"{k} {ratio(k)}" for k in rows if k != "cublas")
          + f" | fused vs two_step rel. error {max(errs.values()):.2e}", flush=True)
    if not pieces:
        return
    h = torch.mm(dy, wd)
    g, u = saved["saved_acc0"], saved["saved_acc1"]
    dg, du = torch.empty_like(g), torch.empty_like(g)
    tf = tokens * ffn * 2                                  # bytes of one [T, F] bf16 tensor
    launches = {
        "copy [T,F]": (lambda: dg.copy_(g), 2 * tf, None),
        "dy @ Wd": (lambda: torch.mm(dy, wd, out=dh), 0, 2 * tokens * hidden * ffn),
        "[dg du] @ [Wg; Wu]": (lambda: torch.mm(d_cat, w_cat, out=dx), 0, 4 * tokens * hidden * ffn),
        "dg @ Wg, addmm_ du @ Wu": (lambda: (torch.mm(dg, wg, out=dx), dx.addmm_(du, wu)), 0,
                                    4 * tokens * hidden * ffn),
        "backward (h, g, u -> dg, du)": (lambda: backward(*named(backward, {"dy": h, **saved}), out=(dg, du)),
                                         5 * tf, None),
        "backward into the halves": (lambda: backward(*named(backward, {"dy": h, **saved}), out=halves),
                                     5 * tf, None),
        "fused dgrad": (lambda: dgrad(*named(dgrad, {"a": dy, "b": wd, **saved}), out=(dg, du)),
                        4 * tf, 2 * tokens * hidden * ffn),
        "fused dgrad into the halves": (lambda: dgrad(*named(dgrad, {"a": dy, "b": wd, **saved}), out=halves),
                                        4 * tf, 2 * tokens * hidden * ffn),
    }
    t = {k: bench(f) for k, (f, _, _) in launches.items()}
    copy_rate = 2 * tf / (t["copy [T,F]"] * 1e-3)
    flop_rate = 4 * tokens * hidden * ffn / (t["[dg du] @ [Wg; Wu]"] * 1e-3)
    print(f"  pieces: copy {copy_rate / 1e12:.2f} TB/s, the K = 2F GEMM {flop_rate / 1e12:.0f} TFLOP/s")
    for k, (_, nbytes, flops) in launches.items():
        model = nbytes / copy_rate + (flops or 0) / flop_rate
        print(f"  {k:32s} {t[k]:.3f} ms, model {model * 1e3:.3f} ms: {t[k] / (model * 1e3):.3f}x", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", action="append", default=None, metavar="T,H,F")
    ap.add_argument("--activation", default="silu", choices=["silu", "gelu_tanh"])
    ap.add_argument("--pieces", action="store_true", help="time each launch alone against its byte or FLOP count")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the rows in turns (default 3)")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shape] if args.shape else \
        [(8192, 4096, 11008), (16384, 4096, 11008)]
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, bf16")
    for t, h, f in shapes:
        run(t, h, f, args.activation, args.pieces, args.rounds)


if __name__ == "__main__":
    main()
