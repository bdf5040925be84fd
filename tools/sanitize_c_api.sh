#!/usr/bin/env bash
# The C ABI under sanitizers: builds libepifuse_c.so and the thread stress
# program (tests/stress/c_api_threads.cpp: one spec, 16 threads building,
# serialising, cloning and evaluating it) with clang twice, ASan+UBSan in
# build-asan-capi/ and TSan in build-tsan-capi/, then runs the program RUNS
# times (default 20) under each.
#
# Exits non-zero on any failed run or any sanitizer report (the sanitizers halt
# on the first; the log is kept in the build directory as stress.log). Prints
# each build's and each series' wall time.
#
# Usage: tools/sanitize_c_api.sh [RUNS]
# Environment: SANITIZERS (default "asan tsan"), JOBS (parallel build jobs,
#              default: the number of CPUs), ROUNDS (rounds per thread in one
#              run, default 40), SAN_BUILD_PREFIX (default: the checkout's build).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=${1:-20}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
ROUNDS=${ROUNDS:-40}
SANITIZERS=${SANITIZERS:-asan tsan}
SAN_BUILD_PREFIX=${SAN_BUILD_PREFIX:-$ROOT/build}
if ! [[ $RUNS =~ ^[0-9]+$ && $RUNS -gt 0 ]]; then
  echo "usage: tools/sanitize_c_api.sh [RUNS] (a positive integer, default 20)" >&2
  exit 2
fi
for tool in clang clang++; do
  if ! command -v "$tool" >/dev/null; then
    echo "sanitize_c_api: $tool not found; tools/setup.sh installs it (Debian: clang libclang-rt-dev)" >&2
    exit 1
  fi
done

# A report must fail the run, not scroll by: halt on the first, and exit codes
# the stress program itself never uses.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:exitcode=86}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:exitcode=87}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:exitcode=88:second_deadlock_stack=1}

status=0
for san in $SANITIZERS; do
  case $san in
    asan) flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" ;;
    tsan) flags="-fsanitize=thread -fno-omit-frame-pointer" ;;
    *) echo "sanitize_c_api: unknown sanitizer '$san' (asan or tsan)" >&2; exit 2 ;;
  esac
  dir=$SAN_BUILD_PREFIX-$san-capi
  log=$dir/stress.log
  start=$(date +%s)
  echo "sanitize_c_api: building epifuse_c_api_threads in ${dir#"$ROOT"/} (clang, $flags, $JOBS jobs)"
  # Only the library, the C ABI and the stress program: no CLI, tests or examples.
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
    -DCMAKE_SHARED_LINKER_FLAGS="$flags" -DEPIFUSE_BUILD_CLI=OFF -DEPIFUSE_BUILD_TESTS=OFF \
    -DEPIFUSE_BUILD_EXAMPLES=OFF -DEPIFUSE_INSTALL=OFF >/dev/null
  cmake --build "$dir" --target epifuse_c_api_threads -j "$JOBS" >"$dir/build.log" 2>&1 ||
    { tail -n 40 "$dir/build.log"; echo "sanitize_c_api: FAILED: the $san build" >&2; exit 1; }
  built=$(date +%s)
  echo "sanitize_c_api: $san build took $((built - start)) s; running it $RUNS times ($ROUNDS rounds each)"
  : >"$log"
  failed=0
  for ((i = 1; i <= RUNS; ++i)); do
    if ! "$dir/epifuse_c_api_threads" "$ROUNDS" >>"$log" 2>&1; then
      failed=$i
      break
    fi
    # A sanitizer that reports without halting (or a runtime's warning) still fails.
    if grep -qE "Sanitizer|runtime error:" "$log"; then
      failed=$i
      break
    fi
  done
  done_at=$(date +%s)
  if ((failed)); then
    tail -n 60 "$log"
    echo "sanitize_c_api: FAILED: $san run $failed of $RUNS (log: ${log#"$ROOT"/})" >&2
    status=1
  else
    echo "sanitize_c_api: $san: $RUNS of $RUNS runs clean in $((done_at - built)) s"
  fi
done
exit $status
