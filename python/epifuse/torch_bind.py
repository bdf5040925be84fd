"""torch CUDA tensors through the JIT: pointers, shapes and strides from the tensors,
torch's current stream, outputs from torch.empty (so CUDA graph capture sees only
torch's allocator). A call with shapes seen before does no compile and no parsing:
its kernel, binding order and pointer arrays are kept per shape.
"""
import ctypes

import torch

from . import _lib
from ._lib import lib, check, text

_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


class _Handle:
    def __init__(self, h, free):
        self.h, self._free = h, free

    def __del__(self):
        if self.h:
            self._free(self.h)
            self.h = None


class _Launch:
    __slots__ = ("kernel", "order", "outputs", "ins", "outs", "mnk", "lead")


def _jit(compiled):
    if compiled._jit is None:
        h = ctypes.c_void_p()
        check(lib.ef_jit_new(text(compiled.target), ctypes.byref(h)))
        compiled._jit = _Handle(h, lib.ef_jit_free)
    return compiled._jit.h


def _prepare(compiled, tensors):
    mnk, lead = compiled._shape([tuple(t.shape) for t in tensors])
    b = compiled._check_shapes([tuple(t.shape) for t in tensors], mnk)
    h = ctypes.c_void_p()
    check(lib.ef_jit_compile(_jit(compiled), compiled.chain._h, mnk[0], mnk[1], mnk[2], text(compiled.tile),
                             ctypes.byref(h)))
    kernel = _Handle(h, lib.ef_kernel_free)
    import json
    kb = json.loads(_lib.take_string(lib.ef_kernel_bindings, h))
    names = compiled.input_names
    l = _Launch()
    l.kernel, l.mnk, l.lead = kernel, mnk, lead
    l.order = [names.index(n) for n in kb["inputs"]]
    shapes = {o["name"]: o["shape"] for o in b["outputs"]}
    dtypes = dict(compiled._outputs)
    l.outputs = [(lead if lead is not None else tuple(shapes[n]), _DTYPES[dtypes[n]]) for n in kb["outputs"]]
    l.ins = (ctypes.c_uint64 * len(l.order))()
    l.outs = (ctypes.c_uint64 * len(l.outputs))()
    return l


def _layouts(compiled):
    ml = compiled.chain.doc.get("mainloop")
    if not isinstance(ml, dict):
        return {}
    names = ["a"] + (["b0", "b1"] if ml.get("kind") == "dual_gemm" else ["b"])
    return {n: ml.get("a_layout" if n == "a" else "b_layout", "row") for n in names}


def _check(compiled, tensors, device):
    layouts = _layouts(compiled)
    for (name, dtype), t in zip(compiled._inputs, tensors):
        if not isinstance(t, torch.Tensor):
            raise _lib.UserError(f"{compiled.chain.name}: input '{name}' is a {type(t).__name__}; mix no "
                                 "NumPy arrays with torch tensors")
        if t.device != device:
            raise _lib.UserError(f"{compiled.chain.name}: input '{name}' is on {t.device}, the others on {device}")
        if t.dtype != _DTYPES[dtype]:
            raise _lib.UserError(f"{compiled.chain.name}: input '{name}' is {t.dtype}, the chain reads {dtype}")
        if layouts.get(name) == "col":
            if t.dim() != 2 or not t.t().is_contiguous():
                raise _lib.UserError(f"{compiled.chain.name}: the chain reads '{name}' column-major: pass the "
                                     "transpose of a contiguous tensor (e.g. weight.t() of an nn.Linear)")
        elif not t.is_contiguous():
            raise _lib.UserError(f"{compiled.chain.name}: input '{name}' is not contiguous (strides "
                                 f"{tuple(t.stride())}); call .contiguous() first")


def run(compiled, tensors, seed, offset):
    device = tensors[0].device
    if device.type != "cuda":
        raise _lib.UserError(f"{compiled.chain.name}: torch tensors on {device}: epifuse runs torch tensors on "
                             "CUDA devices (NumPy arrays run on the CPU reference)")
    if device.index not in (None, 0):
        raise _lib.UserError(f"{compiled.chain.name}: tensors on {device}: epifuse uses CUDA device 0 for now")
    _check(compiled, tensors, device)
    key = tuple(t.shape for t in tensors)
    l = compiled._launches.get(key)
    if l is None:
        l = compiled._launches[key] = _prepare(compiled, tensors)
    outs = [torch.empty(shape, dtype=dt, device=device) for shape, dt in l.outputs]
    for i, j in enumerate(l.order):
        l.ins[i] = tensors[j].data_ptr()
    for i, o in enumerate(outs):
        l.outs[i] = o.data_ptr()
    m, n, k = l.mnk
    stream = torch.cuda.current_stream(device).cuda_stream
    check(lib.ef_jit_launch(_jit(compiled), l.kernel.h, l.ins, len(l.order), l.outs, len(outs), m, n, k, seed,
                            offset, stream))
    return outs[0] if len(outs) == 1 else tuple(outs)
