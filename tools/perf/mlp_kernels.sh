#!/usr/bin/env bash
# An MLP block's heaviest epifuse kernels alone, default tile against the tuned one
# (and cuBLASLt for the GEMMs), in bf16 as epifuse.nn builds them
# (python/epifuse/layers.py, the forwards with what their backward saves):
#   gpt:   fc1's GEMM with bias+GELU+dropout, and its backward's elementwise kernel
#          (dropout, GELU's derivative, the bias's column sum);
#   llama: the gate/up dual GEMM with SiLU·up, and the down projection with its residual.
#   tools/perf/mlp_kernels.sh [gpt|llama] [TOKENS,HIDDEN,FFN]
#                              (default gpt 16384,4096,16384; llama 16384,4096,11008)
# Needs a GPU, build/epifuse and the Python module (EPIFUSE_LIBRARY or build/).
set -euo pipefail
cd "$(dirname "$0")/../.."
block=${1:-gpt}
case $block in
  gpt) default_shape=16384,4096,16384 ;;
  llama) default_shape=16384,4096,11008 ;;
  *) echo "usage: tools/perf/mlp_kernels.sh [gpt|llama] [TOKENS,HIDDEN,FFN]" >&2; exit 2 ;;
esac
IFS=, read -r tokens hidden ffn <<< "${2:-$default_shape}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export EPIFUSE_LIBRARY=${EPIFUSE_LIBRARY:-$PWD/build/libepifuse_c.so} PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
python3 - "$dir" <<'PY'
import sys
from epifuse.layers import gated_chain, linear_chain
out = sys.argv[1]
fc1 = linear_chain("bf16", True, "gelu_tanh", 0.1)
open(f"{out}/fc1.json", "w").write(fc1.grad().forward.to_json())
open(f"{out}/fc1_backward.json", "w").write(fc1.grad().backward.to_json())
open(f"{out}/gate_up.json", "w").write(gated_chain("bf16", "silu", False).grad().forward.to_json())
open(f"{out}/down.json", "w").write(linear_chain("bf16", False, None, 0.0, True).to_json())
PY
bench() {  # name, chain, shape, then bench flags
  local name=$1 chain=$2 shape=$3
  shift 3
  echo "== $name, ${1:-tuned}: $shape"
  build/epifuse bench "$dir/$chain" --shape "$shape" --no-unfused --no-sweep "$@" 2>&1 | tail -7
}
for tune in --no-tune ""; do
  if [[ $block == gpt ]]; then
    bench "fc1 forward (y and the saved pre-activation)" fc1.json "$tokens,$ffn,$hidden" $tune
    bench "fc1 backward (elementwise)" fc1_backward.json "$tokens,$ffn" $tune
  else
    bench "gate/up dual GEMM (y and the saved gate and up)" gate_up.json "$tokens,$ffn,$hidden" $tune
    bench "down projection + residual" down.json "$tokens,$hidden,$ffn" $tune
  fi
done
