"""GPU arrays of other frameworks (CuPy, JAX, ...) through DLPack (docs/python.md).

Each input and output is read through its `__dlpack__` capsule with ctypes: the data
pointer, shape, strides, dtype and device, without a copy. The launch goes on CUDA's
legacy default stream, which DLPack's `stream=1` asks the producer to make the data
ready on. epifuse allocates no device memory for these frameworks, so outputs come in
through `out=`.
"""
import ctypes

from . import _lib
from ._lib import lib, check


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

_CUDA = 2                      # kDLCUDA
_LEGACY_DEFAULT_STREAM = 1     # DLPack's number for CUDA's legacy default stream
_DTYPES = {(2, 32): "f32", (2, 16): "f16", (4, 16): "bf16"}  # (kDLFloat | kDLBfloat, bits)


class View:
    """What a DLPack capsule says of one array; holds the capsule while in use."""
    __slots__ = ("capsule", "data", "shape", "strides", "dtype", "device")

    def __init__(self, obj, name):
        try:
            self.capsule = obj.__dlpack__(stream=_LEGACY_DEFAULT_STREAM)
        except TypeError:  # a producer without the stream argument
            self.capsule = obj.__dlpack__()
        t = _DLManagedTensor.from_address(_capsule_pointer(self.capsule, b"dltensor")).dl_tensor
        self.data = (t.data or 0) + t.byte_offset
        self.shape = tuple(t.shape[i] for i in range(t.ndim))
        if t.strides:
            self.strides = tuple(t.strides[i] for i in range(t.ndim))
        else:
            self.strides = _contiguous(self.shape)
        self.dtype = _DTYPES.get((t.dtype.code, t.dtype.bits)) if t.dtype.lanes == 1 else None
        self.device = (t.device.device_type, t.device.device_id)


def _contiguous(shape):
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def run(compiled, arrays, seed, offset, out):
    """Launches `compiled` on arrays of another framework (anything with `__dlpack__`)
    in place: the inputs and the caller's `out=` arrays are read through their DLPack
    capsules, on the CUDA device they live on; returns `out` (one array, or a tuple).
    `Compiled.__call__` takes this path when its inputs are neither torch tensors nor
    NumPy arrays but have `__dlpack__`."""
    seed, offset = _lib.u64(seed, "seed"), _lib.u64(offset, "offset")
    name = compiled.chain.name
    if out is None:
        raise _lib.UserError(f"{name}: arrays through DLPack need out= for the outputs (epifuse allocates no device "
                             "memory of other frameworks)")
    layouts = compiled.layouts()
    views = [View(a, n) for a, (n, _) in zip(arrays, compiled._inputs)]
    device = views[0].device
    if device[0] != _CUDA:
        raise _lib.UserError(f"{name}: input '{compiled._inputs[0][0]}' is on DLPack device {device}; epifuse runs "
                             "DLPack arrays on CUDA devices")
    for v, (n, dtype) in zip(views, compiled._inputs):
        if v.device != device:
            raise _lib.UserError(f"{name}: input '{n}' is on DLPack device {v.device}, the first input on {device}")
        if v.dtype != dtype:
            raise _lib.UserError(f"{name}: input '{n}' is {v.dtype or 'another dtype'}, the chain reads {dtype}")
        want = _contiguous(v.shape[::-1])[::-1] if layouts.get(n) == "col" and len(v.shape) == 2 else _contiguous(v.shape)
        if v.strides != want:
            raise _lib.UserError(f"{name}: input '{n}' has strides {v.strides}, expected {want} "
                                 f"({'column-major' if layouts.get(n) == 'col' else 'contiguous'})")
    mnk, lead = compiled._shape([v.shape for v in views])
    b = compiled._check_shapes([v.shape for v in views], mnk, lead)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    if len(outs) != len(b["outputs"]):
        raise _lib.UserError(f"{name}: out= has {len(outs)} arrays for {len(b['outputs'])} outputs")
    out_views = [View(o, t["name"]) for o, t in zip(outs, b["outputs"])]
    for v, t in zip(out_views, b["outputs"]):
        shape = tuple(lead) if lead is not None else tuple(t["shape"])
        if v.shape != shape or v.dtype != t["dtype"] or v.strides != _contiguous(v.shape) or v.device != device:
            raise _lib.UserError(f"{name}: out= for '{t['name']}' must be a contiguous {t['dtype']} array of shape "
                                 f"{list(shape)} on CUDA device {device[1]}")
    key = ("dlpack", device[1], mnk)
    entry = compiled._launches.get(key)
    if entry is None:
        entry = compiled._launches[key] = compiled.kernel(mnk, device[1])
    kernel, kb_inputs, kb_outputs = entry
    by_name = {n: v for (n, _), v in zip(compiled._inputs, views)}
    out_by_name = {t["name"]: v for t, v in zip(b["outputs"], out_views)}
    ins = (ctypes.c_uint64 * len(kb_inputs))(*[by_name[n].data for n in kb_inputs])
    outp = (ctypes.c_uint64 * len(kb_outputs))(*[out_by_name[n].data for n in kb_outputs])
    check(lib.ef_jit_launch(compiled.jit(device[1]), kernel.h, ins, len(ins), outp, len(outp), mnk[0], mnk[1], mnk[2], seed,
                            offset, None))
    return outs[0] if len(outs) == 1 else tuple(outs)
