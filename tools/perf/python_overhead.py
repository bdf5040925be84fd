#!/usr/bin/env python3
"""Host cost of one epifuse call from Python against the C++ launch (docs/perf/host.md,
"Python call overhead").

    python3 tools/perf/python_overhead.py build/epifuse

Times, on one small elementwise chain (add_mul, f32, 256 x 256: the GPU time is a
few microseconds, so the host side is what is measured): the C++ Jit::launch host
time that `epifuse bench` reports; the Python callable (shapes seen before, outputs
from torch.empty); the torch.library custom op; and torch's own `(x + y) * 0.5` (two
eager ops) for scale. Each is the median of 21 rounds of 200 back-to-back calls
(fewer than the driver queue holds, as bench times the C++ launch).
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


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "build" / "epifuse")
    bench = subprocess.run([binary, "bench", str(CHAIN), "--shape", f"{SHAPE[0]},{SHAPE[1]}", "--no-sweep",
                            "--no-unfused", "--json"], capture_output=True, text=True, check=True)
    cxx = json.loads(bench.stdout)["results"][0]["host"]["launch_us"]
    x, y, z = (torch.randn(SHAPE, device="cuda") for _ in range(3))
    fn = epifuse.load(CHAIN).compile()
    op = epifuse.torch.op(epifuse.load(CHAIN))
    compiled = op.compiled

    @torch.library.custom_op("epifuse_overhead::add_mul", mutates_args=())
    def via_custom_op(inputs: list[torch.Tensor], seed: int, offset: int) -> list[torch.Tensor]:
        return [compiled(*inputs, seed=seed, offset=offset)]

    rows = [("C++ Jit::launch (epifuse bench)", cxx),
            ("Python callable fn(x, y)", host_us(lambda: fn(x, y))),
            ("Python callable fn(x, y, out=z)", host_us(lambda: fn(x, y, out=z))),
            ("epifuse.torch.op (torch.library.Library)", host_us(lambda: op(x, y))),
            ("the same through torch.library.custom_op", host_us(lambda: via_custom_op([x, y], 0, 0))),
            ("torch eager (x + y) * 0.5, two ops", host_us(lambda: (x + y) * 0.5))]
    print(f"host time per call, add_mul f32 {SHAPE[0]}x{SHAPE[1]} on {torch.cuda.get_device_name()}")
    for label, us in rows:
        print(f"  {label:<40} {us:7.2f} us")
    print(f"  Python over C++: {rows[1][1] - cxx:+.2f} us, with out= {rows[2][1] - cxx:+.2f} us (bar <= 10 us); "
          f"torch op over C++: {rows[3][1] - cxx:+.2f} us")


if __name__ == "__main__":
    main()
