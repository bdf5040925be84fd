#!/usr/bin/env python3
"""Time an epifuse chain against PyTorch eager and torch.compile in one run.

On a GPU machine with PyTorch (and matplotlib for the chart):

    python3 tools/compare_torch.py examples/chains/bias_gelu_dropout_add.json \
        --shape 16384,4096 --shape 32768,8192 --dtype f32 --dtype bf16 --png out.png
    python3 tools/compare_torch.py examples/chains/softmax.json --dtype bf16 \
        --shape 131072,1024 --shape 512,262144
    python3 tools/compare_torch.py examples/chains/gemm_bias_relu_dropout.json \
        --shape 4096,4096,4096 --dtype f16 --dtype bf16

Elementwise chains (--shape M,N): for every (dtype, shape) it times the chain
in PyTorch eager, torch.compile (default mode) and `epifuse bench --json`
(which measures its own copy ceiling in the same process), on tensors of the
same sizes, and prints GB/s and ratios. Row chains (softmax, the norms, their
reductions) use torch.softmax, F.rms_norm and F.layer_norm; a chain that is
softmax(x) alone also gets a plain Triton softmax written here (one row per
program). peer/copy is the fastest peer against epifuse's copy ceiling. Bytes counted are the fewest any fused
kernel must move: each input read once, each output written once.

GEMM chains (--shape M,N,K): torch.matmul alone (cuBLAS), eager PyTorch
(torch.matmul, then the ops), torch.compile (default mode) of the same
function, torch._addmm_activation(bias, a, b, use_gelu=...) where the chain is
bias + relu or bias + gelu_tanh (then only dropouts, which it leaves out), and
every row of `epifuse bench --json` (its own cuBLASLt, the fused kernel, the
baselines of docs/bench.md), as times, TFLOP/s and ratios to torch.matmul.
Operands are laid out as the chain's mainloop says (a column-major operand is
a transposed view); f32 is exact fp32 on both sides (tf32 off), unless the chain's
"math" is "tf32" (then tf32 on both sides).

The torch rows and one more epifuse row, the fused kernel through epifuse's Python
module (python/, EPIFUSE_LIBRARY or build/libepifuse_c.so) on the same torch tensors
with the tile `epifuse bench` tuned, are timed in this process in turns: --rounds
rounds (default 3), each row's do_bench median in each, the median of those reported;
each also reports the device memory one call allocates beyond its inputs (peak MiB).
At the power limit, rows timed in different processes or one after another differ by
more than most of the gaps measured (docs/perf/dual-gemm.md, "Against PyTorch in one
process": torch.matmul x2 under do_bench 0.355 ms against 0.412 ms for the same GEMMs in
epifuse bench's rows).

dual_gemm chains (--shape M,N,K; the gating layer, SwiGLU, GEGLU): two
torch.matmul alone (cuBLAS), eager PyTorch, torch.compile, a hand-written
Triton dual GEMM (one kernel: A tiles shared, two accumulators, the chain's
epilogue) where the chain is gating, SwiGLU or GEGLU, and epifuse bench's rows.
"""
import argparse
import json
import os

import torch
from triton.testing import do_bench

from torch_chains import chain_ops, epifuse_bench, load_chain, mainloop_of, make_tensors, out_bytes, torch_fn


