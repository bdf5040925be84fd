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
Each row's time over cublas's. The fused dgrad's outputs are checked against the
two-step ones (bf16 rounding of dh is the only difference).

    python3 tools/perf/gated_dgrad.py [--shape T,H,F ...] [--activation silu|gelu_tanh]
Default shapes: 8192,4096,11008 (the bar's) and 16384,4096,11008.
"""
import argparse

import torch
import triton.testing

from epifuse.layers import gated_chain


def bench(fn):
    return triton.testing.do_bench(fn, return_mode="median")


def run(tokens, hidden, ffn, activation):
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
    d_cat = torch.empty(tokens, 2 * ffn, device=dev, dtype=dt)
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

    a, b = two_step(), fused()
    errs = {k: ((a[k].float() - b[k].float()).norm() / a[k].float().norm()).item() for k in a}
    times = {"cublas": bench(cublas), "two_step": bench(two_step), "fused": bench(fused)}
    base = times["cublas"]
    print(f"{activation} T,H,F = {tokens},{hidden},{ffn}: cublas {base:.3f} ms | two_step {times['two_step']:.3f} ms "
          f"{times['two_step'] / base:.3f}x | fused {times['fused']:.3f} ms {times['fused'] / base:.3f}x | "
          f"fused vs two_step rel. error {max(errs.values()):.2e}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", action="append", default=None, metavar="T,H,F")
    ap.add_argument("--activation", default="silu", choices=["silu", "gelu_tanh"])
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shape] if args.shape else \
        [(8192, 4096, 11008), (16384, 4096, 11008)]
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, bf16")
    for t, h, f in shapes:
        run(t, h, f, args.activation)


if __name__ == "__main__":
    main()
