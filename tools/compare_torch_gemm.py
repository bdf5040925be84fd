"""tools/compare_torch.py on GEMM and dual GEMM chains (its docstring says what is
timed): torch.matmul, eager, torch.compile, torch._addmm_activation, a hand-written
Triton dual GEMM and epifuse's rows, in TFLOP/s and against torch.matmul."""
import json
import os
import statistics
import sys

import torch
from triton.testing import do_bench

from torch_chains import (TORCH_DTYPE, chain_ops, epifuse_bench, load_chain, mainloop_of, make_tensors, output_dtypes,
                          torch_fn)


def addmm_activation(doc):
    """(bias input, use_gelu, dropouts left out) when the chain is act(acc + bias) with a row
    bias [N] and relu or gelu_tanh, then only dropouts to its one output; else None."""
    ops, outs = chain_ops(doc)
    inputs = doc.get("inputs", {})
    if len(ops) < 2 or len(outs) != 1:
        return None
    (add_name, add_op, add_args, _), (act_name, act_op, act_args, _) = ops[0], ops[1]
    if add_op != "add" or "acc" not in add_args or len(set(add_args)) != 2:
        return None
    bias = next(x for x in add_args if x != "acc")
    if inputs.get(bias, {}).get("broadcast") != "row":
        return None
    if act_op not in ("relu", "gelu_tanh") or act_args != [add_name]:
        return None
    cur = act_name
    for name, op, args, _ in ops[2:]:
        if op != "dropout" or args != [cur]:
            return None
        cur = name
    if list(outs.values()) != [cur]:
        return None
    return bias, act_op == "gelu_tanh", len(ops) - 2


def make_gemm_tensors(doc, m, n, k):
    """a [M,K] and b [K,N] laid out as the mainloop says (column-major: a transposed view),
    then the chain's inputs."""
    ml = mainloop_of(doc)
    a_dt, b_dt = TORCH_DTYPE[ml["a"]], TORCH_DTYPE[ml["b"]]
    a = torch.randn(m, k, device="cuda", dtype=a_dt) if ml["a_layout"] == "row" else \
        torch.randn(k, m, device="cuda", dtype=a_dt).t()
    def operand_b():
        return torch.randn(k, n, device="cuda", dtype=b_dt) if ml["b_layout"] == "row" else \
            torch.randn(n, k, device="cuda", dtype=b_dt).t()
    tensors, _ = make_tensors(doc, m, n)
    if ml["kind"] == "dual_gemm":
        tensors.update(a=a, b0=operand_b(), b1=operand_b())
    else:
        tensors.update(a=a, b=operand_b())
    return tensors


def dual_epilogue(doc):
    """(activation, bias0, bias1) when the chain is act(acc0 [+ bias0]) * (acc1 [+ bias1]) with
    act one of sigmoid, silu, gelu_tanh and row biases, one output; else None."""
    ops, outs = chain_ops(doc)
    inputs = doc.get("inputs", {})
    names = {name: (op, args) for name, op, args, _ in ops}
    if len(outs) != 1:
        return None
    out = list(outs.values())[0]
    if out not in names or names[out][0] != "mul":
        return None

    def side(value, acc):  # acc, or acc + a row bias: (ok, bias)
        if value == acc:
            return True, None
        if value in names and names[value][0] == "add" and acc in names[value][1]:
            other = [x for x in names[value][1] if x != acc]
            if len(other) == 1 and inputs.get(other[0], {}).get("broadcast") == "row":
                return True, other[0]
        return False, None

    for gate, lin in (names[out][1], names[out][1][::-1]):
        if gate not in names or names[gate][0] not in ("sigmoid", "silu", "gelu_tanh"):
            continue
        ok0, bias0 = side(names[gate][1][0], "acc0")
        ok1, bias1 = side(lin, "acc1")
        used = {out, gate} | {x for x in (names[gate][1][0], lin) if x in names}
        if ok0 and ok1 and used == set(names):
            return names[gate][0], bias0, bias1
    return None


