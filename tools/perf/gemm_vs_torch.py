#!/usr/bin/env python3
"""epifuse's fused GEMM chains against cuBLAS (through PyTorch) in one run.

For each shape (M,N,K) it times, with triton.testing.do_bench medians on the same GPU:
  cublas      torch.matmul alone (cuBLAS)
  eager       torch: a @ b + bias, relu, dropout(0.1) (separate kernels)
  epifuse     `epifuse bench --json` of examples/chains/gemm.json (no epilogue) and of
              gemm_bias_relu_dropout.json (the tuned tile; the median of its timed batches)
and prints TFLOP/s and the ratios to cuBLAS alone.

    python3 tools/perf/gemm_vs_torch.py build/epifuse 64,128,256 1024,1024,1024 4096,4096,4096 [--dtype=f32 ...]
"""
import json
import subprocess
import sys

import torch
import triton.testing


def epifuse_ms(binary, chain, shape, dtype):
    text = open(chain).read().replace('"f16"', f'"{dtype}"')
    path = f"/tmp/gemm_vs_torch_{dtype}_{chain.rsplit('/', 1)[-1]}"
    open(path, "w").write(text)
    out = subprocess.run([binary, "bench", path, "--shape", shape, "--no-sweep", "--no-unfused", "--json"],
                         capture_output=True, text=True)
    if out.returncode not in (0, 1):
        raise SystemExit(f"epifuse bench failed: {out.stderr}")
    r = json.loads(out.stdout)["results"][0]
    return r["fused"]["ms"], r["fused"]["tile"]


def main():
    binary = sys.argv[1]
    dtypes = [a.split("=", 1)[1] for a in sys.argv[2:] if a.startswith("--dtype=")] or ["f16", "bf16"]
    shapes = [a for a in sys.argv[2:] if not a.startswith("--")]
    torch.backends.cuda.matmul.allow_tf32 = False  # f32: exact fp32, as epifuse's default f32 path
    print(f"{'dtype':5} {'M,N,K':>16} {'cuBLAS':>10} {'eager+epi':>10} {'ef gemm':>10} {'ef fused':>10}"
          f" {'ef/cuBLAS':>10} {'fused/cuBLAS':>12} {'fused/gemm':>10}  tile (fused)")
    for dtype in dtypes:
        tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dtype]
        for shape in shapes:
            m, n, k = (int(v) for v in shape.split(","))
            a = torch.randn(m, k, device="cuda", dtype=tdt)
            b = torch.randn(k, n, device="cuda", dtype=tdt)
            bias = torch.randn(n, device="cuda", dtype=tdt)
            t_cublas = triton.testing.do_bench(lambda: a @ b, return_mode="median")
            t_eager = triton.testing.do_bench(
                lambda: torch.nn.functional.dropout(torch.relu(a @ b + bias), 0.1), return_mode="median")
            t_gemm, gtile = epifuse_ms(binary, "examples/chains/gemm.json", shape, dtype)
            t_fused, tile = epifuse_ms(binary, "examples/chains/gemm_bias_relu_dropout.json", shape, dtype)
            flops = 2.0 * m * n * k
            print(f"{dtype:5} {shape:>16} {t_cublas * 1e3:9.1f}u {t_eager * 1e3:9.1f}u {t_gemm * 1e3:9.1f}u"
                  f" {t_fused * 1e3:9.1f}u {t_cublas / t_gemm:10.2f} {t_cublas / t_fused:12.2f}"
                  f" {t_gemm / t_fused:10.2f}  {tile} (gemm {gtile})  ({flops / t_cublas / 1e9:.0f} / {flops / t_fused / 1e9:.0f} TFLOP/s)")


if __name__ == "__main__":
    main()
