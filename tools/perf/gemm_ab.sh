#!/usr/bin/env bash
# GEMM epilogue versions side by side (docs/PERF.md: one change per version,
# each against cuBLAS measured in the same process, rounds interleaved so
# that clocks and neighbours drift over both): for each epifuse binary given,
# `epifuse bench --no-tune` (the default tile, the same for every binary) of
# CHAINS (default: GEMM alone, bias+ReLU, bias+ReLU+dropout, bias+GELU) in
# DTYPES (default f16 bf16) at SHAPES (default 4096 and 8192 cubed), ROUNDS
# times (default 2). Prints time / cuBLAS GEMM alone of the fused kernel (and
# of the kernel with dropout removed, where the chain has dropout).
#   tools/perf/gemm_ab.sh gpubin/epifuse_old gpubin/epifuse_new
# Each binary runs in its own process, so cuBLAS and the clocks move between them
# (+-3% at 4096^3). Where the change is the kernel's source alone (the same
# parameters), `epifuse bench --no-tune --variant new.cu` (docs/bench.md) times
# both in one process instead; this script is for changes that cannot be.
set -u
cd "$(dirname "$0")/../.."
tmp=${TMPDIR:-/tmp}/gemm_ab; mkdir -p "$tmp"
CHAINS=${CHAINS:-"gemm gemm_bias_relu gemm_bias_relu_dropout gemm_bias_gelu"}
DTYPES=${DTYPES:-"f16 bf16"}
SHAPES=${SHAPES:-"4096,4096,4096 8192,8192,8192"}
ROUNDS=${ROUNDS:-2}
# bias+GELU: the bias+ReLU chain with its activation swapped (cuBLASLt has GELU_BIAS).
sed -e 's/"relu"/"gelu_tanh"/' examples/chains/gemm_bias_relu.json > "$tmp/gemm_bias_gelu.json"
for c in $CHAINS; do
  src=examples/chains/$c.json; [[ -f $src ]] || src=$tmp/$c.json
  for d in $DTYPES; do sed -e "s/\"f16\"/\"$d\"/g" "$src" > "$tmp/${c}_$d.json"; done
done
for r in $(seq "$ROUNDS"); do
  for c in $CHAINS; do for d in $DTYPES; do for s in $SHAPES; do
    line="$c $d ${s%%,*} r$r"
    for bin in "$@"; do
      out=$("$bin" bench "$tmp/${c}_$d.json" --shape "$s" --no-tune --no-unfused 2>/dev/null)
      fused=$(awk '$1 == "fused" && NF >= 4 {print $4}' <<<"$out")
      nodrop=$(awk '/dropout removed/ {print $6}' <<<"$out")
      lt=$(awk '/cuBLASLt epilogue/ {for (i = 3; i <= NF; ++i) if ($i ~ /^[0-9.]+x$/) {print $i; exit}}' <<<"$out")
      line+=" | $(basename "$bin") fused=${fused:-?}${nodrop:+ no_dropout=$nodrop}${lt:+ cublaslt=$lt}"
    done
    echo "$line"
  done; done; done
done
