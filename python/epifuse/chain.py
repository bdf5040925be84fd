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

# The builder's named ops: (name, operands, the math in one line). Each becomes a
# method of Chain with a real signature; `Chain.op` reaches any op by name.
_OPS = (
    ("add", ("a", "b"), "a + b, operands broadcast by their shape classes"),
    ("sub", ("a", "b"), "a − b"),
    ("mul", ("a", "b"), "a · b"),
    ("div", ("a", "b"), "a / b (IEEE: x/0 = ±inf, 0/0 = NaN)"),
    ("max", ("a", "b"), "max(a, b); NaN propagates"),
    ("min", ("a", "b"), "min(a, b); NaN propagates"),
    ("relu", ("a",), "max(a, 0); NaN propagates"),
    ("gelu_tanh", ("a",), "0.5·a·(1 + tanh(√(2/π)(a + 0.044715a³)))"),
    ("gelu_erf", ("a",), "0.5·a·(1 + erf(a/√2))"),
    ("sigmoid", ("a",), "1/(1 + e^(−a))"),
    ("silu", ("a",), "a·sigmoid(a) = a/(1 + e^(−a))"),
    ("tanh", ("a",), "tanh(a)"),
    ("exp", ("a",), "e^a"),
    ("log", ("a",), "ln a; log(0) = −inf, log(a < 0) = NaN"),
    ("rsqrt", ("a",), "1/√a; rsqrt(+0) = +inf, rsqrt(a < 0) = NaN"),
    ("row_max", ("a",), "max over the row (N) of a full value: one value per row, [M]; NaN propagates"),
    ("row_sum", ("a",), "Σ over the row (N) of a full value: one value per row, [M]"),
    ("row_mean", ("a",), "row_sum(a)/N: one value per row, [M]"),
    ("softmax", ("a",), "exp(a − m)/row_sum(exp(a − m)), m = row_max(a)"),
    ("log_softmax", ("a",), "(a − m) − log(row_sum(exp(a − m))), m = row_max(a)"),
    ("col_sum", ("a",), "Σ over the M rows of a full value: one value per column, [N] (a bias's gradient)"),
    ("step", ("a",), "1 if a > 0, 0.5 if a = 0, 0 if a < 0; NaN propagates (max and min's derivative)"),
    ("relu_deriv", ("a",), "0 if a ≤ 0 else 1 (NaN gives 1, as PyTorch passes a NaN's gradient)"),
    ("gelu_tanh_deriv", ("a",), "d/da gelu_tanh(a) = s + a·s·(1 − s)·2u′, s = sigmoid(2u), "
                                "u = √(2/π)(a + 0.044715a³)"),
    ("gelu_erf_deriv", ("a",), "d/da gelu_erf(a) = Φ(a) + a·φ(a)"),
    ("sigmoid_deriv", ("a",), "d/da sigmoid(a) = sigmoid(a)·sigmoid(−a)"),
    ("silu_deriv", ("a",), "d/da silu(a) = sigmoid(a) + a·sigmoid(a)·sigmoid(−a)"),
    ("tanh_deriv", ("a",), "d/da tanh(a) = 1 − tanh²(a)"),
    ("expand", ("a",), "a vector ([N] or [M]) broadcast to a full [M, N] value"),
    ("div_n", ("a",), "a/N, N the row length (row_mean's derivative)"),
)


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
    def input(self, name, dtype, broadcast="full", grad=True):
        """A tensor the kernel reads: `dtype` "f32", "f16" or "bf16"; `broadcast` its
        shape class in the [M, N] epilogue: "full" [M, N], "row" [N] (a bias), "col"
        [M] or "scalar". Declaration order is binding order. `grad=False`: never
        differentiated (an additive mask; JSON's "grad": false), and asking for its
        gradient is an error."""
        self._check_mutable()
        if not isinstance(grad, bool):
            raise _lib.UserError(f"input {name!r}: grad is True or False, got {grad!r}")
        v = ctypes.c_uint32()
        check(lib.ef_spec_input(self._h, text(name, "input name"), text(dtype, f"input {name!r}: dtype"),
                                text(broadcast, f"input {name!r}: broadcast"), ctypes.byref(v)))
        if not grad:
            check(lib.ef_spec_set_differentiable(self._h, v.value, 0))
        return self._value(v)

    def accumulator(self, index=0):
        """The mainloop's fp32 accumulator: `acc` = A·B of a GEMM (index 0), `acc0` or
        `acc1` = A·B0 or A·B1 of a dual GEMM (index 0 or 1)."""
        self._check_mutable()
        v = ctypes.c_uint32()
        check(lib.ef_spec_accumulator(self._h, index, ctypes.byref(v)))
        return self._value(v)

    def acc(self, index=0):
        """The same as `accumulator(index)`: acc, or acc0/acc1 of a dual GEMM."""
        return self.accumulator(index)

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
        """scale(a, alpha): alpha·a (alpha finite in float32)."""
        return self.op("scale", a, alpha=alpha)

    def add_scalar(self, a, c):
        """add_scalar(a, c): a + c, c a constant of the generated code (a norm's eps)."""
        return self.op("add_scalar", a, c=c)

    def dropout(self, a, p, rng="philox4", stream=None):
        """dropout(a, p): a·(keep ? 1/(1−p) : 0), keep drawn from (seed, offset, stream,
        element index) as docs/design.md §4 says; p in [0, 1]. rng: "philox4" or
        "triton" (Triton's tl.rand bit for bit). stream: the Philox stream (default one
        more than the largest so far); a dropout of the same stream, p and rng draws the
        same mask."""
        return self.op("dropout", a, p=p, rng=rng, **({} if stream is None else {"stream": stream}))

    def cast(self, a, to):
        """cast(a, to): a rounded to dtype `to` (nearest even), back to fp32."""
        return self.op("cast", a, to=to)

    def rmsnorm(self, x, weight, eps=None):
        """rmsnorm(x, weight): x·rsqrt(row_mean(x²) + eps)·weight; weight a row [N]
        input, eps default 1e-6."""
        return self.op("rmsnorm", x, weight, **({} if eps is None else {"eps": eps}))

    def layernorm(self, x, weight, bias, eps=None):
        """layernorm(x, weight, bias): (x − m)·rsqrt(row_mean((x − m)²) + eps)·weight + bias,
        m = row_mean(x); weight and bias row [N] inputs, eps default 1e-5."""
        return self.op("layernorm", x, weight, bias, **({} if eps is None else {"eps": eps}))

    def output(self, name, value, dtype):
        """Stores `value` as the output `name` in `dtype` (rounded to nearest even)."""
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
        """The chain's JSON v1 document as a dict (parsed from to_json, kept until the next builder call)."""
        doc = self._doc  # one read: a builder on another thread may reset it meanwhile
        if doc is None:
            doc = self._doc = json.loads(self.to_json())
        return doc

    @property
    def name(self):
        """The chain's name (display and kernel naming only)."""
        return self.doc.get("name", "chain")

    @property
    def mainloop(self):
        """The mainloop's kind: "elementwise", "gemm" or "dual_gemm"."""
        ml = self.doc.get("mainloop", "elementwise")
        return ml if isinstance(ml, str) else ml["kind"]

    def verify(self):
        """Checks the whole chain (every output defined, every input read); UserError if not."""
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

    def as_gemm_epilogue(self, upstream, mainloop):
        """This elementwise backward spec (`grad().backward`) run in a GEMM's epilogue
        (docs/gemm-backward.md §1): a new Chain whose accumulator A·B stands for the
        full input `upstream` (the upstream gradient, "dy"), read in fp32 where the
        backward reads dy rounded to its dtype. Every other input, op (dropout
        streams included, so the masks are the forward's) and output is kept, so the
        GEMM dY_above·W_above writes dacc and the bias gradient of the layer below in
        its own epilogue. `mainloop`: a single GEMM's, as a dict
        ({"kind": "gemm", "a": "bf16", "b": "bf16", "a_layout": "row", "b_layout": "row"}).
        UserError for a spec with a mainloop of its own, an `upstream` that is not
        one of its full inputs, a mainloop that is not a single GEMM, or a result
        that does not verify (an input named like a GEMM operand)."""
        h = ctypes.c_void_p()
        ml = json.dumps(mainloop)  # "gemm" alone is the kind with its defaults, as JSON reads it
        check(lib.ef_spec_as_gemm_epilogue(self._h, text(upstream, "upstream"), text(ml, "mainloop"),
                                           ctypes.byref(h)))
        return type(self)(_handle=h)

    def compile(self, target=None, tile=None, tune=None):
        """A callable running the chain as it is now: on torch CUDA tensors with the
        JIT, on NumPy arrays with the CPU reference. Kernels compile per shape on
        first use. The callable keeps its own snapshot of the chain, so inputs, ops
        or outputs added to this chain afterwards do not change it; compile again
        to run them. `tune=True` (default: the environment's EPIFUSE_AUTOTUNE=1):
        the first torch call of each shape times every tile candidate on its
        tensors and keeps the fastest, also on disk for later processes (it waits
        for the GPU and logs a line on the "epifuse" logger); without it a shape
        runs the family's default tile, or one `epifuse tune` chose."""
        from .compiled import Compiled
        return Compiled(self, target, tile, tune)

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


def _builder_op(name, operands, math):
    """Chain.<name>(self, <operands>): the op `name` on values of the chain."""
    if operands == ("a",):
        def method(self, a):
            return self.op(name, a)
    else:
        def method(self, a, b):
            return self.op(name, a, b)
    method.__name__ = name
    method.__qualname__ = f"Chain.{name}"
    method.__doc__ = f"{name}({', '.join(operands)}): {math}."
    return method


for _name, _operands, _math in _OPS:
    setattr(Chain, _name, _builder_op(_name, _operands, _math))


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
