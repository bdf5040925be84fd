#!/usr/bin/env python3
"""Host cost of one epifuse call from Python against the C++ launch (docs/perf/host.md,
"Python call overhead").

    EPIFUSE_LIBRARY=build/libepifuse_c.so PYTHONPATH=python python3 tools/perf/python_overhead.py build/epifuse

Times, on one small elementwise chain (add_mul, f32, 256 x 256: the GPU time is a
few microseconds, so the host side is what is measured): the C++ Jit::launch host
time that `epifuse bench` reports (the median of five bench processes); the Python
callable with `out=` and with outputs from torch.empty; the torch.library custom op;
torch's own `(x + y) * 0.5` (two eager ops) for scale; the op and torch's ops again on
inputs that require grad (the op as an eager call runs it, and through the registered
op); and the parts of the hot path
alone on this GPU host (ef_launch_record through ctypes with the record prepared, the
current-stream query, a tensor's metadata). Each Python row is the median of 21 rounds
of 200 back-to-back calls (fewer than the driver queue holds, as bench times the C++
launch). Last, the two bars: Python with out= at most 5 us over the C++ launch, the
C++ launch at most 3 us. With build/epifuse_launch_dry beside the binary, its dry
launch (the host's share without the driver) and its --gpu rows (the Jit's launch
against the driver's launch alone, on the default stream and on another) come too.
"""
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import epifuse
import epifuse.torch
from epifuse import torch_bind

ROOT = Path(__file__).resolve().parents[2]
CHAIN = ROOT / "examples" / "chains" / "add_mul.json"
SHAPE = (256, 256)


def host_us(fn, calls=200, rounds=21):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def cxx_launch_us(binary, runs=5):
    """`epifuse bench`'s host launch (the mean of 200 launches) in `runs` processes."""
    out = []
    for _ in range(runs):
        bench = subprocess.run([binary, "bench", str(CHAIN), "--shape", f"{SHAPE[0]},{SHAPE[1]}", "--no-sweep",
                                "--no-unfused", "--json"], capture_output=True, text=True, check=True)
        out.append(json.loads(bench.stdout)["results"][0]["host"]["launch_us"])
    return out


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "build" / "epifuse")
    cxx_runs = cxx_launch_us(binary)
    cxx = statistics.median(cxx_runs)
    x, y, z = (torch.randn(SHAPE, device="cuda") for _ in range(3))
    fn = epifuse.load(CHAIN).compile()
    op = epifuse.torch.op(epifuse.load(CHAIN))
    compiled = op.compiled

    @torch.library.custom_op("epifuse_overhead::add_mul", mutates_args=())
    def via_custom_op(inputs: list[torch.Tensor], seed: int, offset: int) -> list[torch.Tensor]:
        return [compiled(*inputs, seed=seed, offset=offset)]

    out_us = host_us(lambda: fn(x, y, out=z))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # the same call on a stream of torch's own: does the driver launch cost the same?
        side_us = host_us(lambda: fn(x, y, out=z))
    rows = [("C++ Jit::launch (epifuse bench)", cxx),
            ("Python callable fn(x, y)", host_us(lambda: fn(x, y))),
            ("Python callable fn(x, y, out=z)", out_us),
            ("the same on a side stream (torch.cuda.Stream)", side_us),
            ("epifuse.torch.op (torch.library.Library)", host_us(lambda: op(x, y))),
            ("the same through torch.library.custom_op", host_us(lambda: via_custom_op([x, y], 0, 0))),
            ("torch eager (x + y) * 0.5, two ops", host_us(lambda: (x + y) * 0.5))]
    # With inputs that require grad: the autograd formula's path (Note [Eager calls
    # skip the dispatcher]), as a training step calls it, and the registered op's.
    xg, yg = x.detach().requires_grad_(True), y.detach().requires_grad_(True)
    rows.append(("epifuse.torch.op, inputs requiring grad", host_us(lambda: op(xg, yg))))
    epifuse.torch.direct = False
    rows.append(("the same through the registered op", host_us(lambda: op(xg, yg))))
    epifuse.torch.direct = True
    rows.append(("torch eager (x + y) * 0.5, requiring grad", host_us(lambda: (xg + yg) * 0.5)))
    # The hot path's parts alone: the prepared record launched again as the last
    # call left it (x, y and z: valid pointers), and what the hot path asks torch.
    fn(x, y, out=z)
    launch, address = torch_bind._launch, fn._last_launch.address
    assert launch(address) == 0
    index = x.get_device()
    parts = [("ef_launch_record via ctypes, record prepared", host_us(lambda: launch(address))),
             ("torch._C._cuda_getCurrentRawStream(index)", host_us(lambda: torch_bind._raw_stream(index))),
             ("x.data_ptr()", host_us(lambda: x.data_ptr())),
             ("x.stride()", host_us(lambda: x.stride())),
             ("x.shape", host_us(lambda: x.shape)),
             ("x.device", host_us(lambda: x.device)),
             ("an empty lambda (each row's loop)", host_us(lambda: None))]
    print(f"host time per call, add_mul f32 {SHAPE[0]}x{SHAPE[1]} on {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}, Python {sys.version.split()[0]}")
    for label, us in rows:
        print(f"  {label:<46} {us:7.2f} us")
    print(f"  (the C++ launch in {len(cxx_runs)} bench processes: {', '.join(f'{u:.2f}' for u in cxx_runs)} us)")
    print("parts of the hot path, each alone:")
    for label, us in parts:
        print(f"  {label:<46} {us:7.2f} us")
    dry = Path(binary).parent / "epifuse_launch_dry"
    if dry.is_file():
        print("the C++ launch's host share without the driver (epifuse_launch_dry), then against the driver's "
              "launch alone (--gpu):")
        for flags in ([], ["--gpu"]):
            r = subprocess.run([str(dry), *flags], capture_output=True, text=True)
            print("\n".join("  " + line for line in (r.stdout + r.stderr).splitlines()))
    over = out_us - cxx
    print(f"C++ launch median {cxx:.2f} us, Python out= median {out_us:.2f} us, difference {over:+.2f} us; "
          f"without out= {rows[1][1] - cxx:+.2f} us; torch op {rows[4][1] - cxx:+.2f} us")
    print(f"bar: Python out= over C++ <= 5 us: {'met' if over <= 5 else 'NOT met'} ({over:.2f} us)")
    print(f"bar: C++ host launch median <= 3 us: {'met' if cxx <= 3 else 'NOT met'} ({cxx:.2f} us)")


if __name__ == "__main__":
    main()
