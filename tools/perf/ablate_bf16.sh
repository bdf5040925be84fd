#!/usr/bin/env bash
# Ablation of the bf16 bias-GELU-dropout-residual chain (docs/perf/elementwise.md): time
# the chain with stages left out, each against the same-run copy ceiling.
set -u
cd "$(dirname "$0")/../.."
tmp=${TMPDIR:-/tmp}/ablate; mkdir -p "$tmp"
mk() {  # name, chain steps
  cat > "$tmp/$1.json" <<JSON
{"epifuse": 1, "name": "$1", "inputs": {"x": {"dtype": "bf16"}, "bias": {"dtype": "bf16", "broadcast": "row"},
 "residual": {"dtype": "bf16"}}, "chain": [$2], "out": "bf16"}
JSON
}
mk copy_like '"residual"'
sed -i 's/"bias": {"dtype": "bf16", "broadcast": "row"},//' "$tmp/copy_like.json"
mk bias_res '"bias", "residual"'
mk gelu '"bias", "gelu_tanh", "residual"'
mk dropout '"bias", {"dropout": 0.1}, "residual"'
mk full '"bias", "gelu_tanh", {"dropout": 0.1}, "residual"'
mk full_triton '"bias", "gelu_tanh", {"op": "dropout", "p": 0.1, "rng": "triton"}, "residual"'
for c in copy_like bias_res gelu dropout full full_triton; do
  printf '%-12s ' $c
  build/epifuse bench "$tmp/$c.json" --shape 16384,4096 --no-sweep --no-unfused --json 2>/dev/null |
    python3 -c "import json,sys; r=json.load(sys.stdin)['results'][0]; print(f\"{r['fused']['tile']:>12} {r['fused']['ms']:.4f} ms {100*r['fused']['of_copy']:5.1f}% of copy  regs {r['fused']['registers']}\")"
done
