#!/usr/bin/env bash
# NVRTC cold compile times (docs/perf/host.md, "NVRTC cold compile": <= 150 ms on a 2-core
# build machine). Each run is a fresh `epifuse compile` process, so NVRTC is
# loaded and its first compile is cold; the chains take turns, so a burst of
# load on a shared machine lands on all of them alike.
#   [EPIFUSE_BIN=path/to/epifuse] tools/perf/compile_times.sh [RUNS]   (default 11)
set -u
cd "$(dirname "$0")/../.."
runs=${1:-11}
bin=${EPIFUSE_BIN:-build/epifuse}  # another binary, for a baseline
tmp=${TMPDIR:-/tmp}/compile_times; mkdir -p "$tmp"
sed -e 's/"f32"/"bf16"/g' examples/chains/bias_gelu_dropout_add.json > "$tmp/bgda_bf16.json"
names=("bias_gelu_dropout_add f32" "add_mul f32" "bias_gelu_dropout_add bf16 (vec 8)" "bias_gelu_dropout_add bf16 vec 16")
cmds=("examples/chains/bias_gelu_dropout_add.json --shape 16384,4096"
      "examples/chains/add_mul.json --shape 16384,16384"
      "$tmp/bgda_bf16.json --shape 16384,4096"
      "$tmp/bgda_bf16.json --shape 16384,4096 --vec 16")
declare -A times
for ((r = 0; r < runs; r++)); do
  for i in "${!cmds[@]}"; do
    # shellcheck disable=SC2086
    ms=$("$bin" compile ${cmds[$i]} --target sm_90a --json |
      python3 -c "import json, sys; print(round(json.load(sys.stdin)[0]['compile_ms']))")
    times[$i]="${times[$i]:-} $ms"
  done
done
echo "$bin: NVRTC cold compile, sm_90a, $runs fresh processes each, $(nproc) cores ($(uname -m)):"
for i in "${!cmds[@]}"; do
  python3 - "${names[$i]}" ${times[$i]} <<'PY'
import statistics, sys
name, xs = sys.argv[1], sorted(int(x) for x in sys.argv[2:])
print(f"  {name:<38} median {statistics.median(xs):5.0f} ms  min {xs[0]:4d}  max {xs[-1]:4d}   [{' '.join(map(str, xs))}]")
PY
done
