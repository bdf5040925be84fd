# Sourced by row_bench.sh, row_tune.sh and row_ab.sh: the row family's benchmark chains
# (the shapes of docs/perf/rows.md), written into "$tmp" as <name>.json, and the default names.
# Also written, by name only: the norms' backward with their weight gradients (column sums),
# layernorm_backward_{bf16,f32} and add_rmsnorm_backward_{bf16,f32} (docs/perf/backward.md),
# hand-written, and layernorm_grad_{bf16,f32} and add_rmsnorm_grad_{bf16,f32}, the specs
# `epifuse grad` (and Python's Chain.grad()) makes of the forward chains, and
# add_rmsnorm_grad_once_{bf16,f32}, that spec with dresidual (dx again) left out as the
# torch op leaves it out: what users run.
row_chain_names=(softmax_bf16 softmax_f32 attention_bf16 add_rmsnorm_bf16 layernorm_bf16)
write_row_chains() {  # directory
  local ex=examples/chains
  cp $ex/softmax.json "$1/softmax_bf16.json"
  sed -e 's/"bf16"/"f32"/g' $ex/softmax.json > "$1/softmax_f32.json"
  cp $ex/scaled_masked_softmax_dropout.json "$1/attention_bf16.json"
  cp $ex/add_rmsnorm.json "$1/add_rmsnorm_bf16.json"
  cp $ex/layernorm.json "$1/layernorm_bf16.json"
  local c
  for c in layernorm add_rmsnorm; do
    cp examples/backward/${c}_backward.json "$1/${c}_backward_bf16.json"
    sed -e 's/"bf16"/"f32"/g' examples/backward/${c}_backward.json > "$1/${c}_backward_f32.json"
    sed -e 's/"bf16"/"f32"/g' $ex/$c.json > "$1/${c}_f32_forward.json"
    "${EPIFUSE_BIN:-build/epifuse}" grad $ex/$c.json --backward "$1/${c}_grad_bf16.json" > /dev/null &&
      "${EPIFUSE_BIN:-build/epifuse}" grad "$1/${c}_f32_forward.json" --backward "$1/${c}_grad_f32.json" > /dev/null ||
      echo "row_chains: ${c}_grad_* not written (no ${EPIFUSE_BIN:-build/epifuse}?)" >&2
  done
  local d
  for d in bf16 f32; do
    python3 -c 'import json, sys
doc = json.load(open(sys.argv[1])); del doc["outputs"]["dresidual"]; json.dump(doc, open(sys.argv[2], "w"), indent=1)' \
      "$1/add_rmsnorm_grad_$d.json" "$1/add_rmsnorm_grad_once_$d.json"
  done
}
