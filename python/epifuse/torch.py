"""PyTorch integration: a chain as a torch.library custom op (docs/python.md).

    import epifuse, epifuse.torch
    op = epifuse.torch.op(epifuse.load("examples/chains/bias_gelu_dropout_add.json"))
    y = op(x, bias, residual, seed=7)        # eager, inside torch.compile (no graph break),
                                             # and under CUDA graph capture

The op is `torch.ops.epifuse.<name>_<hash>`, opaque to Dynamo; its fake (meta)
implementation gives the outputs' shapes and dtypes without running anything. The
launch is asynchronous on torch's current stream and its outputs come from
torch.empty, so a captured graph replays it. Seeds are Python ints below 2^63 (the
custom op schema's int); offsets likewise.
"""
import hashlib
import re

import torch

from ._lib import UserError
from .chain import Chain

_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
_ops = {}  # qualified name -> the Python callable
_lib = None


def _library():
    global _lib
    if _lib is None:
        _lib = torch.library.Library("epifuse", "FRAGMENT")
    return _lib


def op(chain: Chain, target=None, tile=None):
    """Registers `chain` once per process as a custom op; returns a callable taking the
    chain's inputs (positional, in binding order) and `seed`, `offset` keywords."""
    text = chain.to_json()
    name = re.sub(r"[^0-9A-Za-z_]", "_", chain.name) + "_" + hashlib.sha1(text.encode()).hexdigest()[:12]
    qualified = f"epifuse::{name}"
    if qualified in _ops:
        return _ops[qualified]
    compiled = chain.compile(target, tile)
    out_dtypes = [_DTYPES[d] for _, d in compiled._outputs]
    gemm = compiled._gemm
    full = compiled._full

    def impl(inputs, seed, offset):
        out = compiled(*inputs, seed=seed, offset=offset)
        return list(out) if isinstance(out, tuple) else [out]

    def fake(inputs, seed, offset):
        shape = (inputs[0].shape[0], inputs[1].shape[1]) if gemm else inputs[full].shape
        return [inputs[0].new_empty(shape, dtype=dt) for dt in out_dtypes]

    # torch.library.Library rather than torch.library.custom_op: the same opaque op for
    # Dynamo, at a fraction of custom_op's per-call Python cost (docs/perf/host.md,
    # "Python call overhead").
    _library().define(f"{name}(Tensor[] inputs, int seed, int offset) -> Tensor[]")
    _library().impl(name, impl, "CUDA")
    torch.library.register_fake(qualified)(fake)
    custom = getattr(torch.ops.epifuse, name).default

    def call(*inputs, seed=0, offset=0):
        outs = custom(list(inputs), seed, offset)
        return outs[0] if len(outs) == 1 else tuple(outs)

    call.op = custom
    call.compiled = compiled
    _ops[qualified] = call
    return call


def linear(chain: Chain, target=None, tile=None):
    """A GEMM chain as nn.Linear plus its epilogue: `f(x, weight, *inputs)` computes the
    chain on acc = x @ weight.T, with x [..., K] (leading dimensions folded into M and
    given back) and weight in nn.Linear's [N, K] layout. The chain must read B
    column-major ("b_layout": "col"), which is that weight's layout, so nothing is
    copied; a dual GEMM takes two weights (`f(x, w0, w1, *inputs)`)."""
    ml = chain.doc.get("mainloop")
    if not isinstance(ml, dict) or ml.get("kind") not in ("gemm", "dual_gemm"):
        raise UserError(f"{chain.name}: epifuse.torch.linear takes a GEMM chain")
    if ml.get("b_layout", "row") != "col":
        raise UserError(f"{chain.name}: epifuse.torch.linear needs \"b_layout\": \"col\" (nn.Linear's weight is "
                        "[N, K] row-major, which is B column-major)")
    run = op(chain, target, tile)
    weights = 2 if ml["kind"] == "dual_gemm" else 1

    def f(x, *rest, seed=0, offset=0):
        lead = x.shape[:-1]
        a = x.reshape(-1, x.shape[-1])
        ws = [w.t() for w in rest[:weights]]
        out = run(a, *ws, *rest[weights:], seed=seed, offset=offset)
        if isinstance(out, tuple):
            return tuple(o.reshape(*lead, o.shape[-1]) for o in out)
        return out.reshape(*lead, out.shape[-1])

    f.op = run
    return f
