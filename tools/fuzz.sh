#!/usr/bin/env bash
# Builds the two libFuzzer targets (docs/fuzzing.md) with clang in build-fuzz/:
#   chain: the JSON front end, validation and emission (tests/fuzz/fuzz_chain.cpp);
#   c_api: the C ABI the Python module calls, CPU evaluation included
#          (tests/fuzz/fuzz_c_api.cpp).
# For each, runs every saved crash under its regressions folder once
# (tests/fuzz/regressions/, tests/fuzz/regressions_c_api/), then fuzzes from a
# seed corpus copied into a temporary working corpus: the example chains
# examples/chains/*.json, the valid chains of tests/fuzz/seeds/ (the corners
# the examples miss), the regression inputs, and for chain the must-fail
# inputs tests/errors/**/*.json, for c_api the builder and NULL-array inputs
# of tests/fuzz/seeds_c_api/.
#
# Exits non-zero when an input crashes (an InternalError, any exception other
# than UserError, a status other than EF_OK or EF_USER_ERROR, a sanitizer
# report, a leak, a hang past 10 s); the input is kept under
# build-fuzz/artifacts/ and the log in build-fuzz/fuzz-NAME.log. Prints the
# number of executions of each target at the end.
#
# Usage: tools/fuzz.sh [SECONDS [C_API_SECONDS]]   (defaults 60 and SECONDS)
# Environment: FUZZ_BUILD_DIR (default: build-fuzz), JOBS (parallel build jobs,
#              default: the number of CPUs), FUZZ_WORKERS (fuzzing processes run
#              side by side, each for SECONDS; default 1).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
FUZZ_WORKERS=${FUZZ_WORKERS:-1}
SECONDS_TO_RUN=${1:-60}
C_API_SECONDS=${2:-$SECONDS_TO_RUN}
for s in "$SECONDS_TO_RUN" "$C_API_SECONDS"; do
  if ! [[ $s =~ ^[0-9]+$ && $s -gt 0 ]]; then
    echo "usage: tools/fuzz.sh [SECONDS [C_API_SECONDS]] (positive integers, default 60 and SECONDS)" >&2
    exit 2
  fi
done
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

targets=(epifuse_fuzz_chain epifuse_fuzz_c_api)
echo "fuzz: building ${targets[*]} in ${FUZZ_BUILD_DIR#"$ROOT"/} (clang, ASan+UBSan, $JOBS jobs)"
CC=clang CXX=clang++ cmake -S "$ROOT" -B "$FUZZ_BUILD_DIR" -DEPIFUSE_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$FUZZ_BUILD_DIR" --target "${targets[@]}" -j "$JOBS"
ARTIFACTS=$FUZZ_BUILD_DIR/artifacts
mkdir -p "$ARTIFACTS"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/epifuse-fuzz.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# fuzz NAME SECONDS REGRESSIONS-DIR SEED-DIR...: runs every saved crash of
# REGRESSIONS-DIR once, then fuzzes target epifuse_fuzz_NAME for SECONDS from a
# working copy of the seeds (*.json under the seed dirs, every file under
# REGRESSIONS-DIR but its README.md). Log: build-fuzz/fuzz-NAME.log.
fuzz() {
  local name=$1 seconds=$2 regressions_dir=$3
  shift 3
  local fuzzer=$FUZZ_BUILD_DIR/epifuse_fuzz_$name log=$FUZZ_BUILD_DIR/fuzz-$name.log corpus=$WORK/corpus-$name
  local regressions=()
  mapfile -t regressions < <(find "$regressions_dir" -type f ! -name README.md | sort)
  if ((${#regressions[@]} > 0)); then
    echo "fuzz $name: running ${#regressions[@]} regression input(s) from ${regressions_dir#"$ROOT"/}/"
    if ! "$fuzzer" -artifact_prefix="$ARTIFACTS/" "${regressions[@]}" >"$log" 2>&1; then
      tail -n 60 "$log"
      echo "fuzz $name: FAILED: a regression input crashes again (log: ${log#"$ROOT"/})" >&2
      return 1
    fi
  fi
  mkdir -p "$corpus"
  # Seeds named after their path (tests/errors/x.json -> tests_errors_x.json): no collisions.
  local seed rel
  while IFS= read -r -d '' seed; do
    rel=${seed#"$ROOT"/}
    cp "$seed" "$corpus/${rel//\//_}"
  done < <(find "$@" -type f \( -name '*.json' -o -name '*.txt' \) -print0)
  for seed in "${regressions[@]}"; do cp "$seed" "$corpus/regression_$(basename "$seed")"; done
  echo "fuzz $name: $(find "$corpus" -type f | wc -l) seed inputs; fuzzing for ${seconds} s" \
       "with $FUZZ_WORKERS worker(s) (log: ${log#"$ROOT"/})"

  local args=(-dict="$ROOT/tests/fuzz/chain.dict" -max_total_time="$seconds" -timeout=10
              -print_final_stats=1 -artifact_prefix="$ARTIFACTS/" "$corpus")
  local status=0 start elapsed
  start=$(date +%s)
  if ((FUZZ_WORKERS == 1)); then
    "$fuzzer" "${args[@]}" >"$log" 2>&1 || status=$?
  else
    # -jobs runs that many whole fuzzing sessions (each for SECONDS), -workers at
    # once, sharing the corpus; each writes fuzz-N.log in the cwd, which the
    # parent prints when the job exits (so every job's stats reach the log once).
    (cd "$WORK" && "$fuzzer" -jobs="$FUZZ_WORKERS" -workers="$FUZZ_WORKERS" "${args[@]}") >"$log" 2>&1 || status=$?
  fi
  elapsed=$(($(date +%s) - start))

  local executions new_units
  executions=$(awk '/stat::number_of_executed_units:/ { n += $2 } END { print n + 0 }' "$log")
  if ((status != 0)) || grep -qE '^(==[0-9]+== ?ERROR|SUMMARY: |fuzz_(chain|c_api): )' "$log"; then
    tail -n 60 "$log"
    grep -h 'Test unit written to' "$log" >&2 || true
    echo "fuzz $name: FAILED after $executions executions in ${elapsed} s (exit $status): fix the bug, then" \
         "save the input above under ${regressions_dir#"$ROOT"/}/<what-it-does>" >&2
    return 1
  fi
  new_units=$(awk '/stat::new_units_added:/ { n += $2 } END { print n + 0 }' "$log")
  echo "fuzz $name: stat::number_of_executed_units: $executions (all workers)"
  echo "fuzz $name: passed: $executions executions in ${elapsed} s ($((executions / (elapsed > 0 ? elapsed : 1)))/s)," \
       "$new_units new corpus units, no crash"
}

status=0
fuzz chain "$SECONDS_TO_RUN" "$ROOT/tests/fuzz/regressions" \
  "$ROOT/examples/chains" "$ROOT/tests/errors" "$ROOT/tests/fuzz/seeds" || status=1
fuzz c_api "$C_API_SECONDS" "$ROOT/tests/fuzz/regressions_c_api" \
  "$ROOT/examples/chains" "$ROOT/tests/fuzz/seeds" "$ROOT/tests/fuzz/seeds_c_api" || status=1
exit $status
