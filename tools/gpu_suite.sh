#!/usr/bin/env bash
# The GPU test tier in about five minutes: one test process per group of tools/gpu_groups.sh
# (files, or a part of a slow file's test cases), all at once on the one GPU (each file's
# cases are independent; the slow ones are the 4096^3 checks and the tile sweeps, which
# sit in different groups).
#   tools/gpu_suite.sh [TESTS_BIN] [OUTDIR]     (default build/epifuse_tests, gpu-suite)
# Prints each group's doctest summary; exits non-zero if any group failed.
set -u
cd "$(dirname "$0")/.."
bin=${1:-build/epifuse_tests} out=${2:-gpu-suite}
mkdir -p "$out"
source tools/gpu_groups.sh
pids=()
for i in "${!gpu_groups[@]}"; do
  mapfile -t args < <(gpu_group_args "$i")
  "$bin" "${args[@]}" > "$out/group$i.txt" 2>&1 &
  pids+=($!)
done
status=0
for i in "${!gpu_groups[@]}"; do
  wait "${pids[$i]}" || status=1
  label=$(gpu_group_label "$i")
  echo "$label: $(grep -E '^\[doctest\] (test cases|assertions)' "$out/group$i.txt" | tr -s ' ' | tr '\n' ' ')"
done
[[ $status == 0 ]] || grep -h -B2 -A8 "ERROR\|FATAL" "$out"/group*.txt | head -60
exit $status
