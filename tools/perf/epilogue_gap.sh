#!/usr/bin/env bash
# What the sm_90a GEMM epilogue's cost is made of (docs/perf/gemm.md,
# "Open"), in one GPU call:
#  1. SM clock and board power under a steady loop of each kernel: the GEMM alone,
#     bias+ReLU, bias+ReLU+dropout (epifuse bench with only the fused row, many
#     repeats) and cuBLAS (torch.matmul), sampled by nvidia-smi every 20 ms; the
#     median over the samples drawn under load (power above IDLE_W, default 150 W).
#  2. Where the warps stall, per SASS instruction, in the GEMM alone and in
#     bias+ReLU (tools/perf/ncu_hotspots.sh, clocks not locked).
#   tools/perf/epilogue_gap.sh BIN OUTDIR [M,N,K]     (default 4096^3, f16, default tile)
set -u
cd "$(dirname "$0")/../.."
bin=$1 out=$2 shape=${3:-4096,4096,4096}
mkdir -p "$out"
idle=${IDLE_W:-150}
py=${PYTHON:-/opt/torch/.venv/bin/python3}
m=${shape%%,*}; rest=${shape#*,}; n=${rest%%,*}; k=${rest#*,}

loaded() {  # median SM clock (MHz) and power (W) of the samples in $1 drawn above $idle W
  python3 - "$1" "$idle" <<'PY'
import statistics, sys
rows = []
for line in open(sys.argv[1]):
    try:
        mhz, w = (float(x) for x in line.split(","))
    except ValueError:
        continue
    if w > float(sys.argv[2]):
        rows.append((mhz, w))
if not rows:
    print("no samples under load")
else:
    print(f"{len(rows):4d} samples under load: SM clock {statistics.median(r[0] for r in rows):.0f} MHz, "
          f"power {statistics.median(r[1] for r in rows):.0f} W")
PY
}

steady() {  # name, command...: runs the command while sampling
  local name=$1; shift
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 20 > "$out/$name.csv" &
  local pid=$!
  "$@" > "$out/$name.log" 2>&1
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  echo "$name: $(loaded "$out/$name.csv")"
}

echo "== steady loops at $shape on $(nvidia-smi --query-gpu=name,power.limit --format=csv,noheader)"
for c in gemm gemm_bias_relu gemm_bias_relu_dropout; do
  steady "$c" "$bin" bench "examples/chains/$c.json" --shape "$shape" --no-tune --no-unfused --no-cublas --repeats 3000
done
steady cublas "$py" -c "
import torch
a = torch.randn($m, $k, device='cuda', dtype=torch.half); b = torch.randn($k, $n, device='cuda', dtype=torch.half)
for _ in range(15000): torch.matmul(a, b)
torch.cuda.synchronize()"

echo "== warp stalls (ncu, clocks not locked)"
tile=$("$bin" compile examples/chains/gemm.json --shape "$shape" --target sm_90a 2>/dev/null | grep -o 'tile=[^ ]*' | head -1)
tile=${tile#tile=}
for c in gemm gemm_bias_relu; do
  NCU_ARGS="--clock-control none" tools/perf/ncu_hotspots.sh "$bin" "examples/chains/$c.json" "$shape" "$tile" 25 "$out" \
    > "$out/stalls_$c.txt" 2>&1
  echo "-- $c ($tile): $out/stalls_$c.txt"; head -12 "$out/stalls_$c.txt"
done
