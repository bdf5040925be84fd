#!/usr/bin/env bash
# Every row-family candidate timed in one process per shape (`epifuse tune --json`),
# for the same chains and shapes as row_bench.sh: the same-run A/B of tile features
# (keep, clusters, rings), summarised by tools/perf/row_tune_summary.py
# (with the default tile of each shape, as `epifuse compile` resolves it).
#   [EPIFUSE_BIN=build/epifuse] tools/perf/row_tune.sh OUT_DIR [CHAINS...]
#   NS: the row lengths (default 1024 4096 16384 65536 262144)
set -u
cd "$(dirname "$0")/../.."
bin=${EPIFUSE_BIN:-build/epifuse}
out=${1:?usage: row_tune.sh OUT_DIR [CHAINS...]}; shift
mkdir -p "$out"
chains=("$@")
source tools/perf/row_chains.sh
((${#chains[@]})) || chains=("${row_chain_names[@]}")
tmp=${TMPDIR:-/tmp}/row_tune; mkdir -p "$tmp"
write_row_chains "$tmp"
for c in "${chains[@]}"; do
  for n in ${NS:-1024 4096 16384 65536 262144}; do
    m=$(((1 << 27) / n))
    echo "row_tune: $c M=$m N=$n" >&2
    "$bin" tune "$tmp/$c.json" --shape "$m,$n" --json > "$out/tune_${c}_${n}.json" 2> "$tmp/err.txt" || tail -3 "$tmp/err.txt" >&2
    # the tile an untuned call takes, for the summary's default column (no disk
    # cache: the tune just stored its choice there)
    EPIFUSE_CACHE=0 "$bin" compile "$tmp/$c.json" --shape "$m,$n" 2>&1 | grep -o 'tile=[^ ]*' | cut -d= -f2 > "$out/default_${c}_${n}.txt"
  done
done
