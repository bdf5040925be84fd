#!/usr/bin/env bash
# Row family against the same-run copy ceiling (the shapes of docs/perf/rows.md):
# M·N = 2^27 elements, N in {1024, 4096, 16384, 65536, 262144}, for softmax (bf16, f32),
# the attention pattern dropout(softmax(x*scale + mask)), add+RMSNorm (two outputs) and
# LayerNorm (bf16). Each line is one `epifuse bench --json` run (tuned tile, persistent
# grid and one-block-per-row grid); the summary is printed by tools/perf/summarize.py rows.
#   [EPIFUSE_BIN=build/epifuse] tools/perf/row_bench.sh [OUT.jsonl] [CHAINS...]
#   NS: the row lengths (default 1024 4096 16384 65536 262144)
#   CHAINS default: softmax_bf16 softmax_f32 attention_bf16 add_rmsnorm_bf16 layernorm_bf16
set -u
cd "$(dirname "$0")/../.."
bin=${EPIFUSE_BIN:-build/epifuse}
out=${1:-/dev/stdout}; shift || true
chains=("$@")
source tools/perf/row_chains.sh
((${#chains[@]})) || chains=("${row_chain_names[@]}")
tmp=${TMPDIR:-/tmp}/row_bench; mkdir -p "$tmp"
write_row_chains "$tmp"
: > "$tmp/out.jsonl"
for c in "${chains[@]}"; do
  for n in ${NS:-1024 4096 16384 65536 262144}; do
    m=$(((1 << 27) / n))
    echo "row_bench: $c M=$m N=$n" >&2
    line=$("$bin" bench "$tmp/$c.json" --shape "$m,$n" --no-sweep --no-unfused --repeats "${REPEATS:-20}" --json 2>"$tmp/err.txt")
    rc=$?
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]) if sys.argv[1] else {}; print(json.dumps({"chain":sys.argv[2],"n":int(sys.argv[3]),"rc":int(sys.argv[4]),"bench":d}))' \
      "$line" "$c" "$n" "$rc" >> "$tmp/out.jsonl" || tail -3 "$tmp/err.txt" >&2
  done
done
cat "$tmp/out.jsonl" > "$out"
