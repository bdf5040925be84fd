#!/usr/bin/env bash
# GEMM epilogue versions side by side (docs/perf/README.md: one change per version,
# each against cuBLAS measured in the same process). Three modes:
#
#   tools/perf/gemm_ab.sh BIN_A BIN_B ...
#       each binary's `epifuse bench --no-tune` in turn (rounds interleaved);
#       every binary is its own process, so cuBLAS and the clocks move between
#       them (+-3% at 4096^3): for changes that alter the kernel's parameters.
#   tools/perf/gemm_ab.sh --emit DIR NEW_BIN          (build machine, no GPU)
#       writes the chains and NEW_BIN's kernel for each (chain, dtype, shape)
#       at the default sm_90a tile into DIR;
#   tools/perf/gemm_ab.sh --variants DIR BASE_BIN     (GPU machine)
#       BASE_BIN's bench of each with DIR's kernel as `--variant` (docs/bench.md):
#       both versions take turns in one process, and the variant's output is
#       checked against the base's. For changes to the kernel's source alone.
#
# CHAINS (default: GEMM alone, bias+ReLU, bias+ReLU+dropout, bias+GELU), DTYPES
# (f16 bf16), SHAPES (4096 and 8192 cubed), ROUNDS (2). Prints time / cuBLAS GEMM
# alone of the fused kernel (and of the kernel with dropout removed, and
# cuBLASLt's epilogue, where the chain has them).
set -u
cd "$(dirname "$0")/../.."
CHAINS=${CHAINS:-"gemm gemm_bias_relu gemm_bias_relu_dropout gemm_bias_gelu"}
DTYPES=${DTYPES:-"f16 bf16"}
SHAPES=${SHAPES:-"4096,4096,4096 8192,8192,8192"}
ROUNDS=${ROUNDS:-2}

# The chains in each dtype, into $1. bias+GELU: the bias+ReLU chain with its
# activation swapped (cuBLASLt has GELU_BIAS).
write_chains() {
  mkdir -p "$1"
  sed -e 's/"relu"/"gelu_tanh"/' examples/chains/gemm_bias_relu.json > "$1/gemm_bias_gelu.json"
  for c in $CHAINS; do
    local src=examples/chains/$c.json; [[ -f $src ]] || src=$1/$c.json
    for d in $DTYPES; do sed -e "s/\"f16\"/\"$d\"/g" "$src" > "$1/${c}_$d.json"; done
  done
}

ratio() {  # a row's time / cuBLAS in a bench's text output ($1), by its label's first words ($2)
  awk -v l="$2" 'index($0, "  " l " ") == 1 || index($0, "  " l "  ") == 1 {
    for (i = 2; i <= NF; ++i) if ($i ~ /^[0-9.]+x$/) {print $i; exit}}' <<<"$1"
}

summary() {  # the ratios of one bench's output
  local out=$1 s
  s="fused=$(ratio "$out" fused)"
  local nodrop lt
  nodrop=$(ratio "$out" "fused, dropout removed"); lt=$(ratio "$out" "cuBLASLt epilogue")
  [[ -n $nodrop ]] && s+=" no_dropout=$nodrop"
  [[ -n $lt ]] && s+=" cublaslt=$lt"
  echo "$s"
}

case "${1:-}" in
  --emit)
    dir=$2 bin=$3
    write_chains "$dir/chains"
    for c in $CHAINS; do for d in $DTYPES; do for s in $SHAPES; do
      "$bin" emit "$dir/chains/${c}_$d.json" --shape "$s" --target sm_90a --standalone > "$dir/${c}_${d}_${s%%,*}.cu" || exit 1
    done; done; done
    echo "gemm_ab: $(ls "$dir"/*.cu | wc -l) kernels of $bin in $dir"
    ;;
  --variants)
    dir=$2 bin=$3
    for r in $(seq "$ROUNDS"); do
      for c in $CHAINS; do for d in $DTYPES; do for s in $SHAPES; do
        v=$dir/${c}_${d}_${s%%,*}.cu
        out=$("$bin" bench "$dir/chains/${c}_$d.json" --shape "$s" --no-tune --no-unfused --variant "$v" 2>&1)
        echo "$c $d ${s%%,*} r$r | base $(summary "$out") | variant=$(ratio "$out" "variant $(basename "$v")")" \
             "| $(grep -o 'check variant.*' <<<"$out" | head -1)$(grep -o 'variant [^ ]*: .*' <<<"$out" | head -1)"
      done; done; done
    done
    ;;
  *)
    tmp=${TMPDIR:-/tmp}/gemm_ab
    write_chains "$tmp"
    for r in $(seq "$ROUNDS"); do
      for c in $CHAINS; do for d in $DTYPES; do for s in $SHAPES; do
        line="$c $d ${s%%,*} r$r"
        for bin in "$@"; do
          out=$("$bin" bench "$tmp/${c}_$d.json" --shape "$s" --no-tune --no-unfused 2>/dev/null)
          line+=" | $(basename "$bin") $(summary "$out")"
        done
        echo "$line"
      done; done; done
    done
    ;;
esac
