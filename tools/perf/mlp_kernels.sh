#!/usr/bin/env bash
# The GPT MLP block's two heaviest epifuse kernels alone, default tile against the
# tuned one (and cuBLASLt for the GEMM): fc1's forward GEMM with bias+GELU+dropout
# and its backward's elementwise kernel (dropout, GELU's derivative, the bias's
# column sum), in bf16 as epifuse.nn.MLP builds them (python/epifuse/layers.py).
#   tools/perf/mlp_kernels.sh [TOKENS,HIDDEN,FFN]      (default 16384,4096,16384)
# Needs a GPU, build/epifuse and the Python module (EPIFUSE_LIBRARY or build/).
set -euo pipefail
cd "$(dirname "$0")/../.."
IFS=, read -r tokens hidden ffn <<< "${1:-16384,4096,16384}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export EPIFUSE_LIBRARY=${EPIFUSE_LIBRARY:-$PWD/build/libepifuse_c.so} PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
python3 - "$dir" <<'PY'
import sys
from epifuse.layers import linear_chain
c = linear_chain("bf16", True, "gelu_tanh", 0.1)
open(f"{sys.argv[1]}/fc1.json", "w").write(c.to_json())
open(f"{sys.argv[1]}/fc1_backward.json", "w").write(c.grad().backward.to_json())
PY
for tune in --no-tune ""; do
  echo "== fc1 forward, ${tune:-tuned}: M,N,K = $tokens,$ffn,$hidden"
  build/epifuse bench "$dir/fc1.json" --shape "$tokens,$ffn,$hidden" --no-unfused --no-sweep $tune 2>&1 | tail -6
  echo "== fc1 backward (elementwise), ${tune:-tuned}: M,N = $tokens,$ffn"
  build/epifuse bench "$dir/fc1_backward.json" --shape "$tokens,$ffn" --no-unfused --no-sweep $tune 2>&1 | tail -6
done
