#!/usr/bin/env bash
# The GPU test tier in about five minutes: one test process per group of files, all
# at once on the one GPU (each file's cases are independent; the slow ones are the
# 4096^3 checks and the tile sweeps, which sit in different files).
#   tools/gpu_suite.sh [TESTS_BIN] [OUTDIR]     (default build/epifuse_tests, gpu-suite)
# Prints each group's doctest summary; exits non-zero if any group failed.
set -u
cd "$(dirname "$0")/.."
bin=${1:-build/epifuse_tests} out=${2:-gpu-suite}
mkdir -p "$out"
source tools/gpu_groups.sh
groups=("${gpu_groups[@]}")
pids=()
for i in "${!groups[@]}"; do
  "$bin" -ts="gpu*" -sf="${groups[$i]}" > "$out/group$i.txt" 2>&1 &
  pids+=($!)
done
status=0
for i in "${!groups[@]}"; do
  wait "${pids[$i]}" || status=1
  echo "${groups[$i]}: $(grep -E '^\[doctest\] (test cases|assertions)' "$out/group$i.txt" | tr -s ' ' | tr '\n' ' ')"
done
[[ $status == 0 ]] || grep -h -B2 -A8 "ERROR\|FATAL" "$out"/group*.txt | head -60
exit $status
