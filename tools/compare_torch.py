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
more than most of the gaps measured (docs/PERF.md, session 13: torch.matmul x2 under
do_bench 0.355 ms against 0.412 ms for the same GEMMs in epifuse bench's rows).

dual_gemm chains (--shape M,N,K; the gating layer, SwiGLU, GEGLU): two
torch.matmul alone (cuBLAS), eager PyTorch, torch.compile, a hand-written
Triton dual GEMM (one kernel: A tiles shared, two accumulators, the chain's
epilogue) where the chain is gating, SwiGLU or GEGLU, and epifuse bench's rows.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from triton.testing import do_bench

TORCH_DTYPE = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def mainloop_of(doc):
    """The chain's mainloop as a full object (docs/json-schema.md defaults)."""
    ml = doc.get("mainloop", "elementwise")
    if isinstance(ml, str):
        ml = {"kind": ml}
    if ml["kind"] == "elementwise":
        return {"kind": "elementwise"}
    return {"kind": ml["kind"], "a": ml.get("a", "f16"), "b": ml.get("b", "f16"),
            "a_layout": ml.get("a_layout", "row"), "b_layout": ml.get("b_layout", "row"),
            **({"math": ml["math"]} if "math" in ml else {})}


def load_chain(path, dtype):
    """The chain as a dict, with every dtype replaced by `dtype` when given."""
    with open(path) as f:
        doc = json.load(f)
    kind = mainloop_of(doc)["kind"]
    if kind not in ("elementwise", "gemm", "dual_gemm"):
        sys.exit(f"{path}: only elementwise, gemm and dual_gemm chains can be compared with PyTorch here, not {kind}")
    if dtype:
        for spec in doc.get("inputs", {}).values():
            spec["dtype"] = dtype
        for spec in doc.get("outputs", {}).values():
            spec["dtype"] = dtype
        if "chain" in doc:
            doc["out"] = dtype
        if kind in ("gemm", "dual_gemm"):
            doc["mainloop"] = dict(mainloop_of(doc), a=dtype, b=dtype)
        doc.pop("shape", None)
    return doc


def chain_ops(doc):
    """Desugars the chain shorthand (DESIGN 7.1) into (name, op, args, attrs) tuples."""
    if "ops" in doc:
        ops = [(o["name"], o["op"], o.get("args", []), o) for o in doc["ops"]]
        outs = {name: spec.get("value", name) for name, spec in doc["outputs"].items()}
        return ops, outs
    leaf = "acc" if mainloop_of(doc)["kind"] == "gemm" else "x"
    ops, cur, inputs = [], leaf, doc.get("inputs", {})
    for i, step in enumerate(doc["chain"]):
        name = f"c{i}"
        if isinstance(step, str) and step in inputs:
            ops.append((name, "add", [cur, step], {}))
        elif isinstance(step, str):
            ops.append((name, step, [cur], {}))
        else:
            step = dict(step)
            if "op" not in step:  # one-key form {"dropout": 0.1}
                (op, val), = step.items()
                step = {"op": op, {"dropout": "p", "scale": "alpha", "cast": "to"}.get(op, "arg"): val}
            args = [cur] + ([step["arg"]] if "arg" in step else [])
            ops.append((name, step["op"], args, step))
        cur = name
    return ops, {"y": cur}


def output_dtypes(doc):
    """Each output's dtype, in chain_ops' order."""
    if "chain" in doc:
        return [doc.get("out", "f32")]
    return [spec.get("dtype", "f32") for spec in doc["outputs"].values()]


def torch_fn(doc, p_override=None):
    ops, outs = chain_ops(doc)
    kind = mainloop_of(doc)["kind"]
    gemm = kind in ("gemm", "dual_gemm")
    out_dtypes = [TORCH_DTYPE[d] for d in output_dtypes(doc)]

    def run(tensors):
        v = dict(tensors)
        if kind == "gemm":  # the GEMM as eager PyTorch runs it: cuBLAS, D in the operands' dtype
            v["acc"] = torch.matmul(tensors["a"], tensors["b"])
        elif kind == "dual_gemm":  # two GEMMs of the same A
            v["acc0"] = torch.matmul(tensors["a"], tensors["b0"])
            v["acc1"] = torch.matmul(tensors["a"], tensors["b1"])
        for name, op, args, attrs in ops:
            a = [v[x] for x in args]
            if op == "add": r = a[0] + a[1]
            elif op == "sub": r = a[0] - a[1]
            elif op == "mul": r = a[0] * a[1]
            elif op == "max": r = torch.maximum(a[0], a[1])
            elif op == "min": r = torch.minimum(a[0], a[1])
            elif op == "scale": r = a[0] * attrs["alpha"]
            elif op == "relu": r = F.relu(a[0])
            elif op == "gelu_tanh": r = F.gelu(a[0], approximate="tanh")
            elif op == "gelu_erf": r = F.gelu(a[0])
            elif op == "sigmoid": r = torch.sigmoid(a[0])
            elif op == "silu": r = F.silu(a[0])
            elif op == "tanh": r = torch.tanh(a[0])
            elif op == "dropout": r = F.dropout(a[0], p=attrs["p"], training=True)
            elif op == "cast": r = a[0].to(TORCH_DTYPE[attrs["to"]]).to(a[0].dtype)
            # Row reductions (issue 13) as PyTorch users write them: its fused softmax and norms.
            elif op == "softmax": r = torch.softmax(a[0], dim=-1)
            elif op == "log_softmax": r = torch.log_softmax(a[0], dim=-1)
            elif op == "rmsnorm": r = F.rms_norm(a[0], (a[0].shape[-1],), a[1], eps=attrs.get("eps", 1e-6))
            elif op == "layernorm":
                r = F.layer_norm(a[0], (a[0].shape[-1],), a[1], a[2], eps=attrs.get("eps", 1e-5))
            elif op == "row_max": r = a[0].amax(dim=-1, keepdim=True)
            elif op == "row_sum": r = a[0].sum(dim=-1, keepdim=True)
            elif op == "row_mean": r = a[0].mean(dim=-1, keepdim=True)
            elif op == "exp": r = torch.exp(a[0])
            elif op == "log": r = torch.log(a[0])
            elif op == "div": r = a[0] / a[1]
            elif op == "rsqrt": r = torch.rsqrt(a[0])
            elif op == "add_scalar": r = a[0] + attrs.get("c", attrs.get("arg", 0.0))
            else: raise SystemExit(f"op {op} has no PyTorch spelling here")
            v[name] = r
        if gemm:  # outputs stored in their own dtype, as the fused kernel does
            return [v[x] if v[x].dtype == dt else v[x].to(dt) for x, dt in zip(outs.values(), out_dtypes)]
        return [v[x] for x in outs.values()]

    return run


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


def make_tensors(doc, m, n):
    out, nbytes = {}, 0
    for name, spec in doc.get("inputs", {}).items():
        shape = {"full": (m, n), "row": (n,), "col": (m,), "scalar": ()}[spec.get("broadcast", "full")]
        t = torch.randn(shape, device="cuda", dtype=TORCH_DTYPE[spec["dtype"]])
        out[name] = t
        nbytes += t.numel() * t.element_size()
    return out, nbytes


def out_bytes(doc, m, n):
    if "chain" in doc:
        return m * n * TORCH_DTYPE[doc.get("out", "f32")].itemsize
    return sum(m * n * TORCH_DTYPE[s["dtype"]].itemsize for s in doc["outputs"].values())


def epifuse_bench(binary, doc, *dims):
    """`epifuse bench --json` of `doc` at shape `dims` (M, N or M, N, K): its one result.
    Exit code 1 (a GEMM baseline that disagrees with the fused kernel) still has numbers."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(doc, f)
        path = f.name
    try:
        res = subprocess.run([binary, "bench", path, "--shape", ",".join(map(str, dims)), "--json", "--no-sweep"],
                             capture_output=True, text=True)
    finally:
        os.unlink(path)
    if res.returncode not in (0, 1):
        sys.exit(f"epifuse bench failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return json.loads(res.stdout)["results"][0]


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
