#!/usr/bin/env python3
"""The Python side of an epifuse call, timed without a GPU (docs/perf/host.md, "Python
call overhead": the CPU-side breakdown).

    EPIFUSE_LIBRARY=build/libepifuse_c.so PYTHONPATH=python python3 tools/perf/python_overhead_cpu.py [--profile]

A torch build without CUDA is enough. The callable of add_mul (f32, 256 x 256) is given
a prepared launch for CPU tensors, as a first call on CUDA tensors would prepare it,
and then `fn(x, y, out=z)` takes the same hot path as on a GPU except for two calls
replaced here:

- the C launch (`ef_launch_record`) by a C function that does nothing with the same
  ctypes signature (libc's `labs` given address 0: one pointer-sized argument, 0
  back), so the ctypes conversion and call stay in the time and the launch does not;
- torch's current-stream query (`torch._C._cuda_getCurrentRawStream`, which needs
  CUDA) by a C builtin of one int argument. Its own cost on a GPU host is printed by
  tools/perf/python_overhead.py.

What is printed: the hot path's median per call (rounds of back-to-back calls, as
python_overhead.py times the GPU calls), the costs of its parts timed alone, and with
--profile the cProfile table of the hot path. Numbers from this script are the
CPU-side part only, never the GPU host's overhead. For a before/after, run each
commit's own copy of this script (it reaches into torch_bind's internals).
"""
import argparse
import cProfile
import ctypes
import pstats
import statistics
import time
from pathlib import Path

import torch

import epifuse
from epifuse import _lib, torch_bind

ROOT = Path(__file__).resolve().parents[2]
CHAIN = ROOT / "examples" / "chains" / "add_mul.json"
SHAPE = (256, 256)


def per_call_ns(fn, calls=2000, rounds=21):
    """The median and the lowest over rounds of the mean time of `calls` back-to-back
    calls, in ns (the lowest, on a shared machine, is the one least disturbed)."""
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter_ns() - t0) / calls)
    return statistics.median(times), min(times)


class _NoKernel:
    """What Compiled.kernel returns here: no native kernel (the launch is a no-op)."""
    h = None


def prepared_on_cpu(x, y):
    """The add_mul callable with its launch for CPU tensors of x's and y's shapes prepared
    as _first_call would on CUDA (compile and JIT stubbed: nothing runs)."""
    fn = epifuse.load(CHAIN).compile()
    names = fn.input_names
    tensors = [x, y]
    fn.kernel = lambda mnk, device=0, lds=None: (_NoKernel(), names, [n for n, _ in fn._outputs])
    fn.jit = lambda device=0: None
    fn._torch_tensor, fn._run_torch = torch.Tensor, torch_bind.hot_path(len(tensors))
    cpu = torch.device("cpu")
    lds = torch_bind._check(fn, tensors, cpu)
    l = torch_bind._prepare(fn, tensors, cpu, lds)
    l.index = x.get_device()  # -1 on the CPU: the key the hot path looks up
    l.address = 0  # the stub launch returns labs(0) = 0, success
    fn._launches[torch_bind._key(tensors)] = l
    return fn


def no_op_launch():
    f = ctypes.CDLL(None).labs  # long labs(long): a C call that does nothing of note
    f.argtypes, f.restype = _lib.lib.ef_launch_record.argtypes, _lib.lib.ef_launch_record.restype
    return f


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", action="store_true", help="print cProfile's table of the hot path")
    args = p.parse_args()
    x, y, z = (torch.randn(SHAPE) for _ in range(3))
    launch = no_op_launch()
    torch_bind._launch = launch
    torch_bind._raw_stream = abs  # a C builtin of one int, standing in for the CUDA query
    fn = prepared_on_cpu(x, y)
    assert fn(x, y, out=z) is z

    def call():
        fn(x, y, out=z)

    total = per_call_ns(call)
    l = fn._launches[torch_bind._key([x, y])]
    record, tensors = l.address, (x, y)
    parts = [
        ("an empty Python call (the loop's lambda)", lambda: None),
        ("the hot path without Compiled.__call__", lambda: fn._run_torch(fn, tensors, 0, 0, z, None)),
        ("torch_bind.run, the path for any call", lambda: torch_bind.run(fn, tensors, 0, 0, z, None)),
        ("the inputs' signature, built and compared", lambda: [(x.dtype, x.shape, x.stride(), x.device),
                                                                (y.dtype, y.shape, y.stride(), y.device)] == l.signature),
        ("out='s signature, built and compared", lambda: (z.dtype, z.shape, z.stride(), z.device) == l.one_output),
        ("seed, offset, stream, rng_state packed", lambda: l.pack_varying(l.record, l.varying_offset, 0, 0, 0, 0)),
        ("three data_ptr() packed", lambda: l.pack_pointers(l.pointers, 0, x.data_ptr(), y.data_ptr(), z.data_ptr())),
        ("the no-op C launch through ctypes", lambda: launch(record)),
        ("the same C function without argtypes", lambda: no_op_launch_untyped(record)),
        ("t.data_ptr(), one tensor", lambda: x.data_ptr()),
        ("t.get_device(), one tensor", lambda: x.get_device()),
        ("t.shape, one tensor", lambda: x.shape),
        ("t.stride(), one tensor", lambda: x.stride()),
        ("t.is_contiguous(), one tensor", lambda: x.is_contiguous()),
    ]
    print(f"CPU-side host time per call, add_mul f32 {SHAPE[0]}x{SHAPE[1]}, torch {torch.__version__} "
          f"(C launch and stream query stubbed; not the GPU overhead)")
    print(f"  {'':<44} {'median':>8} {'lowest':>8}")
    print(f"  {'fn(x, y, out=z), the whole hot path':<44} {total[0]:8.0f} {total[1]:8.0f} ns")
    for label, f in parts:
        median, lowest = per_call_ns(f)
        print(f"  {label:<44} {median:8.0f} {lowest:8.0f} ns")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(20000):
            fn(x, y, out=z)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


def no_op_launch_untyped(address, _f=ctypes.CDLL(None).labs):
    return _f(address)


if __name__ == "__main__":
    main()
