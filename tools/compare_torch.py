#!/usr/bin/env python3
"""Time an epifuse chain against PyTorch eager and torch.compile in one run.

On a GPU machine with PyTorch (and matplotlib for the chart):

    python3 tools/compare_torch.py examples/chains/bias_gelu_dropout_add.json \
        --shape 16384,4096 --shape 32768,8192 --dtype f32 --dtype bf16 --png out.png

For every (dtype, shape) it times the chain in PyTorch eager, torch.compile
(default mode) and `epifuse bench --json` (which measures its own copy
ceiling in the same process), on tensors of the same sizes, and prints GB/s
and ratios. Bytes counted are the fewest any fused kernel must move: each
input read once, each output written once. Elementwise chains only.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from triton.testing import do_bench

TORCH_DTYPE = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def load_chain(path, dtype):
    """The chain as a dict, with every dtype replaced by `dtype` when given."""
    with open(path) as f:
        doc = json.load(f)
    if doc.get("mainloop", "elementwise") not in ("elementwise", {"kind": "elementwise"}):
        sys.exit(f"{path}: only elementwise chains can be compared with PyTorch here")
    if dtype:
        for spec in doc.get("inputs", {}).values():
            spec["dtype"] = dtype
        for spec in doc.get("outputs", {}).values():
            spec["dtype"] = dtype
        if "chain" in doc:
            doc["out"] = dtype
        doc.pop("shape", None)
    return doc


def chain_ops(doc):
    """Desugars the chain shorthand (DESIGN 7.1) into (name, op, args, attrs) tuples."""
    if "ops" in doc:
        ops = [(o["name"], o["op"], o.get("args", []), o) for o in doc["ops"]]
        outs = {name: spec.get("value", name) for name, spec in doc["outputs"].items()}
        return ops, outs
    ops, cur, inputs = [], "x", doc["inputs"]
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


def torch_fn(doc, p_override=None):
    ops, outs = chain_ops(doc)

    def run(tensors):
        v = dict(tensors)
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
            else: raise SystemExit(f"op {op} has no PyTorch spelling here")
            v[name] = r
        return [v[x] for x in outs.values()]

    return run


def make_tensors(doc, m, n):
    out, nbytes = {}, 0
    for name, spec in doc["inputs"].items():
        shape = {"full": (m, n), "row": (n,), "col": (m,), "scalar": ()}[spec.get("broadcast", "full")]
        t = torch.randn(shape, device="cuda", dtype=TORCH_DTYPE[spec["dtype"]])
        out[name] = t
        nbytes += t.numel() * t.element_size()
    return out, nbytes


def out_bytes(doc, m, n):
    if "chain" in doc:
        return m * n * TORCH_DTYPE[doc.get("out", "f32")].itemsize
    return sum(m * n * TORCH_DTYPE[s["dtype"]].itemsize for s in doc["outputs"].values())


def epifuse_bench(binary, doc, m, n):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(doc, f)
        path = f.name
    try:
        res = subprocess.run([binary, "bench", path, "--shape", f"{m},{n}", "--json", "--no-sweep"],
                             capture_output=True, text=True, check=True)
    except subprocess.CalledProcessError as e:
        sys.exit(f"epifuse bench failed ({e.returncode}):\n{e.stdout}\n{e.stderr}")
    finally:
        os.unlink(path)
    return json.loads(res.stdout)["results"][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("chain")
    ap.add_argument("--shape", action="append", required=True, help="M,N (repeatable)")
    ap.add_argument("--dtype", action="append", help="override every dtype: f32, f16, bf16 (repeatable)")
    ap.add_argument("--epifuse", default=os.path.join(os.path.dirname(__file__), "..", "build", "epifuse"))
    ap.add_argument("--png", help="save a bar chart of GB/s here")
    ap.add_argument("--json", help="save all numbers here")
    args = ap.parse_args()

    rows = []
    for dtype in args.dtype or [None]:
        doc = load_chain(args.chain, dtype)
        fn = torch_fn(doc)
        compiled = torch.compile(fn)
        for shape in args.shape:
            m, n = (int(v) for v in shape.split(","))
            tensors, in_bytes = make_tensors(doc, m, n)
            nbytes = in_bytes + out_bytes(doc, m, n)
            eager_ms = do_bench(lambda: fn(tensors), return_mode="median")
            compiled(tensors)  # compile outside the timing
            compile_ms = do_bench(lambda: compiled(tensors), return_mode="median")
            src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            copy_ms = do_bench(lambda: dst.copy_(src), return_mode="median")
            del src, dst, tensors
            torch.cuda.empty_cache()
            ef = epifuse_bench(args.epifuse, doc, m, n)
            gb = lambda ms: nbytes / ms / 1e6
            rows.append({"dtype": dtype or "as-is", "shape": [m, n], "bytes": nbytes,
                         "eager_gbps": gb(eager_ms), "compile_gbps": gb(compile_ms), "torch_copy_gbps": gb(copy_ms),
                         "epifuse_gbps": ef["fused"]["gbps"], "epifuse_copy_gbps": ef["copy"]["gbps"],
                         "epifuse_of_copy": ef["fused"]["of_copy"], "epifuse_tile": ef["fused"]["tile"]})

    hdr = f"{'dtype':>6} {'M,N':>12} {'eager':>8} {'compile':>8} {'epifuse':>8} {'copy':>8} " \
          f"{'ef/eager':>9} {'ef/comp':>8} {'ef/copy':>8}"
    print(f"GB/s moved (inputs read once + outputs written once) on {torch.cuda.get_device_name()}")
    print(hdr)
    for r in rows:
        print(f"{r['dtype']:>6} {r['shape'][0]:>6},{r['shape'][1]:<5} {r['eager_gbps']:8.0f} {r['compile_gbps']:8.0f} "
              f"{r['epifuse_gbps']:8.0f} {r['epifuse_copy_gbps']:8.0f} {r['epifuse_gbps'] / r['eager_gbps']:8.2f}x "
              f"{r['epifuse_gbps'] / r['compile_gbps']:7.2f}x {100 * r['epifuse_of_copy']:7.1f}%")
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
        width = 0.2
        fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(rows)), 4))
        for k, (label, key) in enumerate(series):
            ax.bar([i + (k - 1.5) * width for i in range(len(rows))], [r[key] for r in rows], width, label=label)
        ax.set_xticks(range(len(rows)), labels)
        ax.set_ylabel("GB/s")
        ax.set_title(f"{os.path.basename(args.chain)} on {torch.cuda.get_device_name()}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
        print(f"chart: {args.png}")


if __name__ == "__main__":
    main()
