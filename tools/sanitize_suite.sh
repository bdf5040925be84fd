#!/usr/bin/env bash
# The whole GPU test tier under compute-sanitizer: memcheck and racecheck, each over
# the same groups of test files as tools/gpu_suite.sh, all at once on the one GPU.
# Every test case runs except the four whose point is a large shape: "gemm: 4096^3
# checked on sampled rows" (a 137 GFLOP product), "gemm col_sum: 4096^2 dgrad ..."
# (its kernel's tile runs at small shapes in the candidate sweep), "gemm col_sum sm90:
# more than 256 row tiles ..." (each wgmma candidate over 65800 rows; the same kernels
# run at small shapes, and at that shape in the two-launch case) and the row family's tile sweep over
# rows of 65536 and 262144 elements (its rows up to 20000 are a case of their own, and
# run): each takes longer than a device call under racecheck, and their kernels and
# tiles also run at small shapes in the other cases. The tile sweeps, masks, edges and
# misaligned pointers are the small-shape cases this checks. tools/sanitize_wgmma.sh
# adds each wgmma tile through the CLI.
#   tools/sanitize_suite.sh [TESTS_BIN] [OUTDIR]   (default build/epifuse_tests, sanitize-suite)
#   TOOLS="memcheck racecheck" (default), LIMIT=seconds per process (default 540),
#   ONLY="0 4" (indices into tools/gpu_groups.sh's list; default all), SPLIT=1 (a process per
#   test case, JOBS at once)
# Prints one line per (tool, group): the doctest summary and the sanitizer's own
# summary; exits non-zero if a test failed, a process timed out, or the sanitizer
# reported an error or a hazard.
set -u
cd "$(dirname "$0")/.."
bin=${1:-build/epifuse_tests} out=${2:-sanitize-suite}
tools=${TOOLS:-"memcheck racecheck"} limit=${LIMIT:-540}
mkdir -p "$out"
command -v compute-sanitizer >/dev/null || { echo "sanitize_suite: compute-sanitizer not found" >&2; exit 1; }
source tools/gpu_groups.sh
exclude="gemm: 4096^3 checked on sampled rows*,gemm col_sum: 4096^2*,gemm col_sum sm90: more than 256 row tiles*,*bit-equal to one block per row (long rows)"
picked=(${ONLY:-${!gpu_groups[@]}})
# One process per group, or with SPLIT=1 one per test case (at most JOBS at once,
# default 12): racecheck over the row family's tile sweep runs longer than a
# device call in one process.
run_one() {  # TOOL DOCTEST-ARGS... > log: the sanitizer's exit status, 124 on a timeout
  local tool=$1; shift
  # --report-api-errors no: "driver: errors name the call" provokes driver errors on
  # purpose (a 2^60-byte allocation, a junk module, a missing symbol); device-side
  # errors and hazards are what is checked.
  timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 --report-api-errors no \
    "$bin" "$@"
}
jobs_=() pids=()  # "tool|label|log" and the process id of each process, in order
for tool in $tools; do
  for i in "${picked[@]}"; do
    mapfile -t args < <(gpu_group_args "$i" "$exclude")
    label=$(gpu_group_label "$i")
    if [[ ${SPLIT:-0} == 1 ]]; then
      while IFS= read -r name; do
        # doctest filters split at commas: a comma in a name becomes the '?' wildcard.
        n=${#jobs_[@]}
        while (( $(jobs -rp | wc -l) >= ${JOBS:-12} )); do sleep 1; done
        run_one "$tool" -ts="gpu*" -sf="${gpu_groups[$i]}" -tc="${name//,/?}" > "$out/$tool.case$n.txt" 2>&1 &
        pids[$n]=$!
        jobs_+=("$tool|$name|$out/$tool.case$n.txt")
      done < <("$bin" "${args[@]}" -ltc | sed -n '/^=====/,/^=====/p' | grep -v '^=====')
    else
      n=${#jobs_[@]}
      run_one "$tool" "${args[@]}" > "$out/$tool.group$i.txt" 2>&1 &
      pids[$n]=$!
      jobs_+=("$tool|$label|$out/$tool.group$i.txt")
    fi
  done
done
status=0
for n in "${!jobs_[@]}"; do
  IFS='|' read -r tool label f <<<"${jobs_[$n]}"
  wait "${pids[$n]}"; rc=$?
  cases=$(grep -E '^\[doctest\] test cases' "$f" | tr -s ' ' | sed 's/^\[doctest\] //')
  summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tail -1 | sed 's/^========= //')
  verdict=ok
  ((rc == 124)) && verdict="TIMED OUT after ${limit} s"
  ((rc != 0 && rc != 124)) && verdict="FAILED (exit $rc)"
  [[ $verdict == ok ]] || status=1
  echo "$tool $label: $verdict | ${cases:-no doctest summary} | ${summary:-no sanitizer summary}"
done
if [[ $status != 0 ]]; then
  grep -h -A6 -E '^========= (Invalid|Error|Race|.*[Hh]azard)|ERROR: ' "$out"/*.txt | head -60
fi
exit $status
