#!/usr/bin/env python3
"""Backward passes in one process: epifuse's backward spec (the default tile, through
the Python module) against PyTorch eager and torch.compile, and the copy ceiling of
the bytes the backward moves, at M*N = 2^27 and several row lengths.

For each chain and row length N (M = 2^27 / N) it times with triton.testing.do_bench
medians on one GPU:
  epifuse   the backward spec alone (dy and the saved state in, gradients out)
  ef step   epifuse's forward with its saved state and backward, minus the forward
            without it: what the backward costs a training step, as the two
            PyTorch rows are measured (a saved tensor's write is charged to it)
  op bwd    the backward through epifuse.torch.op alone: torch.autograd.grad of one
            forward, repeated (retain_graph)
  op step   the step through epifuse.torch.op: what a PyTorch user of epifuse runs
  eager     torch: forward + backward minus forward, as PyTorch users get it
  compile   the same with torch.compile (default mode)
  copy      x.copy_(y) over as many bytes as the backward spec reads and writes:
            the ceiling, reported as a percentage (copy time / backward time)
  op %copy  the copy ceiling of the bytes the op's backward kernel moves, over op bwd:
            the op hands back an output equal to an input (a residual's gradient, dy)
            or to another output (add+RMSNorm's dx and dresidual) without storing it
and the ratios of torch.compile's step to epifuse's backward, step and op step, and of
eager's to epifuse's backward. Every step takes its gradients with torch.autograd.grad,
as a layer inside a model hands them on: .backward() into leaves would add a copy
wherever two gradients are one tensor (add's two operands, in PyTorch's add as in
epifuse's add+RMSNorm), since a leaf's .grad may not share another's storage.

    python3 tools/perf/backward_vs_torch.py [--dtype=f32|bf16] [--rows=1024,4096,...] [--chains=a,b]
Prints one line per (chain, N) and, with --json FILE, writes the numbers there.
"""
import json
import math
import sys

import torch
import triton.testing

import epifuse
import epifuse.torch

TOTAL = 1 << 27
DT = {"f32": torch.float32, "bf16": torch.bfloat16}


def chain_of(kind, dt):
    c = epifuse.Chain(kind)
    x = c.input("x", dt)
    if kind == "bias_gelu_dropout_residual":
        b, r = c.input("bias", dt, "row"), c.input("residual", dt)
        y = c.add(c.dropout(c.gelu_tanh(c.add(x, b)), 0.1), r)
    elif kind == "softmax":
        y = c.softmax(x)
    elif kind == "log_softmax":
        y = c.log_softmax(x)
    elif kind == "scaled_masked_softmax_dropout":
        mask = c.input("mask", dt)
        y = c.dropout(c.softmax(c.add(c.scale(x, 0.125), mask)), 0.1)
    elif kind == "layernorm":
        y = c.layernorm(x, c.input("w", dt, "row"), c.input("b", dt, "row"), eps=1e-5)
    elif kind == "add_rmsnorm":
        y = c.rmsnorm(c.add(x, c.input("residual", dt)), c.input("w", dt, "row"), eps=1e-6)
    c.output("y", y, dt)
    return c


def torch_fn(kind):
    F = torch.nn.functional
    if kind == "bias_gelu_dropout_residual":
        return lambda x, b, r: F.dropout(F.gelu(x + b, approximate="tanh"), 0.1) + r
    if kind == "softmax":
        return lambda x: torch.softmax(x, -1)
    if kind == "log_softmax":
        return lambda x: torch.log_softmax(x, -1)
    if kind == "scaled_masked_softmax_dropout":
        return lambda x, mask: F.dropout(torch.softmax(x * 0.125 + mask, -1), 0.1)
    if kind == "layernorm":
        return lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
    if kind == "add_rmsnorm":
        return lambda x, r, w: F.rms_norm(x + r, (x.shape[-1],), w, 1e-6)
    raise KeyError(kind)


def make_inputs(chain, m, n, dt, g):
    out = []
    for t in chain.bindings(m, n)["inputs"]:
        shape = t["shape"]
        v = torch.randn(shape, device="cuda", dtype=DT[dt], generator=g)
        if t["name"] == "mask":
            v = torch.where(torch.rand(shape, device="cuda", generator=g) < 0.1, -1e4, 0.0).to(DT[dt])
        out.append(v)
    return out