def triton_dual_gemm_fn(doc):
    """A hand-written Triton dual GEMM (the Triton tutorial's matmul with a second B and a
    second accumulator, the chain's epilogue on both, one store), for chains dual_epilogue
    recognises; None otherwise."""
    import triton
    import triton.language as tl
    match = dual_epilogue(doc)
    if match is None:
        return None
    act, bias0, bias1 = match
    ACT = {"sigmoid": 0, "silu": 1, "gelu_tanh": 2}[act]

    configs = [triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP": 8}, num_stages=st, num_warps=w)
               for bm, bn, bk, st, w in [(128, 128, 64, 3, 8), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4),
                                         (128, 128, 32, 4, 8), (64, 64, 64, 4, 4), (16, 64, 128, 4, 4),
                                         (32, 64, 128, 4, 4)]]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def dual_gemm(a, b0, b1, c0, c1, y, M, N, K, sam, sak, sbk, sbn, sym, syn,
                  HAS_C0: tl.constexpr, HAS_C1: tl.constexpr, ACT: tl.constexpr,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
        pid = tl.program_id(0)
        tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
        group = GROUP * tiles_n
        first_m = (pid // group) * GROUP
        rows = min(tiles_m - first_m, GROUP)
        pm = first_m + (pid % group) % rows
        pn = (pid % group) // rows
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc0 = tl.zeros((BM, BN), dtype=tl.float32)
        acc1 = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            kk = k0 + rk
            ta = tl.load(a + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
            mb = (kk[:, None] < K) & (rn[None, :] < N)
            tb0 = tl.load(b0 + kk[:, None] * sbk + rn[None, :] * sbn, mask=mb, other=0.0)
            tb1 = tl.load(b1 + kk[:, None] * sbk + rn[None, :] * sbn, mask=mb, other=0.0)
            acc0 = tl.dot(ta, tb0, acc0)
            acc1 = tl.dot(ta, tb1, acc1)
        if HAS_C0:
            acc0 += tl.load(c0 + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
        if HAS_C1:
            acc1 += tl.load(c1 + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
        if ACT == 0:
            g = tl.sigmoid(acc0)
        elif ACT == 1:
            g = acc0 * tl.sigmoid(acc0)
        else:
            u = 0.7978845608028654 * (acc0 + 0.044715 * acc0 * acc0 * acc0)
            g = 0.5 * acc0 * (1.0 + (2.0 * tl.sigmoid(2.0 * u) - 1.0))
        out = g * acc1
        tl.store(y + rm[:, None] * sym + rn[None, :] * syn, out.to(y.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

    out_dtype = TORCH_DTYPE[output_dtypes(doc)[0]]

    def run(t):
        a, b0, b1 = t["a"], t["b0"], t["b1"]
        m, k = a.shape
        n = b0.shape[1]
        y = torch.empty(m, n, device="cuda", dtype=out_dtype)
        c0 = t[bias0] if bias0 else a
        c1 = t[bias1] if bias1 else a
        grid = lambda meta: (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)
        dual_gemm[grid](a, b0, b1, c0, c1, y, m, n, k, a.stride(0), a.stride(1), b0.stride(0), b0.stride(1),
                        y.stride(0), y.stride(1), HAS_C0=bias0 is not None, HAS_C1=bias1 is not None, ACT=ACT)
        return y

    return run


def in_turns(fns, rounds):
    """The median over `rounds` rounds of each function's do_bench median, the
    functions taking turns within a round, so each sees the same clocks."""
    times = [[] for _ in fns]
    for _ in range(rounds):
        for i, f in enumerate(fns):
            times[i].append(do_bench(f, return_mode="median"))
    return [statistics.median(v) for v in times]


def peak_mib(fn):
    """Device memory (MiB) one call of `fn` allocates beyond what is allocated
    before it (its outputs and intermediates), through torch's allocator: the
    epifuse row's outputs come from it too."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def epifuse_in_process(doc, tile, t):
    """The fused chain through epifuse's Python module on the torch tensors `t`, with
    bench's tuned tile: a function to time beside the torch rows, or why not."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    try:
        import epifuse
        fused = epifuse.Chain.from_json(json.dumps(doc)).compile(tile=tile)
        args = [t[name] for name in fused.input_names]
        fused(*args, seed=1)  # compile and check the binding outside the timing
        torch.cuda.synchronize()
    except Exception as e:  # no module or library here, or a binding it refuses
        return f"{type(e).__name__}: {e}"
    return lambda: fused(*args, seed=1)


def main_gemm(args):
    """GEMM chains: PyTorch's ways of computing the chain and epifuse bench's rows, against
    torch.matmul alone."""
    results = []
    for dtype in args.dtype or [None]:
        doc = load_chain(args.chain, dtype)
        # f32: exact fp32 on both sides, or tf32 on both where the chain asks for it
        # (cuBLAS and the copy engine both round to nearest even: docs/hopper.md).
        torch.backends.cuda.matmul.allow_tf32 = mainloop_of(doc).get("math") == "tf32"
        fn = torch_fn(doc)
        compiled = torch.compile(fn)
        dual = mainloop_of(doc)["kind"] == "dual_gemm"
        addmm = None if dual else addmm_activation(doc)
        triton_dual = triton_dual_gemm_fn(doc) if dual else None
        for shape in args.shape:
            dims = [int(v) for v in shape.split(",")]
            if len(dims) != 3:
                sys.exit(f"--shape {shape}: a gemm chain takes M,N,K")
            m, n, k = dims
            flops = (4.0 if dual else 2.0) * m * n * k
            # epifuse bench first (its own process, its tuned tile), then every
            # in-process row in turns (Note: rows timed one after another at the power
            # limit favour whichever ran cooler; docs/bench.md).
            ef = epifuse_bench(args.epifuse, doc, m, n, k)
            g = ef["gemm"]
            t = make_gemm_tensors(doc, m, n, k)
            timed = []  # (key, label, fn)
            if dual:
                timed.append(("torch_matmul", "torch.matmul x2 (cuBLAS)",
                              lambda: (torch.matmul(t["a"], t["b0"]), torch.matmul(t["a"], t["b1"]))))
            else:
                timed.append(("torch_matmul", "torch.matmul (cuBLAS)", lambda: torch.matmul(t["a"], t["b"])))
            timed.append(("torch_eager", "torch eager (matmul, then the ops)", lambda: fn(t)))
            compiled(t)  # compile outside the timing
            timed.append(("torch_compile", "torch.compile", lambda: compiled(t)))
            if triton_dual:
                triton_dual(t)  # autotune outside the timing
                timed.append(("triton_dual_gemm", "Triton dual GEMM (hand-written)", lambda: triton_dual(t)))
            if addmm:
                bias_name, use_gelu, dropouts = addmm
                bias = t[bias_name].to(t["a"].dtype)
                label = "torch._addmm_activation" + (" (no dropout)" if dropouts else "")
                timed.append(("torch_addmm_activation", label,
                              lambda: torch._addmm_activation(bias, t["a"], t["b"], use_gelu=use_gelu)))
            inproc = epifuse_in_process(doc, ef["fused"]["tile"], t)
            if isinstance(inproc, str):
                print(f"  epifuse in this process: skipped ({inproc})", file=sys.stderr)
            else:
                timed.append(("epifuse_in_process", "epifuse fused (Python module, this process)", inproc))
            ms = in_turns([f for _, _, f in timed], args.rounds)
            peaks = {key: peak_mib(f) for key, _, f in timed}
            rows = [(key, label, v) for (key, label, _), v in zip(timed, ms)]  # (key, label, ms[, of_cublas])
            del t, timed, inproc
            torch.cuda.empty_cache()
            for key, row in g["rows"].items():
                rows.append(("epifuse_" + key, "epifuse " + row["label"], row["ms"], row.get("of_cublas")))
            results.append({"dtype": dtype or "as-is", "shape": [m, n, k], "flops": flops,
                            "rows": [{"key": r[0], "label": r[1], "ms": r[2], "tflops": flops / r[2] / 1e9,
                                      "of_torch_matmul": r[2] / rows[0][2],
                                      **({"peak_mib": peaks[r[0]]} if r[0] in peaks else {}),
                                      **({"of_epifuse_cublas": r[3]} if len(r) > 3 and r[3] else {})}
                                     for r in rows],
                            "epifuse_tile": ef["fused"]["tile"], "epifuse_cublaslt": g["cublaslt"],
                            "epifuse_skipped": g["skipped"], "epifuse_checks": g["checks"]})

    print(f"GEMM chain {os.path.basename(args.chain)} on {torch.cuda.get_device_name()}: "
          "time / torch.matmul (cuBLAS alone); epifuse rows also / epifuse's own cuBLASLt")
    for res in results:
        m, n, k = res["shape"]
        print(f"== {res['dtype']} {m},{n},{k} (epifuse fused tile {res['epifuse_tile']})")
        print(f"  {'':<44} {'ms':>9} {'TFLOP/s':>8} {'/matmul':>8} {'/ef cuBLAS':>10} {'peak MiB':>9}")
        for r in res["rows"]:
            own = f"{r['of_epifuse_cublas']:.2f}x" if "of_epifuse_cublas" in r else ""
            peak = f"{r['peak_mib']:.1f}" if "peak_mib" in r else ""
            print(f"  {r['label']:<44} {r['ms']:9.4f} {r['tflops']:8.1f} {r['of_torch_matmul']:7.2f}x {own:>10} {peak:>9}")
        print("  peak MiB: device memory one call allocates beyond its inputs (torch's allocator; "
              "the in-process rows only)")
        for line in res["epifuse_skipped"]:
            print(f"  epifuse: {line}")
        for c in res["epifuse_checks"]:
            if not c["ok"]:
                print(f"  epifuse check MISMATCH: {c['what']}: max |diff| {c['max_abs_diff']} (max |value| {c['max_abs']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "chain": args.chain,
                       "gemm": results}, f, indent=1)
    if args.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        keys = []
        for res in results:
            keys += [r["key"] for r in res["rows"] if r["key"] not in keys]
        labels = [f"{r['dtype']}\n{'x'.join(map(str, r['shape']))}" for r in results]
        width = 0.8 / len(keys)
        fig, ax = plt.subplots(figsize=(max(6, 2.5 * len(results)), 4))
        for j, key in enumerate(keys):
            tf = [next((r["tflops"] for r in res["rows"] if r["key"] == key), 0) for res in results]
            ax.bar([i + (j - (len(keys) - 1) / 2) * width for i in range(len(results))], tf, width, label=key)
        ax.set_xticks(range(len(results)), labels)
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"{os.path.basename(args.chain)} on {torch.cuda.get_device_name()}")
        ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
        print(f"chart: {args.png}")
