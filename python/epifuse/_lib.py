"""The C ABI (include/epifuse/c_api.h) through ctypes, and its errors as exceptions.

The shared library is found, in order: $EPIFUSE_LIBRARY; libepifuse_c.so inside this
package (what `pip install .` puts there); the checkout's build/ (a source tree used in
place). docs/python.md says why this is ctypes and not a compiled extension.
"""
import ctypes
import operator
import os
from pathlib import Path

OK, USER_ERROR, COMPILE_ERROR, RUNTIME_ERROR = 0, 2, 3, 4


class Error(Exception):
    """Base of every epifuse error."""


class UserError(Error, ValueError):
    """A bad chain, operand, shape, dtype or option (the CLI's exit code 2)."""


class CompileError(Error, RuntimeError):
    """The kernel compiler failed: a bug in epifuse (exit code 3)."""


class DeviceError(Error, RuntimeError):
    """The driver, a device or a launch failed (exit code 4)."""


_KINDS = {USER_ERROR: UserError, COMPILE_ERROR: CompileError, RUNTIME_ERROR: DeviceError}


def _candidates():
    if os.environ.get("EPIFUSE_LIBRARY"):
        yield Path(os.environ["EPIFUSE_LIBRARY"])
    here = Path(__file__).resolve().parent
    yield here / "libepifuse_c.so"
    yield here.parent.parent / "build" / "libepifuse_c.so"


def _load():
    tried = []
    for path in _candidates():
        tried.append(str(path))
        if path.is_file():
            return ctypes.CDLL(str(path))
    raise ImportError("epifuse: libepifuse_c.so not found (tried " + ", ".join(tried) +
                      "); build it (tools/setup.sh) or set EPIFUSE_LIBRARY")


lib = _load()

_c = ctypes
_u32p, _charp, _voidp = _c.POINTER(_c.c_uint32), _c.c_char_p, _c.c_void_p
_SIGNATURES = {
    "ef_version": ([], _charp),
    "ef_last_error": ([], _charp),
    "ef_string_free": ([_voidp], None),
    "ef_spec_from_json": ([_charp, _charp, _c.POINTER(_voidp)], _c.c_int),
    "ef_spec_from_json_bytes": ([_charp, _c.c_size_t, _charp, _c.POINTER(_voidp)], _c.c_int),
    "ef_spec_json_limit": ([], _c.c_size_t),
    "ef_spec_clone": ([_voidp, _c.POINTER(_voidp)], _c.c_int),
    "ef_spec_new": ([_charp, _charp, _c.POINTER(_voidp)], _c.c_int),
    "ef_spec_free": ([_voidp], None),
    "ef_spec_input": ([_voidp, _charp, _charp, _charp, _u32p], _c.c_int),
    "ef_spec_accumulator": ([_voidp, _c.c_int, _u32p], _c.c_int),
    "ef_spec_op": ([_voidp, _charp, _u32p, _c.c_size_t, _charp, _u32p], _c.c_int),
    "ef_spec_output": ([_voidp, _charp, _c.c_uint32, _charp], _c.c_int),
    "ef_spec_set_precision": ([_voidp, _charp], _c.c_int),
    "ef_spec_verify": ([_voidp], _c.c_int),
    "ef_spec_to_json": ([_voidp, _c.POINTER(_voidp)], _c.c_int),
    "ef_spec_grad": ([_voidp, _charp, _c.POINTER(_voidp), _c.POINTER(_voidp), _c.POINTER(_voidp)], _c.c_int),
    "ef_spec_as_gemm_epilogue": ([_voidp, _charp, _charp, _c.POINTER(_voidp)], _c.c_int),
    "ef_spec_bindings": ([_voidp, _c.c_int64, _c.c_int64, _c.c_int64, _c.POINTER(_voidp)], _c.c_int),
    "ef_evaluate": ([_voidp, _c.c_int64, _c.c_int64, _c.c_int64, _c.POINTER(_charp), _c.POINTER(_voidp),
                     _c.c_size_t, _c.POINTER(_charp), _c.POINTER(_voidp), _c.c_size_t, _c.c_uint64, _c.c_uint64],
                    _c.c_int),
    "ef_jit_new": ([_charp, _c.POINTER(_voidp)], _c.c_int),
    "ef_jit_new_on_device": ([_charp, _c.c_int, _c.POINTER(_voidp)], _c.c_int),
    "ef_spec_set_differentiable": ([_voidp, _c.c_uint32, _c.c_int], _c.c_int),
    "ef_jit_tune": ([_voidp, _voidp, _c.c_int64, _c.c_int64, _c.c_int64, _c.POINTER(_c.c_uint64), _c.c_size_t,
                     _c.POINTER(_c.c_uint64), _c.c_size_t, _c.c_uint64, _c.c_uint64, _c.POINTER(_voidp)], _c.c_int),
    "ef_jit_free": ([_voidp], None),
    "ef_jit_target": ([_voidp], _charp),
    "ef_jit_compile": ([_voidp, _voidp, _c.c_int64, _c.c_int64, _c.c_int64, _charp, _c.POINTER(_voidp)], _c.c_int),
    "ef_jit_compile_ld": ([_voidp, _voidp, _c.c_int64, _c.c_int64, _c.c_int64, _c.POINTER(_c.c_int64), _c.c_size_t,
                           _charp, _c.POINTER(_voidp)], _c.c_int),
    "ef_jit_compile_batched": ([_voidp, _voidp, _c.c_int64, _c.c_int64, _c.c_int64, _c.POINTER(_c.c_int64),
                                _c.c_size_t, _c.c_int64, _c.POINTER(_c.c_int64), _c.c_size_t, _charp,
                                _c.POINTER(_voidp)], _c.c_int),
    "ef_kernel_free": ([_voidp], None),
    "ef_kernel_bindings": ([_voidp, _c.POINTER(_voidp)], _c.c_int),
    "ef_jit_launch": ([_voidp, _voidp, _c.POINTER(_c.c_uint64), _c.c_size_t, _c.POINTER(_c.c_uint64), _c.c_size_t,
                       _c.c_int64, _c.c_int64, _c.c_int64, _c.c_uint64, _c.c_uint64, _voidp], _c.c_int),
}


