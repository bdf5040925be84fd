#!/usr/bin/env bash
# The stream-K probe of docs/stream-k.md, in one GPU call: for the GEMM alone and
# bias+GELU (bf16, B column-major as nn.Linear's weight) at the shapes whose last
# wave is mostly idle, the default tile's kernel and its stream-K variant
# (tools/perf/stream_k_variant.py) timed in turns by `epifuse bench --variant`,
# which also checks the variant's outputs against the kernel's, with cuBLAS and
# cuBLASLt's fused epilogue in the same process.
#   tools/perf/stream_k_probe.sh [OUTDIR] [M,N,K ...]
set -u
cd "$(dirname "$0")/../.."
out=${1:-stream_k_probe}
shift || true
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(3072,3072,3072 1536,6144,1536 768,3072,768 64,8192,4096 8192,8192,8192)
py=${PYTHON:-python3}
mkdir -p "$out"
cat > "$out/gemm.json" <<'JSON'
{"epifuse": 1, "name": "stream_k_gemm",
 "mainloop": {"kind": "gemm", "a": "bf16", "b": "bf16", "a_layout": "row", "b_layout": "col"},
 "inputs": {}, "ops": [], "outputs": {"y": {"dtype": "bf16", "value": "acc"}}, "shape": [1024, 1024, 1024]}
JSON
cat > "$out/bias_gelu.json" <<'JSON'
{"epifuse": 1, "name": "stream_k_bias_gelu",
 "mainloop": {"kind": "gemm", "a": "bf16", "b": "bf16", "a_layout": "row", "b_layout": "col"},
 "inputs": {"bias": {"dtype": "bf16", "broadcast": "row"}},
 "ops": [{"name": "z", "op": "add", "args": ["acc", "bias"]}, {"name": "y", "op": "gelu_tanh", "args": ["z"]}],
 "outputs": {"y": {"dtype": "bf16"}}, "shape": [1024, 1024, 1024]}
JSON
status=0
for chain in gemm bias_gelu; do
  for s in "${shapes[@]}"; do
    v="$out/$chain-${s//,/x}.cu"
    echo "== $chain $s"
    if ! "$py" tools/perf/stream_k_variant.py "$out/$chain.json" --shape "$s" -o "$v"; then
      status=1
      continue
    fi
    build/epifuse bench "$out/$chain.json" --shape "$s" --no-tune --variant "$v" --no-unfused --no-sweep \
      --repeats 20 2>&1 | tee "$out/$chain-${s//,/x}.txt" | grep -vE "^  *(compil|cuBLASLt 1)" || status=1
  done
done
exit $status