def main():
    opts = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
    dt = opts.get("dtype", "f32")
    rows = [int(r) for r in opts.get("rows", "1024,4096,16384,65536,262144").split(",")]
    kinds = opts.get("chains", "bias_gelu_dropout_residual,softmax,log_softmax,scaled_masked_softmax_dropout,"
                               "layernorm,add_rmsnorm").split(",")
    g = torch.Generator(device="cuda").manual_seed(0)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, {dt}, M*N = 2^27")
    print(f"{'chain':32} {'N':>7} {'epifuse':>9} {'ef step':>9} {'op bwd':>9} {'op step':>9} {'eager':>9} {'compile':>9} {'copy':>9}  "
          f"{'%copy':>6} {'op %copy':>8} {'vs compile':>10} {'step vs c.':>10} {'op vs c.':>8} {'vs eager':>9}")
    results = []
    for kind in kinds:
        chain = chain_of(kind, dt)
        grad = chain.grad()
        fwd = grad.forward.compile()
        bwd = grad.backward.compile()
        plain = chain.compile()
        as_op = epifuse.torch.op(chain)
        op_kernel = epifuse.torch._without_passthrough(grad.backward)[0]
        f = torch_fn(kind)
        fc = torch.compile(f)
        for n in rows:
            m = TOTAL // n
            ins = make_inputs(chain, m, n, dt, g)
            outs = fwd(*ins, seed=1, offset=0)
            outs = outs if isinstance(outs, tuple) else (outs,)
            dy = torch.randn_like(outs[0])
            have = dict(zip(fwd.input_names, ins))
            have.update(zip([o["name"] for o in grad.forward.bindings(m, n)["outputs"]], outs))
            have["dy"] = dy
            args = [have[nm] for nm in bwd.input_names]
            ours = triton.testing.do_bench(lambda: bwd(*args, seed=1, offset=0), return_mode="median")
            moved = sum(a.numel() * a.element_size() for a in args)
            res = bwd(*args, seed=1, offset=0)
            res = res if isinstance(res, tuple) else (res,)
            moved += sum(r.numel() * r.element_size() for r in res)
            # The step: the forward writes its saved state, the backward reads it.
            names = [o["name"] for o in grad.forward.bindings(m, n)["outputs"]]

            def ef_step():
                o = fwd(*ins, seed=1, offset=0)
                got = dict(have, **dict(zip(names, o if isinstance(o, tuple) else (o,))))
                bwd(*[got[nm] for nm in bwd.input_names], seed=1, offset=0)
            step_ms = (triton.testing.do_bench(ef_step, return_mode="median")
                       - triton.testing.do_bench(lambda: plain(*ins, seed=1, offset=0), return_mode="median"))
            src = torch.empty(moved // 2 // 4, device="cuda", dtype=torch.float32)
            dst = torch.empty_like(src)
            copy = triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median")
            op_moved = 0 if op_kernel is None else sum(
                math.prod(t["shape"]) * DT[t["dtype"]].itemsize
                for group in op_kernel.bindings(m, n).values() for t in group)
            src, dst = src[:op_moved // 2 // 4], dst[:op_moved // 2 // 4]
            op_copy = triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median") if op_moved else 0.0

            def train(fn):
                leaves = [a.detach().requires_grad_(a.dtype.is_floating_point and a.dim() > 0) for a in ins]
                tf = [t for t in leaves if t.requires_grad]

                def step():
                    torch.autograd.grad(fn(*leaves), tf, dy)

                def fwd_only():
                    with torch.no_grad():
                        fn(*leaves)
                step()
                return (triton.testing.do_bench(step, return_mode="median")
                        - triton.testing.do_bench(fwd_only, return_mode="median"))
            op_step = train(lambda *a: as_op(*a, seed=1, offset=0))
            # The op's backward alone: autograd.grad of one forward, again and again.
            leaves = [a.detach().requires_grad_(a.dtype.is_floating_point and a.dim() > 0) for a in ins]
            out = as_op(*leaves, seed=1, offset=0)
            wrt = [t for t in leaves if t.requires_grad]
            op_bwd = triton.testing.do_bench(lambda: torch.autograd.grad(out, wrt, dy, retain_graph=True),
                                             return_mode="median")
            del out
            eager = train(f)
            compiled = train(fc)
            row = dict(chain=kind, n=n, m=m, dtype=dt, epifuse_ms=ours, epifuse_step_ms=step_ms, op_step_ms=op_step, eager_ms=eager,
                       compile_ms=compiled, copy_ms=copy, bytes=moved, pct_copy=100 * copy / ours,
                       op_bwd_ms=op_bwd, op_bytes=op_moved, op_copy_ms=op_copy, op_pct_copy=100 * op_copy / op_bwd,
                       saved=[s["name"] for s in grad.saved])
            results.append(row)
            print(f"{kind:32} {n:>7} {ours:9.4f} {step_ms:9.4f} {op_bwd:9.4f} {op_step:9.4f} {eager:9.4f} {compiled:9.4f} {copy:9.4f}  "
                  f"{row['pct_copy']:6.1f} {row['op_pct_copy']:8.1f} {compiled / ours:10.2f} {compiled / step_ms:10.2f} "
                  f"{compiled / op_step:8.2f} {eager / ours:9.2f}",
                  flush=True)
    if "json" in opts:
        with open(opts["json"], "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
