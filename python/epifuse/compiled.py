"""A compiled chain as a callable: torch CUDA tensors through the JIT, without a copy
and on torch's current stream; NumPy arrays through the CPU reference.

Positional arguments bind to the chain's inputs in binding order (a GEMM's operands
`a`, `b` or `a`, `b0`, `b1` first, then the graph's inputs as declared); keywords bind by
name. One output is returned as it is, several as a tuple in declaration order.
"""
import copy
import ctypes
import json
import logging
import os
import time

import numpy as np

from . import _lib
from ._lib import lib, check, text

# A first call that compiles (or reads from the disk cache) for longer than this many
# seconds logs one line at INFO on the "epifuse" logger: what, for which shape, how
# long (docs/python.md, "Logging").
LOG_SECONDS = 1.0
_log = logging.getLogger("epifuse")

_NUMPY = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": np.dtype(np.uint16)}
_TORCH_NAMES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


class Handle:
    """An ef_jit or ef_kernel, freed with its owner. Not copyable: two owners of
    one native pointer would free it twice."""

    def __init__(self, h, free):
        self.h, self._free = h, free

    def __copy__(self):
        raise TypeError("epifuse: a native handle cannot be copied; share the object instead")

    def __deepcopy__(self, memo):
        self.__copy__()

    def __reduce__(self):
        raise TypeError("epifuse: a native handle cannot be pickled")

    def __del__(self):
        if self.h:
            self._free(self.h)
            self.h = None


def _product(dims):
    p = 1
    for d in dims:
        p *= d
    return p


def _is_torch(x):
    return type(x).__module__.startswith("torch")


