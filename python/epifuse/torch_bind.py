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
    """What a call with shapes seen before needs, prepared once."""
    __slots__ = ("kernel", "order", "outputs", "ins", "outs", "mnk", "lead", "expect")


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
    # What the fast path compares: each input's dtype and strides (contiguous, or
    # a column-major operand's transposed strides) as this first call checked them.
    l.expect = [(t.dtype, t.stride()) for t in tensors]
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


try:
    _raw_stream = torch._C._cuda_getCurrentRawStream  # what Triton launches on; no Stream object
except AttributeError:  # pragma: no cover - older torch
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream

_launch = lib.ef_jit_launch


def run(compiled, tensors, seed, offset):
    try:
        l = compiled._launches.get(tuple([t.shape for t in tensors]))
        if l is not None:
            for t, (dtype, stride) in zip(tensors, l.expect):
                if t.dtype is not dtype or t.stride() != stride or t.get_device() != 0:
                    l = None
                    break
    except AttributeError:  # not a tensor: _first_call says which
        l = None
    if l is None:
        l = _first_call(compiled, tensors)
    ins, outs_ptr = l.ins, l.outs
    for i, j in enumerate(l.order):
        ins[i] = tensors[j].data_ptr()
    outs = [torch.empty(shape, dtype=dt, device="cuda:0") for shape, dt in l.outputs]
    for i, o in enumerate(outs):
        outs_ptr[i] = o.data_ptr()
    m, n, k = l.mnk
    status = _launch(compiled._jit.h, l.kernel.h, ins, len(ins), outs_ptr, len(outs), m, n, k, seed, offset,
                     _raw_stream(0))
    if status:
        check(status)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _first_call(compiled, tensors):
    """Checks every input in full (UserError naming the first bad one), then
    compiles and prepares the launch for these shapes, or finds it prepared."""
    device = getattr(tensors[0], "device", None)
    if not isinstance(tensors[0], torch.Tensor) or device.type != "cuda":
        raise _lib.UserError(f"{compiled.chain.name}: torch tensors on {device}: epifuse runs torch tensors on "
                             "CUDA devices (NumPy arrays run on the CPU reference)")
    if device.index not in (None, 0):
        raise _lib.UserError(f"{compiled.chain.name}: tensors on {device}: epifuse uses CUDA device 0 for now")
    _check(compiled, tensors, device)
    key = tuple([t.shape for t in tensors])
    l = compiled._launches.get(key)
    if l is None or [(t.dtype, t.stride()) for t in tensors] != l.expect:
        _jit(compiled)
        l = compiled._launches[key] = _prepare(compiled, tensors)
    return l
