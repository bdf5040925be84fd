#!/usr/bin/env bash
# Builds the libFuzzer target over the JSON front end, validation and emission
# (tests/fuzz/fuzz_chain.cpp; docs/fuzzing.md) with clang in build-fuzz/, runs
# every saved crash under tests/fuzz/regressions/ once, then fuzzes for SECONDS
# (default 60) from a seed corpus, copied into a temporary working corpus: the
# example chains examples/chains/*.json, the must-fail inputs
# tests/errors/**/*.json, the valid chains of tests/fuzz/seeds/ (the corners
# the examples miss) and the regression inputs.
#
# Exits non-zero when an input crashes (an InternalError, any exception other
# than UserError, a sanitizer report, a leak, a hang past 10 s); the input is
# kept under build-fuzz/artifacts/ and the log in build-fuzz/fuzz.log. Prints
# the number of executions at the end.
#
# Usage: tools/fuzz.sh [SECONDS]
# Environment: FUZZ_BUILD_DIR (default: build-fuzz), JOBS (parallel build jobs,
#              default: the number of CPUs), FUZZ_WORKERS (fuzzing processes run
#              side by side, each for SECONDS; default 1).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
FUZZ_WORKERS=${FUZZ_WORKERS:-1}
SECONDS_TO_RUN=${1:-60}
if ! [[ $SECONDS_TO_RUN =~ ^[0-9]+$ && $SECONDS_TO_RUN -gt 0 ]]; then
  echo "usage: tools/fuzz.sh [SECONDS] (a positive integer, default 60)" >&2
  exit 2
fi
if ! [[ $FUZZ_WORKERS =~ ^[0-9]+$ && $FUZZ_WORKERS -gt 0 ]]; then
  echo "fuzz: FUZZ_WORKERS must be a positive integer, got '$FUZZ_WORKERS'" >&2
  exit 2
fi
for tool in clang clang++; do
  if ! command -v "$tool" >/dev/null; then
    echo "fuzz: $tool not found; tools/setup.sh installs it (Debian: clang libclang-rt-dev)" >&2
    exit 1
  fi
done

echo "fuzz: building epifuse_fuzz_chain in ${FUZZ_BUILD_DIR#"$ROOT"/} (clang, ASan+UBSan, $JOBS jobs)"
CC=clang CXX=clang++ cmake -S "$ROOT" -B "$FUZZ_BUILD_DIR" -DEPIFUSE_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$FUZZ_BUILD_DIR" --target epifuse_fuzz_chain -j "$JOBS"
FUZZER=$FUZZ_BUILD_DIR/epifuse_fuzz_chain
ARTIFACTS=$FUZZ_BUILD_DIR/artifacts
LOG=$FUZZ_BUILD_DIR/fuzz.log
mkdir -p "$ARTIFACTS"

# Every input that once crashed, run once (README.md is not an input).
mapfile -t regressions < <(find "$ROOT/tests/fuzz/regressions" -type f ! -name README.md | sort)
if ((${#regressions[@]} > 0)); then
  echo "fuzz: running ${#regressions[@]} regression input(s) from tests/fuzz/regressions/"
  if ! "$FUZZER" -artifact_prefix="$ARTIFACTS/" "${regressions[@]}" >"$LOG" 2>&1; then
    tail -n 60 "$LOG"
    echo "fuzz: FAILED: a regression input crashes again (log: ${LOG#"$ROOT"/})" >&2
    exit 1
  fi
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/epifuse-fuzz.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/corpus"
# Seeds named after their path (tests/errors/x.json -> tests_errors_x.json): no collisions.
while IFS= read -r -d '' seed; do
  rel=${seed#"$ROOT"/}
  cp "$seed" "$WORK/corpus/${rel//\//_}"
done < <(find "$ROOT/examples/chains" "$ROOT/tests/errors" "$ROOT/tests/fuzz/seeds" -type f -name '*.json' -print0)
for r in "${regressions[@]}"; do cp "$r" "$WORK/corpus/regression_$(basename "$r")"; done
echo "fuzz: $(find "$WORK/corpus" -type f | wc -l) seed inputs; fuzzing for ${SECONDS_TO_RUN} s" \
     "with $FUZZ_WORKERS worker(s) (log: ${LOG#"$ROOT"/})"

args=(-dict="$ROOT/tests/fuzz/chain.dict" -max_total_time="$SECONDS_TO_RUN" -timeout=10
      -print_final_stats=1 -artifact_prefix="$ARTIFACTS/" "$WORK/corpus")
status=0
start=$(date +%s)
if ((FUZZ_WORKERS == 1)); then
  "$FUZZER" "${args[@]}" >"$LOG" 2>&1 || status=$?
else
  # -jobs runs that many whole fuzzing sessions (each for SECONDS), -workers at
  # once, sharing the corpus; each writes fuzz-N.log in the cwd, which the
  # parent prints when the job exits (so every job's stats reach $LOG once).
  (cd "$WORK" && "$FUZZER" -jobs="$FUZZ_WORKERS" -workers="$FUZZ_WORKERS" "${args[@]}") >"$LOG" 2>&1 || status=$?
fi
elapsed=$(($(date +%s) - start))

executions=$(awk '/stat::number_of_executed_units:/ { n += $2 } END { print n + 0 }' "$LOG")
if ((status != 0)) || grep -qE '^(==[0-9]+== ?ERROR|SUMMARY: |fuzz_chain: )' "$LOG"; then
  tail -n 60 "$LOG"
  grep -h 'Test unit written to' "$LOG" >&2 || true
  echo "fuzz: FAILED after $executions executions in ${elapsed} s (exit $status): fix the bug, then save" \
       "the input above as tests/fuzz/regressions/<what-it-does>.json" >&2
  exit 1
fi
new_units=$(awk '/stat::new_units_added:/ { n += $2 } END { print n + 0 }' "$LOG")
echo "fuzz: stat::number_of_executed_units: $executions (all workers)"
echo "fuzz: passed: $executions executions in ${elapsed} s ($((executions / (elapsed > 0 ? elapsed : 1)))/s)," \
     "$new_units new corpus units, no crash"