class Compiled:
    """A chain's callable. It runs a snapshot of the chain taken at compile time
    (`chain`, which takes no builder calls): what is added to the original later
    does not reach it. Copies are new callables over the same snapshot."""

    def __init__(self, chain, target=None, tile=None, tune=None):
        chain.verify()
        snapshot = copy.copy(chain)  # ef_spec_clone: the chain as it is now, its own native spec
        snapshot._frozen = True
        self.chain, self.target, self.tile = snapshot, target, tile
        if tune is None:
            tune = os.environ.get("EPIFUSE_AUTOTUNE", "") == "1"
        if not isinstance(tune, bool):
            raise _lib.UserError(f"{snapshot.name}: tune is True, False or None, got {tune!r}")
        self.tune = tune and tile is None  # a given tile is never tuned over
        b = snapshot.bindings(1, 1, 1)
        self._inputs = [(t["name"], t["dtype"]) for t in b["inputs"]]
        self._outputs = [(t["name"], t["dtype"]) for t in b["outputs"]]
        self._arity = len(self._inputs)
        self._gemm = snapshot.mainloop != "elementwise"
        self._broadcasts = [self._broadcast(n) for n, _ in self._inputs]
        self._full = None if self._gemm else self._first_full()
        self._jits = {}  # device index -> Handle of its ef_jit
        self._launches = {}  # the torch inputs' signature (torch_bind._key) -> torch_bind._Launch
        self._last_launch = None  # the torch hot path's first guess: the last call's _Launch
        self._run_torch = None  # torch_bind.hot_path(arity), imported on the first torch call
        self._torch_tensor = None  # torch.Tensor once torch was seen: the fast path's test

    def __copy__(self):
        return Compiled(self.chain, self.target, self.tile, self.tune)

    def __deepcopy__(self, memo):
        return self.__copy__()

    def jit(self, device=0):
        """The JIT of GPU `device` (an index), created on its first call there: it
        loads and launches on that device, whatever the thread's current device
        is. Devices of one architecture share their compiled binaries."""
        j = self._jits.get(device)
        if j is None:
            h = ctypes.c_void_p()
            check(lib.ef_jit_new_on_device(text(self.target, "target"), device, ctypes.byref(h)))
            j = self._jits[device] = Handle(h, lib.ef_jit_free)
        return j.h

    def kernel(self, mnk, device=0, lds=None, batch=0, batch_strides=None):
        """The kernel for (M, N, K) loaded on GPU `device`, and its bindings' order:
        (Handle, inputs, outputs). `lds`: the leading dimensions of the bindings, the
        inputs in binding order and then the outputs (fewer: the rest dense), 0 dense (a
        strided GEMM operand's or full [M, N] tensor's kernel variant, docs/strided-batched.md).
        `batch` above 1: the batched variant of a GEMM chain for that many problems,
        `batch_strides` one per GEMM operand (elements between its batches, 0 shared;
        ef_jit_compile_batched)."""
        h = ctypes.c_void_p()
        start = time.perf_counter()
        if batch > 1:
            arr = None if not lds or not any(lds) else (ctypes.c_int64 * len(lds))(*lds)
            strides = (ctypes.c_int64 * len(batch_strides))(*batch_strides)
            check(lib.ef_jit_compile_batched(self.jit(device), self.chain._h, mnk[0], mnk[1], mnk[2], arr,
                                             0 if arr is None else len(lds), batch, strides, len(batch_strides),
                                             text(self.tile, "tile"), ctypes.byref(h)))
        elif lds and any(lds):
            arr = (ctypes.c_int64 * len(lds))(*lds)
            check(lib.ef_jit_compile_ld(self.jit(device), self.chain._h, mnk[0], mnk[1], mnk[2], arr, len(lds),
                                        text(self.tile, "tile"), ctypes.byref(h)))
        else:
            check(lib.ef_jit_compile(self.jit(device), self.chain._h, mnk[0], mnk[1], mnk[2], text(self.tile, "tile"),
                                    ctypes.byref(h)))
        took = time.perf_counter() - start
        if took > LOG_SECONDS:
            target = lib.ef_jit_target(self.jit(device)).decode()
            _log.info("compiled %s for M=%d N=%d K=%d%s on %s (device %d) in %.2f s", self.chain.name, mnk[0],
                      mnk[1], mnk[2], f" batch={batch}" if batch > 1 else "", target, device, took)
        handle = Handle(h, lib.ef_kernel_free)
        kb = json.loads(_lib.take_string(lib.ef_kernel_bindings, h))
        return handle, kb["inputs"], kb["outputs"]

    def layouts(self):
        """{operand: "row" | "col"} of a GEMM chain's operands; {} for elementwise chains."""
        ml = self.chain.doc.get("mainloop")
        if not isinstance(ml, dict):
            return {}
        names = ["a"] + (["b0", "b1"] if ml.get("kind") == "dual_gemm" else ["b"])
        return {n: ml.get("a_layout" if n == "a" else "b_layout", "row") for n in names}

    def tune_on(self, mnk, device, inputs, outputs):
        """Times the tile candidates for (M, N, K) on GPU `device` over the given device
        pointers (ints, in the kernel's binding order; outputs are overwritten) and keeps
        the fastest for later calls and processes. Returns {"tile", "ms", "candidates"}."""
        ins = (ctypes.c_uint64 * len(inputs))(*inputs)
        outs = (ctypes.c_uint64 * len(outputs))(*outputs)
        start = time.perf_counter()
        _log.info("tuning %s for M=%d N=%d K=%d on device %d", self.chain.name, mnk[0], mnk[1], mnk[2], device)
        r = json.loads(_lib.take_string(lib.ef_jit_tune, self.jit(device), self.chain._h, mnk[0], mnk[1], mnk[2],
                                        ins, len(ins), outs, len(outs), 0, 0))
        _log.info("tuned %s for M=%d N=%d K=%d: tile %s, %.4f ms, %d candidates in %.1f s", self.chain.name, mnk[0],
                  mnk[1], mnk[2], r["tile"], r["ms"], r["candidates"], time.perf_counter() - start)
        return r

    @property
    def input_names(self):
        """The inputs' names in binding order (a GEMM's operands first)."""
        return [n for n, _ in self._inputs]

    def __call__(self, *args, seed=0, offset=0, out=None, rng_state=None, **named):
        """Runs the chain. `out=`: torch outputs to write (one tensor, or a sequence
        in declaration order) instead of new ones. `rng_state`: torch only, an int64
        CUDA tensor of two, {seed, offset base}, that dropout reads on the device
        instead of `seed` (the base is added to `offset`; docs/python.md). Inputs
        named seed, offset, out or rng_state are passed positionally."""
        # The hot path: every input positional, torch tensors (docs/python.md, overhead).
        if not named and len(args) == self._arity and type(args[0]) is self._torch_tensor:
            return self._run_torch(self, args, seed, offset, out, rng_state)
        return self._call_named(args, seed, offset, out, named, rng_state)

    def _call_named(self, args, seed, offset, out, named, rng_state=None):
        seed, offset = _lib.u64(seed, "seed"), _lib.u64(offset, "offset")
        if len(args) > len(self._inputs):
            raise _lib.UserError(f"{self.chain.name}: {len(args)} positional arguments for "
                                 f"{len(self._inputs)} inputs ({', '.join(self.input_names)})")
        bound = dict(zip(self.input_names, args))
        for name, t in named.items():
            if name not in self.input_names:
                raise _lib.UserError(f"{self.chain.name}: '{name}' is not an input "
                                     f"(inputs: {', '.join(self.input_names)})")
            if name in bound:
                raise _lib.UserError(f"{self.chain.name}: input '{name}' given twice")
            bound[name] = t
        missing = [n for n in self.input_names if n not in bound]
        if missing:
            raise _lib.UserError(f"{self.chain.name}: missing input(s) {', '.join(missing)}")
        tensors = [bound[n] for n in self.input_names]
        if any(_is_torch(t) for t in tensors):
            from .torch_bind import hot_path, run
            import torch
            self._torch_tensor, self._run_torch = torch.Tensor, hot_path(self._arity)  # the fast path from now on
            return run(self, tensors, seed, offset, out, rng_state)
        if rng_state is not None:
            raise _lib.UserError(f"{self.chain.name}: rng_state= is for torch CUDA tensors")
        if not isinstance(tensors[0], np.ndarray) and hasattr(tensors[0], "__dlpack__"):
            from .dlpack import run
            return run(self, tensors, seed, offset, out)
        if out is not None:
            raise _lib.UserError(f"{self.chain.name}: out= is for torch tensors; NumPy runs return new arrays")
        return self._run_numpy(tensors, seed, offset)

    # ---- shapes
    # Note [Input shapes]: an elementwise chain takes its shape from its first
    # full input x: [..., N] is M = prod(leading dims) rows of N (a 1-D x of N is
    # one row) and the result comes back in x's shape. Every other input must be
    # exactly of the shape its broadcast names in x's terms, never only of the
    # same element count: a full input x.shape, a row vector (N,), a column
    # vector x.shape[:-1], a scalar () or (1,).
    def _shape(self, shapes):
        """(M, N, K) and the leading dims an elementwise result takes back."""
        if self._gemm:
            a, b = shapes[0], shapes[1]
            if len(a) != 2 or len(b) != 2:
                raise _lib.UserError(f"{self.chain.name}: GEMM operands are matrices, got a {list(a)}, b {list(b)}"
                                     " (3-D operands, a batched GEMM, run on torch CUDA tensors)")
            return (a[0], b[1], a[1]), None
        x = tuple(shapes[self._full])
        if len(x) == 0:
            raise _lib.UserError(f"{self.chain.name}: input '{self._inputs[self._full][0]}' has no dimensions")
        return (_product(x[:-1]), x[-1], 0), x

    def _first_full(self):
        """The first full [M, N] input, which gives an elementwise chain its shape."""
        for i, b in enumerate(self._broadcasts):
            if b == "full":
                return i
        raise _lib.UserError(f"{self.chain.name}: no full [M, N] input to take the shape from")

    def _expected(self, broadcast, want, lead):
        """The shapes an input of `broadcast` may have (Note [Input shapes])."""
        if broadcast == "scalar":
            return [(), (1,)]
        if lead is None:  # GEMM: the operands and the epilogue's inputs as bindings gives them
            return [tuple(want)]
        return [{"full": lead, "row": lead[-1:], "col": lead[:-1]}[broadcast]]

    def _check_shapes(self, shapes, mnk, lead=None):
        """The run's bindings; UserError naming the first input of another shape
        than Note [Input shapes] gives it."""
        b = self.chain.bindings(*mnk)
        for (name, _), broadcast, got, want in zip(self._inputs, self._broadcasts, shapes, b["inputs"]):
            expected = self._expected(broadcast, want["shape"], lead)
            if tuple(got) not in expected:
                raise _lib.UserError(f"{self.chain.name}: input '{name}' has shape {list(got)}, expected "
                                     f"{' or '.join(str(list(e)) for e in expected)}"
                                     f"{'' if broadcast == 'full' else f' (a {broadcast} input)'}")
        return b

    def _broadcast(self, name):
        decl = self.chain.doc.get("inputs", {}).get(name, {})
        return decl.get("broadcast", "full") if isinstance(decl, dict) else "full"

    # ---- the CPU reference
    def _run_numpy(self, arrays, seed, offset):
        arrays = [np.asarray(a) for a in arrays]
        for (name, dtype), a in zip(self._inputs, arrays):
            if a.dtype != _NUMPY[dtype]:
                raise _lib.UserError(f"{self.chain.name}: input '{name}' is {a.dtype}, the chain reads {dtype} "
                                     f"({_NUMPY[dtype]}{'; bf16 as its 16-bit patterns' if dtype == 'bf16' else ''})")
        mnk, lead = self._shape([a.shape for a in arrays])
        b = self._check_shapes([a.shape for a in arrays], mnk, lead)
        arrays = [np.ascontiguousarray(a) for a in arrays]
        outs = [np.empty(o["shape"], _NUMPY[o["dtype"]]) for o in b["outputs"]]
        in_names = (ctypes.c_char_p * len(arrays))(*[text(n, "input name") for n, _ in self._inputs])
        in_ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        out_names = (ctypes.c_char_p * len(outs))(*[text(n, "output name") for n, _ in self._outputs])
        out_ptrs = (ctypes.c_void_p * len(outs))(*[o.ctypes.data for o in outs])
        check(lib.ef_evaluate(self.chain._h, mnk[0], mnk[1], mnk[2], in_names, in_ptrs, len(arrays), out_names,
                              out_ptrs, len(outs), seed, offset))
        if lead is not None:  # leading dimensions folded into M come back; an [N] output has none
            shapes = {"full": lead, "row": lead[-1:], "col": lead[:-1]}
            outs = [o.reshape(shapes[d.get("broadcast", "full")]) for o, d in zip(outs, b["outputs"])]
        return outs[0] if len(outs) == 1 else tuple(outs)
