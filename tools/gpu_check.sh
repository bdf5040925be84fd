#!/usr/bin/env bash
# One device call does it all (device machines keep nothing): run the GPU
# and compile test tiers, the acceptance benchmarks of docs/perf/ and the
# PyTorch comparison, writing logs under $OUT (default ./gpu-out).
#   tools/gpu_check.sh [tests|bench|torch|all]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
what=${1:-all}
bin=build/epifuse
status=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpu.txt"

if [[ $what == tests || $what == all ]]; then
  echo "== GPU and compile test tiers"
  build/epifuse_tests -ts="gpu*,compile,nvrtc,hiprtc" 2>&1 | tee "$out/tests.txt" | tail -25 || status=1
fi
if [[ $what == bench || $what == all ]]; then
  echo "== bias_gelu_dropout_add, p = 0.1, f32 and bf16 at [8*2048, 4096] and [16*2048, 8192]"
  # The bf16 variant is the example with every dtype replaced.
  sed -e 's/"f32"/"bf16"/g' examples/chains/bias_gelu_dropout_add.json > "$out/bias_gelu_dropout_add_bf16.json"
  for chain in examples/chains/bias_gelu_dropout_add.json "$out/bias_gelu_dropout_add_bf16.json"; do
    name=$(basename "$chain" .json)
    $bin bench "$chain" --shape 16384,4096 --shape 32768,8192 --min-of-copy 0.9 \
      --json > "$out/bench_$name.json" || status=1
    python3 tools/perf/summarize.py "$out/bench_$name.json" | tee "$out/bench_$name.txt"
  done
  echo "== add_mul (x + y) * alpha: 2^20 .. 2^28 elements"
  $bin bench examples/chains/add_mul.json --shape 1024,1024 --shape 4096,4096 --shape 16384,16384 \
    --min-of-copy 0.9 --json > "$out/bench_add_mul.json" || status=1
  python3 tools/perf/summarize.py "$out/bench_add_mul.json" | tee "$out/bench_add_mul.txt"
fi
if [[ $what == torch || $what == all ]]; then
  echo "== PyTorch eager and torch.compile vs epifuse"
  python3 tools/compare_torch.py examples/chains/bias_gelu_dropout_add.json --dtype f32 --dtype bf16 \
    --shape 16384,4096 --shape 32768,8192 --png "$out/compare_bgda.png" --json "$out/compare_bgda.json" \
    2>&1 | grep -v Warning | tail -8 || status=1
  python3 tools/compare_torch.py examples/chains/add_mul.json --shape 1024,1024 --shape 16384,16384 \
    --png "$out/compare_add_mul.png" --json "$out/compare_add_mul.json" 2>&1 | tail -5 || status=1
  # Dual GEMM: the gating layer at its three shapes, SwiGLU at decode shapes.
  python3 tools/compare_torch.py examples/chains/gating.json --dtype f16 --dtype bf16 --shape 1024,1024,1024 \
    --shape 4096,4096,4096 --shape 8192,8192,4096 --png "$out/compare_gating.png" \
    --json "$out/compare_gating.json" 2>&1 | grep -v -i warn | tail -40 || status=1
  python3 tools/compare_torch.py examples/chains/swiglu.json --dtype f16 --shape 16,11008,4096 \
    --shape 128,11008,4096 --png "$out/compare_swiglu.png" --json "$out/compare_swiglu.json" 2>&1 |
    grep -v -i warn | tail -20 || status=1
fi
exit $status
