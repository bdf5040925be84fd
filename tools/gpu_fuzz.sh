#!/usr/bin/env bash
# Random chains on the GPU against the CPU reference (docs/fuzzing.md, "On a
# GPU"): one build/epifuse_gpu_fuzz process a worker, each with its own seed,
# for SECONDS each. The reference evaluates on the CPU, so workers scale with
# cores while one GPU runs every worker's kernels.
#
# Usage: tools/gpu_fuzz.sh [SECONDS [WORKERS [FIRST_SEED]]]
#        (defaults: 300 s, the CPUs less two, seed 1)
# Writes OUT (default gpu-fuzz-out/): fail-*.json, a repro of each failed
# check; worker-N.log; current-PID.json of a worker that hung or died
# mid-case. Exits 1 when a check failed or a worker died or hung, 77 with no GPU.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${EPIFUSE_GPU_FUZZ:-$ROOT/build/epifuse_gpu_fuzz}
SECONDS_TO_RUN=${1:-300}
CPUS=$(nproc 2>/dev/null || echo 4)
WORKERS=${2:-$((CPUS > 3 ? CPUS - 2 : 1))}
FIRST_SEED=${3:-1}
OUT=${OUT:-gpu-fuzz-out}
for v in "$SECONDS_TO_RUN" "$WORKERS" "$FIRST_SEED"; do
  if ! [[ $v =~ ^[0-9]+$ && $v -gt 0 ]]; then
    echo "usage: tools/gpu_fuzz.sh [SECONDS [WORKERS [FIRST_SEED]]] (positive integers)" >&2
    exit 2
  fi
done
if [[ ! -x $BIN ]]; then
  echo "gpu_fuzz: $BIN not built (make -C build epifuse_gpu_fuzz)" >&2
  exit 2
fi
mkdir -p "$OUT"
echo "gpu_fuzz: $WORKERS workers for ${SECONDS_TO_RUN} s, seeds $FIRST_SEED..$((FIRST_SEED + WORKERS - 1)), into $OUT"
pids=()
for ((w = 0; w < WORKERS; ++w)); do
  # A case past its time (a hang) is killed with its worker; its repro is
  # the worker's current-PID.json.
  timeout -k 10 $((SECONDS_TO_RUN + 300)) "$BIN" --seed $((FIRST_SEED + w)) --cases 0 --seconds "$SECONDS_TO_RUN" \
    --out "$OUT" >"$OUT/worker-$w.log" 2>&1 &
  pids+=($!)
done
status=0
for ((w = 0; w < WORKERS; ++w)); do
  wait "${pids[$w]}"
  rc=$?
  if [[ $rc == 77 ]]; then
    grep -m1 'no GPU' "$OUT/worker-$w.log" >&2
    exit 77
  fi
  if [[ $rc != 0 && $rc != 1 ]]; then
    echo "gpu_fuzz: worker $w (seed $((FIRST_SEED + w))) exited $rc (124: hung past its time); see $OUT/worker-$w.log" >&2
    status=1
  fi
  [[ $rc == 1 ]] && status=1
  grep -h '^gpu_fuzz: seed' "$OUT/worker-$w.log"
done
fails=$(find "$OUT" -name 'fail-*.json' | wc -l)
stuck=$(find "$OUT" -name 'current-*.json' | wc -l)
echo "gpu_fuzz: $fails failed checks, $stuck cases left mid-run"
grep -h 'FAILED' "$OUT"/worker-*.log | sort | uniq -c | sort -rn | head -20
exit $status
