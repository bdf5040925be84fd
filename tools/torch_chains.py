"""A JSON op chain in PyTorch (eager ops, the tensors it reads) and `epifuse bench
--json` of it: what tools/compare_torch.py and tools/compare_torch_gemm.py share."""
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

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
    """Desugars the chain shorthand (docs/design.md §7.1) into (name, op, args, attrs) tuples."""
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
            # Row reductions as PyTorch users write them: its fused softmax and norms.
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
