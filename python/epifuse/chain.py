"""Chains: the C++ builder's ops from Python, JSON loading, the CPU reference.

Every builder call goes through the C ABI at once, so a bad operand raises at the
call that made it, with the library's own message (graph.hpp's checks).
"""
import ctypes
import json
import math
import numbers
import os
import stat

from . import _lib
from ._lib import lib, check, text

_UNARY = ("relu", "gelu_tanh", "gelu_erf", "sigmoid", "silu", "tanh", "exp", "log", "rsqrt",
          "row_max", "row_sum", "row_mean", "softmax", "log_softmax", "col_sum", "step", "relu_deriv",
          "gelu_tanh_deriv", "gelu_erf_deriv", "sigmoid_deriv", "silu_deriv", "tanh_deriv", "expand", "div_n")
_BINARY = ("add", "sub", "mul", "max", "min", "div")


class Value:
    """A value of a chain's graph (an input, an accumulator or an op's result)."""
    __slots__ = ("chain", "id")

    def __init__(self, chain, id_):
        self.chain, self.id = chain, id_

    def __repr__(self):
        return f"<epifuse.Value {self.id} of {self.chain.name!r}>"


class Grad:
    """What Chain.grad gives: the forward with its saved tensors, the backward, what
    is saved ([{"name", "kind", "of"}]) and the inputs differentiated."""
    __slots__ = ("forward", "backward", "saved", "wrt")

    def __init__(self, forward, backward, saved, wrt):
        self.forward, self.backward, self.saved, self.wrt = forward, backward, saved, wrt

    def __iter__(self):
        return iter((self.forward, self.backward))


class Chain:
    """A KernelSpec: a graph over the mainloop's leaf (`x` for elementwise chains,
    `acc` for a GEMM, `acc0`/`acc1` for a dual GEMM).

    mainloop: None or "elementwise", or a dict as JSON writes it:
    {"kind": "gemm", "a": "f16", "b": "f16", "a_layout": "row", "b_layout": "col"}.

    One chain may be used from several threads at once (builder calls, to_json,
    compiled callables): the library locks each spec (c_api.h). copy.copy and
    copy.deepcopy give an independent chain; values of the original are not
    values of the copy.
    """

    def __init__(self, name="chain", mainloop=None, precision=None, _handle=None):
        self._frozen = False  # a compiled callable's snapshot takes no builder calls
        if _handle is None:
            _handle = ctypes.c_void_p()
            ml = None if mainloop in (None, "elementwise") else json.dumps(mainloop)
            check(lib.ef_spec_new(text(name, "name"), text(ml, "mainloop"), ctypes.byref(_handle)))
        self._h = _handle
        self._doc = None
        if precision is not None:
            check(lib.ef_spec_set_precision(self._h, text(precision, "precision")))

    def __del__(self):
        if getattr(self, "_h", None):
            lib.ef_spec_free(self._h)
            self._h = None

    def __copy__(self):
        """An independent chain: its own native spec, cloned from this one as it is now."""
        h = ctypes.c_void_p()
        check(lib.ef_spec_clone(self._h, ctypes.byref(h)))
        return type(self)(_handle=h)

    def __deepcopy__(self, memo):
        return self.__copy__()

    @classmethod
    def from_json(cls, json_text, source=None):
        """A chain from JSON v1 text (str or bytes; docs/json-schema.md), read by the
        CLI's rules (size limit, no NUL, no repeated key); errors name a JSON path,
        after `source` (a file name) when given."""
        if isinstance(json_text, str):
            try:
                data = json_text.encode()
            except UnicodeEncodeError as e:
                raise _lib.UserError(f"{source or '<json>'}: the text is not valid Unicode ({e})") from None
        elif isinstance(json_text, (bytes, bytearray, memoryview)):
            data = bytes(json_text)
        else:
            raise _lib.UserError(f"{source or '<json>'}: expected JSON text (str or bytes), "
                                 f"got {type(json_text).__name__}")
        return cls._from_bytes(data, source)

    @classmethod
    def _from_bytes(cls, data, source):
        # The length travels with the bytes: a NUL inside is the reader's to refuse.
        h = ctypes.c_void_p()
        check(lib.ef_spec_from_json_bytes(data, len(data), text(source, "source"), ctypes.byref(h)))
        return cls(_handle=h)

    # ---- the builder
    def input(self, name, dtype, broadcast="full"):
        self._check_mutable()
        v = ctypes.c_uint32()
        check(lib.ef_spec_input(self._h, text(name, "input name"), text(dtype, f"input {name!r}: dtype"),
                                text(broadcast, f"input {name!r}: broadcast"), ctypes.byref(v)))
        return self._value(v)

    def accumulator(self, index=0):
        self._check_mutable()
        v = ctypes.c_uint32()
        check(lib.ef_spec_accumulator(self._h, index, ctypes.byref(v)))
        return self._value(v)

    acc = accumulator

    def op(self, name, *args, **attributes):
        """Any op by its JSON name, with its attributes as keywords (p=0.1, alpha=2.0;
        NumPy scalars are numbers too)."""
        self._check_mutable()
        op_name = text(name, "op")
        for a in args:
            if not isinstance(a, Value) or a.chain is not self:
                raise _lib.UserError(f"{name}: operand {a!r} is not a value of this chain")
        attributes = {key: _attribute(name, key, v) for key, v in attributes.items()}
        ids = (ctypes.c_uint32 * len(args))(*[a.id for a in args])
        v = ctypes.c_uint32()
        attrs = json.dumps(attributes) if attributes else None
        check(lib.ef_spec_op(self._h, op_name, ids, len(args), text(attrs, f"{name}: attributes"), ctypes.byref(v)))
        return self._value(v)

    def scale(self, a, alpha):
        return self.op("scale", a, alpha=alpha)

    def add_scalar(self, a, c):
        return self.op("add_scalar", a, c=c)

    def dropout(self, a, p, rng="philox4", stream=None):
        """stream: the Philox stream (default one more than the largest so far); a
        dropout of the same stream, p and rng draws the same mask."""
        return self.op("dropout", a, p=p, rng=rng, **({} if stream is None else {"stream": stream}))

    def cast(self, a, to):
        return self.op("cast", a, to=to)

    def rmsnorm(self, x, weight, eps=None):
        return self.op("rmsnorm", x, weight, **({} if eps is None else {"eps": eps}))

    def layernorm(self, x, weight, bias, eps=None):
        return self.op("layernorm", x, weight, bias, **({} if eps is None else {"eps": eps}))

    def output(self, name, value, dtype):
        self._check_mutable()
        if not isinstance(value, Value) or value.chain is not self:
            raise _lib.UserError(f"output '{name}': {value!r} is not a value of this chain")
        check(lib.ef_spec_output(self._h, text(name, "output name"), value.id, text(dtype, f"output {name!r}: dtype")))
        self._doc = None

    # ---- what the chain is
    def to_json(self):
        """JSON v1 text of the chain (ops as the primitives the builder made)."""
        return _lib.take_string(lib.ef_spec_to_json, self._h)

    @property
    def doc(self):
        doc = self._doc  # one read: a builder on another thread may reset it meanwhile
        if doc is None:
            doc = self._doc = json.loads(self.to_json())
        return doc

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

    def grad(self, wrt=None):
        """The backward of the chain (docs/autodiff.md): a `Grad` with `forward` (this
        chain with the tensors the backward needs appended to its outputs),
        `backward` (inputs d<y> per output, the saved tensors and the inputs read
        again; outputs d<x> per input differentiated), `saved` (dicts: name, kind,
        of) and `wrt`. `wrt`: input names (acc for a GEMM's accumulator); default
        every input not marked "grad": false."""
        if isinstance(wrt, str):
            wrt = [wrt]
        wrt_json = None if wrt is None else json.dumps(list(wrt))
        f, b, info = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        check(lib.ef_spec_grad(self._h, text(wrt_json, "wrt"), ctypes.byref(f), ctypes.byref(b), ctypes.byref(info)))
        try:
            meta = json.loads(ctypes.string_at(info.value).decode())
        finally:
            lib.ef_string_free(info)
        return Grad(type(self)(_handle=f), type(self)(_handle=b), meta["saved"], meta["wrt"])

    def compile(self, target=None, tile=None):
        """A callable running the chain as it is now: on torch CUDA tensors with the
        JIT, on NumPy arrays with the CPU reference. Kernels compile per shape on
        first use. The callable keeps its own snapshot of the chain, so inputs, ops
        or outputs added to this chain afterwards do not change it; compile again
        to run them."""
        from .compiled import Compiled
        return Compiled(self, target, tile)

    def _value(self, v):
        self._doc = None
        return Value(self, v.value)

    def _check_mutable(self):
        if self._frozen:
            raise _lib.UserError(f"{self.name}: this chain is the snapshot a compiled callable runs and takes no "
                                 "builder calls; build on the chain it was compiled from and compile again")