def triton_softmax_fn(doc):
    """A plain Triton softmax, one row per program (the Triton tutorial's form), for
    chains that are exactly softmax(x); None otherwise."""
    ops, outs = chain_ops(doc)
    if [op for _, op, _, _ in ops] != ["softmax"]:
        return None
    import triton
    import triton.language as tl

    @triton.jit
    def softmax_rows(y_ptr, x_ptr, n, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(y_ptr + row * n + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=cols < n)

    def run(tensors):
        x = tensors["x"]
        m, n = x.shape
        y = torch.empty_like(x)
        block = triton.next_power_of_2(n)
        softmax_rows[(m,)](y, x, n, BLOCK=block, num_warps=min(32, max(4, block // 2048)))
        return [y]

    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("chain")
    ap.add_argument("--shape", action="append", required=True, help="M,N (gemm chains: M,N,K; repeatable)")
    ap.add_argument("--dtype", action="append", help="override every dtype: f32, f16, bf16 (repeatable)")
    ap.add_argument("--epifuse", default=os.path.join(os.path.dirname(__file__), "..", "build", "epifuse"))
    ap.add_argument("--png", help="save a bar chart of GB/s (gemm chains: TFLOP/s) here")
    ap.add_argument("--json", help="save all numbers here")
    ap.add_argument("--rounds", type=int, default=3,
                    help="gemm chains: rounds in which the in-process rows take turns (median reported)")
    args = ap.parse_args()
    if mainloop_of(load_chain(args.chain, None))["kind"] in ("gemm", "dual_gemm"):
        from compare_torch_gemm import main_gemm
        return main_gemm(args)

    rows = []
    for dtype in args.dtype or [None]:
        doc = load_chain(args.chain, dtype)
        fn = torch_fn(doc)
        compiled = torch.compile(fn)
        triton_fn = triton_softmax_fn(doc)
        for shape in args.shape:
            m, n = (int(v) for v in shape.split(","))
            tensors, in_bytes = make_tensors(doc, m, n)
            nbytes = in_bytes + out_bytes(doc, m, n)
            eager_ms = do_bench(lambda: fn(tensors), return_mode="median")
            compiled(tensors)  # compile outside the timing
            compile_ms = do_bench(lambda: compiled(tensors), return_mode="median")
            triton_ms = do_bench(lambda: triton_fn(tensors), return_mode="median") if triton_fn else None
            src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            copy_ms = do_bench(lambda: dst.copy_(src), return_mode="median")
            del src, dst, tensors
            torch.cuda.empty_cache()
            ef = epifuse_bench(args.epifuse, doc, m, n)
            gb = lambda ms: nbytes / ms / 1e6
            rows.append({"dtype": dtype or "as-is", "shape": [m, n], "bytes": nbytes,
                         "eager_gbps": gb(eager_ms), "compile_gbps": gb(compile_ms), "torch_copy_gbps": gb(copy_ms),
                         "triton_gbps": gb(triton_ms) if triton_ms else None,
                         "epifuse_gbps": ef["fused"]["gbps"], "epifuse_copy_gbps": ef["copy"]["gbps"],
                         "epifuse_of_copy": ef["fused"]["of_copy"], "epifuse_tile": ef["fused"]["tile"]})

    hdr = f"{'dtype':>6} {'M,N':>12} {'eager':>8} {'compile':>8} {'triton':>8} {'epifuse':>8} {'copy':>8} " \
          f"{'ef/eager':>9} {'ef/comp':>8} {'ef/copy':>8} {'peer/copy':>9}"
    print(f"GB/s moved (inputs read once + outputs written once) on {torch.cuda.get_device_name()}")
    print(hdr)
    for r in rows:
        peer = max(x for x in (r["eager_gbps"], r["compile_gbps"], r["triton_gbps"]) if x)
        triton = f"{r['triton_gbps']:8.0f}" if r["triton_gbps"] else f"{'-':>8}"
        print(f"{r['dtype']:>6} {r['shape'][0]:>6},{r['shape'][1]:<6} {r['eager_gbps']:8.0f} {r['compile_gbps']:8.0f} "
              f"{triton} {r['epifuse_gbps']:8.0f} {r['epifuse_copy_gbps']:8.0f} {r['epifuse_gbps'] / r['eager_gbps']:8.2f}x "
              f"{r['epifuse_gbps'] / r['compile_gbps']:7.2f}x {100 * r['epifuse_of_copy']:7.1f}% "
              f"{100 * peer / r['epifuse_copy_gbps']:8.1f}%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)
    if args.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        labels = [f"{r['dtype']}\n{r['shape'][0]}x{r['shape'][1]}" for r in rows]
        series = [("PyTorch eager", "eager_gbps"), ("torch.compile", "compile_gbps"),
                  ("epifuse", "epifuse_gbps"), ("copy ceiling", "epifuse_copy_gbps")]
        if any(r["triton_gbps"] for r in rows):
            series.insert(2, ("Triton (row a program)", "triton_gbps"))
        width = 0.8 / len(series)
        fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(rows)), 4))
        for k, (label, key) in enumerate(series):
            ax.bar([i + (k - (len(series) - 1) / 2) * width for i in range(len(rows))], [r[key] or 0 for r in rows], width,
                   label=label)
        ax.set_xticks(range(len(rows)), labels)
        ax.set_ylabel("GB/s")
        ax.set_title(f"{os.path.basename(args.chain)} on {torch.cuda.get_device_name()}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
        print(f"chart: {args.png}")


if __name__ == "__main__":
    main()