class LaunchRecord(ctypes.Structure):
    """struct ef_launch (c_api.h): kept per shape, only pointers, seed, offset and stream change."""
    _fields_ = [("jit", _voidp), ("kernel", _voidp), ("inputs", _c.POINTER(_c.c_uint64)), ("ninputs", _c.c_size_t),
                ("outputs", _c.POINTER(_c.c_uint64)), ("noutputs", _c.c_size_t), ("m", _c.c_int64),
                ("n", _c.c_int64), ("k", _c.c_int64), ("seed", _c.c_uint64), ("offset", _c.c_uint64),
                ("stream", _voidp), ("rng_state", _c.c_uint64), ("ld", _c.POINTER(_c.c_int64)),
                ("nld", _c.c_size_t), ("batch", _c.c_int64), ("batch_stride", _c.POINTER(_c.c_int64)),
                ("nbatch_stride", _c.c_size_t)]


_SIGNATURES["ef_launch_record"] = ([_voidp], _c.c_int)
for _name, (_args, _res) in _SIGNATURES.items():
    _f = getattr(lib, _name)
    _f.argtypes, _f.restype = _args, _res


def check(status):
    """Raises the error kind a status names, with the library's message."""
    if status != OK:
        raise _KINDS.get(status, DeviceError)(lib.ef_last_error().decode(errors="backslashreplace"))


def take_string(fn, *args):
    """Calls an ef_* function whose last argument receives a string it allocates."""
    out = _voidp()
    check(fn(*args, ctypes.byref(out)))
    try:
        return ctypes.string_at(out.value).decode()
    finally:
        lib.ef_string_free(out)


def text(s, what="a string argument"):
    """`s` as the C ABI's NUL-terminated UTF-8; None stays NULL. A NUL inside
    would end the string there on the C side, so it is refused, not cut."""
    if s is None:
        return None
    if not isinstance(s, str):
        raise UserError(f"{what}: expected a string, got {type(s).__name__} {s!r}")
    if "\0" in s:
        raise UserError(f"{what}: {s[:60]!r} contains a NUL character (the C ABI would cut the string there)")
    return s.encode()


U64_MAX = 2**64 - 1


def u64(v, what):
    """`v` as a C uint64_t: an integer (Python's or NumPy's, not a bool) in
    [0, 2**64 - 1]. ctypes would wrap anything else modulo 2**64 or raise a bare
    TypeError; a seed of -1 or 2**64 is a mistake to report, not a seed to run."""
    if type(v) is int and 0 <= v <= U64_MAX:
        return v
    if isinstance(v, bool) or v is None:
        raise UserError(f"{what} must be an integer in [0, 2**64 - 1], got {v!r}")
    try:
        i = operator.index(v)
    except TypeError:
        raise UserError(f"{what} must be an integer in [0, 2**64 - 1], got {type(v).__name__} {v!r}") from None
    if not 0 <= i <= U64_MAX:
        raise UserError(f"{what} must be an integer in [0, 2**64 - 1], got {i}")
    return i