def _attribute(op, key, v):
    """An op attribute as JSON carries it: strings and booleans as they are, any
    real number (NumPy's too) as a finite float or an int a double can hold."""
    if isinstance(v, (str, bool)):
        return v
    if isinstance(v, numbers.Integral):
        i = int(v)
        try:
            float(i)
        except OverflowError:
            raise _lib.UserError(f"{op}.{key}: {i} is beyond the range of a double") from None
        return i
    if isinstance(v, numbers.Real):
        f = float(v)
        if not math.isfinite(f):  # JSON has no inf or NaN to carry them
            raise _lib.UserError(f"{op}.{key}: must be a finite number, got {f}")
        return f
    raise _lib.UserError(f"{op}.{key}: expected a number or a string, got {type(v).__name__} {v!r}")


def _method(op):
    return lambda self, *args: self.op(op, *args)


for _op in _UNARY + _BINARY:
    setattr(Chain, _op, _method(_op))


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def load(path):
    """A chain from a JSON file, read by the CLI's rules: a regular file of at most
    1 MiB (docs/limits.md) with no NUL byte. Reads at most one byte past the
    limit, so /dev/zero or a huge file fails at once. OSError when it cannot be
    opened; UserError for anything else."""
    name = os.fspath(path)
    limit = lib.ef_spec_json_limit()
    # O_NONBLOCK: opening a FIFO to read would wait for a writer; fstat says what it is.
    fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((k for test, k in _KINDS if test(mode)), "not a regular file")
            raise _lib.UserError(f"{name}: cannot read spec: it is {kind}; a chain is read from a regular file")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise _lib.UserError(f"{name}: more than the limit of {limit} bytes ({limit >> 20} MiB) for a chain "
                             "(stopped reading there)")
    return Chain._from_bytes(b"".join(chunks), name)
