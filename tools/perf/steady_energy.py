"""Time and energy per call in steady state at the power limit: epifuse's fused GEMM
chain on named tiles (the Python module) against cuBLAS (torch.matmul), in one process.

At the 700 W limit of an H100 a kernel's time follows its energy per call, so short
bursts (the bench, the tuner) and sustained runs can rank kernels differently
(docs/perf/gemm.md and docs/perf/dual-gemm.md, steady state at the power limit). Each
row runs back to back for --seconds, the rows taking turns over --rounds; the median
round is reported with the energy per call (NVML's energy counter), the mean power and
the mean SM clock (NVML, sampled at the start and end of each loop and in between by a
thread).

    python3 tools/perf/steady_energy.py CHAIN --shape M,N,K [--dtype f16] \
        [--tile T ...] [--seconds 2] [--rounds 3]

Dual GEMM chains get the row "cuBLAS two GEMMs" (torch.matmul twice) and "cuBLAS one
GEMM of 2N" (the packed-weight form, the same FLOPs in one call); single GEMM chains
"cuBLAS GEMM". Needs torch, the Python module (python/, EPIFUSE_LIBRARY) and
libnvidia-ml.so.1.
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from torch_chains import load_chain, mainloop_of  # noqa: E402
from compare_torch_gemm import make_gemm_tensors  # noqa: E402


class Nvml:
    """The three NVML calls this needs, through ctypes (no pynvml on the GPU machine)."""

    def __init__(self, index=0):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise RuntimeError("nvmlInit_v2 failed")
        self.dev = ctypes.c_void_p()
        if self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.dev)) != 0:
            raise RuntimeError("nvmlDeviceGetHandleByIndex_v2 failed")

    def energy_mj(self):
        v = ctypes.c_ulonglong()
        self.lib.nvmlDeviceGetTotalEnergyConsumption(self.dev, ctypes.byref(v))
        return v.value

    def sm_clock_mhz(self):
        v = ctypes.c_uint()
        self.lib.nvmlDeviceGetClockInfo(self.dev, 1, ctypes.byref(v))  # NVML_CLOCK_SM
        return v.value


def steady(fn, seconds, nvml):
    """(ms per call, mJ per call, mean W, mean SM MHz) over a loop of about `seconds`."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    per = max((time.perf_counter() - t0) / 3, 1e-5)
    calls = max(int(seconds / per), 10)
    clocks, stop = [], threading.Event()

    def sample():
        while not stop.wait(0.02):
            clocks.append(nvml.sm_clock_mhz())

    sampler = threading.Thread(target=sample)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    sampler.start()
    e0 = nvml.energy_mj()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    e1 = nvml.energy_mj()
    stop.set()
    sampler.join()
    ms = start.elapsed_time(end)
    # the energy counter also covers the host's tail after the last kernel: small against seconds
    return ms / calls, (e1 - e0) / calls, (e1 - e0) / ms, statistics.mean(clocks) if clocks else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("chain")
    ap.add_argument("--shape", required=True, help="M,N,K")
    ap.add_argument("--dtype", help="override every dtype: f16, bf16, f32")
    ap.add_argument("--tile", action="append", default=[], help="fused tile to run (repeatable); none: the default")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="save the numbers here")
    args = ap.parse_args()

    import epifuse
    doc = load_chain(args.chain, args.dtype)
    m, n, k = (int(v) for v in args.shape.split(","))
    ml = mainloop_of(doc)
    dual = ml["kind"] == "dual_gemm"
    torch.backends.cuda.matmul.allow_tf32 = ml.get("math") == "tf32"
    flops = (4.0 if dual else 2.0) * m * n * k
    t = make_gemm_tensors(doc, m, n, k)
    rows = []  # (label, fn)
    if dual:
        rows.append(("cuBLAS two GEMMs", lambda: (torch.matmul(t["a"], t["b0"]), torch.matmul(t["a"], t["b1"]))))
        bcat = torch.cat([t["b0"], t["b1"]], dim=1).contiguous() if ml["b_layout"] == "row" else \
            torch.cat([t["b0"].t(), t["b1"].t()], dim=0).contiguous().t()
        rows.append(("cuBLAS one GEMM of 2N", lambda: torch.matmul(t["a"], bcat)))
    else:
        rows.append(("cuBLAS GEMM", lambda: torch.matmul(t["a"], t["b"])))
    for tile in args.tile or [None]:
        fused = epifuse.Chain.from_json(json.dumps(doc)).compile(tile=tile)
        inputs = [t[name] for name in fused.input_names]
        out = fused(*inputs, seed=1)
        rows.append((f"epifuse {tile or 'default tile'}",
                     (lambda f, x, o: lambda: f(*x, seed=1, out=o))(fused, inputs, out)))
    nvml = Nvml(torch.cuda.current_device())
    results = {label: [] for label, _ in rows}
    for r in range(args.rounds):
        for label, fn in rows:
            results[label].append(steady(fn, args.seconds, nvml))
        print(f"round {r + 1} of {args.rounds} done", file=sys.stderr)
    base = statistics.median(v[0] for v in results[rows[0][0]])
    print(f"{args.chain} {ml['a']} M,N,K={m},{n},{k} on {torch.cuda.get_device_name()}: steady loops of "
          f"{args.seconds} s, median of {args.rounds} rounds in turns")
    print(f"  {'row':34s} {'ms':>8s} {'TFLOP/s':>8s} {'/first':>7s} {'mJ/call':>8s} {'W':>6s} {'MHz':>6s} "
          f"{'GFLOP/J':>8s}")
    saved = []
    for label, _ in rows:
        v = results[label]
        ms, mj, w, mhz = (statistics.median(x[i] for x in v) for i in range(4))
        print(f"  {label:34s} {ms:8.4f} {flops / ms / 1e9:8.1f} {ms / base:6.3f}x {mj:8.2f} {w:6.0f} {mhz:6.0f} "
              f"{flops / mj / 1e6:8.1f}")
        saved.append({"row": label, "ms": ms, "mj": mj, "watts": w, "mhz": mhz, "rounds": v})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"chain": args.chain, "shape": [m, n, k], "dtype": ml["a"], "rows": saved}, f, indent=1)


if __name__ == "__main__":
    main()
