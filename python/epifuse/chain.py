"""Chains: the C++ builder's ops from Python, JSON loading, the CPU reference.

Every builder call goes through the C ABI at once, so a bad operand raises at the
call that made it, with the library's own message (graph.hpp's checks).
"""
import ctypes
import json
import math
from pathlib import Path

from . import _lib
from ._lib import lib, check, text

_UNARY = ("relu", "gelu_tanh", "gelu_erf", "sigmoid", "silu", "tanh", "exp", "log", "rsqrt",
          "row_max", "row_sum", "row_mean", "softmax", "log_softmax")
_BINARY = ("add", "sub", "mul", "max", "min", "div")


class Value:
    """A value of a chain's graph (an input, an accumulator or an op's result)."""
    __slots__ = ("chain", "id")

    def __init__(self, chain, id_):
        self.chain, self.id = chain, id_

    def __repr__(self):
        return f"<epifuse.Value {self.id} of {self.chain.name!r}>"


class Chain:
    """A KernelSpec: a graph over the mainloop's leaf (`x` for elementwise chains,
    `acc` for a GEMM, `acc0`/`acc1` for a dual GEMM).

    mainloop: None or "elementwise", or a dict as JSON writes it:
    {"kind": "gemm", "a": "f16", "b": "f16", "a_layout": "row", "b_layout": "col"}.
    """

    def __init__(self, name="chain", mainloop=None, precision=None, _handle=None):
        if _handle is None:
            _handle = ctypes.c_void_p()
            ml = None if mainloop in (None, "elementwise") else json.dumps(mainloop)
            check(lib.ef_spec_new(text(name), text(ml), ctypes.byref(_handle)))
        self._h = _handle
        self._doc = None
        if precision is not None:
            check(lib.ef_spec_set_precision(self._h, text(precision)))

    def __del__(self):
        if getattr(self, "_h", None):
            lib.ef_spec_free(self._h)
            self._h = None

    @classmethod
    def from_json(cls, json_text, source=None):
        """A chain from JSON v1 text (docs/json-schema.md); errors name a JSON path,
        after `source` (a file name) when given."""
        h = ctypes.c_void_p()
        check(lib.ef_spec_from_json(text(json_text), text(source), ctypes.byref(h)))
        return cls(_handle=h)

    # ---- the builder
    def input(self, name, dtype, broadcast="full"):
        v = ctypes.c_uint32()
        check(lib.ef_spec_input(self._h, text(name), text(dtype), text(broadcast), ctypes.byref(v)))
        return self._value(v)

    def accumulator(self, index=0):
        v = ctypes.c_uint32()
        check(lib.ef_spec_accumulator(self._h, index, ctypes.byref(v)))
        return self._value(v)

    acc = accumulator

    def op(self, name, *args, **attributes):
        """Any op by its JSON name, with its attributes as keywords (p=0.1, alpha=2.0)."""
        for a in args:
            if not isinstance(a, Value) or a.chain is not self:
                raise _lib.UserError(f"{name}: operand {a!r} is not a value of this chain")
        for key, v in attributes.items():  # JSON has no inf or NaN to carry them
            if isinstance(v, float) and not math.isfinite(v):
                raise _lib.UserError(f"{name}.{key}: must be a finite number, got {v}")
        ids = (ctypes.c_uint32 * len(args))(*[a.id for a in args])
        v = ctypes.c_uint32()
        attrs = json.dumps(attributes) if attributes else None
        check(lib.ef_spec_op(self._h, text(name), ids, len(args), text(attrs), ctypes.byref(v)))
        return self._value(v)

    def scale(self, a, alpha):
        return self.op("scale", a, alpha=alpha)

    def add_scalar(self, a, c):
        return self.op("add_scalar", a, c=c)

    def dropout(self, a, p, rng="philox4"):
        return self.op("dropout", a, p=p, rng=rng)

    def cast(self, a, to):
        return self.op("cast", a, to=to)

    def rmsnorm(self, x, weight, eps=None):
        return self.op("rmsnorm", x, weight, **({} if eps is None else {"eps": eps}))

    def layernorm(self, x, weight, bias, eps=None):
        return self.op("layernorm", x, weight, bias, **({} if eps is None else {"eps": eps}))

    def output(self, name, value, dtype):
        if not isinstance(value, Value) or value.chain is not self:
            raise _lib.UserError(f"output '{name}': {value!r} is not a value of this chain")
        check(lib.ef_spec_output(self._h, text(name), value.id, text(dtype)))
        self._doc = None

    # ---- what the chain is
    def to_json(self):
        """JSON v1 text of the chain (ops as the primitives the builder made)."""
        return _lib.take_string(lib.ef_spec_to_json, self._h)

    @property
    def doc(self):
        if self._doc is None:
            self._doc = json.loads(self.to_json())
        return self._doc

    @property
    def name(self):
        return self.doc.get("name", "chain")

    @property
    def mainloop(self):
        ml = self.doc.get("mainloop", "elementwise")
        return ml if isinstance(ml, str) else ml["kind"]

    def verify(self):
        check(lib.ef_spec_verify(self._h))

    def bindings(self, m, n, k=0):
        """What a run at (M, N[, K]) binds: {"inputs": [{"name", "dtype", "shape"}], "outputs": [...]}."""
        return json.loads(_lib.take_string(lib.ef_spec_bindings, self._h, m, n, k))

    def compile(self, target=None, tile=None):
        """A callable running the chain: on torch CUDA tensors with the JIT, on NumPy
        arrays with the CPU reference. Kernels compile per shape on first use."""
        from .compiled import Compiled
        return Compiled(self, target, tile)

    def _value(self, v):
        self._doc = None
        return Value(self, v.value)


def _method(op):
    return lambda self, *args: self.op(op, *args)


for _op in _UNARY + _BINARY:
    setattr(Chain, _op, _method(_op))


def load(path):
    """A chain from a JSON file."""
    return Chain.from_json(Path(path).read_text(), source=str(path))
