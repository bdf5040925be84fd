#!/usr/bin/env bash
# Kernel versions side by side (docs/perf/README.md method: one change per version,
# each against the copy ceiling measured in the same process, all in one
# device call): for each epifuse binary given, bench the bias-GELU-
# dropout-residual chain in bf16 at both acceptance shapes and in f32 at one.
#   tools/perf/compare_binaries.sh build/variants/epifuse_A build/variants/epifuse_B ...
# EPIFUSE_NVRTC_OPTIONS passes through (e.g. -Ofc=min), so an option is a version too.
set -u
cd "$(dirname "$0")/../.."
tmp=${TMPDIR:-/tmp}/compare_binaries; mkdir -p "$tmp"
sed -e 's/"f32"/"bf16"/g' examples/chains/bias_gelu_dropout_add.json > "$tmp/bgda_bf16.json"
row() {  # binary, chain, shapes...
  local bin=$1 chain=$2; shift 2
  local args=(); for s in "$@"; do args+=(--shape "$s"); done
  "$bin" bench "$chain" "${args[@]}" --no-sweep --no-unfused --json 2>/dev/null |
    python3 -c "
import json, sys
for r in json.load(sys.stdin)['results']:
    f = r['fused']
    print(f\"  {r['dtype'] if 'dtype' in r else ''}{'x'.join(map(str, r['shape'])):>12} {f['tile']:>14} {f['ms']:.4f} ms {100 * f['of_copy']:6.1f}% of copy  regs {f.get('registers', '?')}  compile {r['host']['compile_ms']:.0f} ms  launch {r['host']['launch_us']:.2f} us  hit {r['host']['hit_us']:.2f} us\")"
}
for bin in "$@"; do
  echo "== $bin ${EPIFUSE_NVRTC_OPTIONS:+(EPIFUSE_NVRTC_OPTIONS=$EPIFUSE_NVRTC_OPTIONS)}"
  echo " bf16"; row "$bin" "$tmp/bgda_bf16.json" 16384,4096 32768,8192
  echo " f32";  row "$bin" examples/chains/bias_gelu_dropout_add.json 16384,4096
done
