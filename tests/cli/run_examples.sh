#!/usr/bin/env bash
# CLI tests of `epifuse`: every example chain validates and runs on the CPU device,
# numpy (Debian's /usr/bin/python3) reads every .npy the CLI writes and the CLI reads
# what numpy writes, and bad invocations exit with code 2 and a message, never a crash.
#
# usage: tests/cli/run_examples.sh [path/to/epifuse]    (default: build/epifuse)
# Prints "N passed, M failed" last; exits non-zero when anything failed.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
EPIFUSE=${1:-$ROOT/build/epifuse}
PYTHON=${PYTHON:-/usr/bin/python3}
CHAINS=$ROOT/examples/chains

if [[ ! -x $EPIFUSE ]]; then
  echo "run_examples.sh: no epifuse binary at $EPIFUSE (build first, or pass its path)" >&2
  exit 2
fi
if ! "$PYTHON" -c 'import numpy' 2>/dev/null; then
  echo "run_examples.sh: $PYTHON cannot import numpy (apt-get install python3-numpy; tools/setup.sh does)" >&2
  exit 2
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/epifuse-cli.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0

pass() { passed=$((passed + 1)); echo "ok    $1"; }
fail() {
  failed=$((failed + 1))
  echo "FAIL  $1"
  [[ -s $TMP/out ]] && sed 's/^/      stdout: /' "$TMP/out" | head -20
  [[ -s $TMP/err ]] && sed 's/^/      stderr: /' "$TMP/err" | head -20
  return 0
}

# expect RC NAME -- CMD...: runs CMD, passes when its exit code is RC. For RC 2 it
# also wants a message on stderr. Any exit code >= 128 (a signal: abort, segfault)
# fails whatever RC says.
expect() {
  local want=$1 name=$2
  shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if ((rc >= 128)); then
    fail "$name (crashed: exit code $rc)"
  elif [[ $rc != "$want" ]]; then
    fail "$name (exit code $rc, want $want)"
  elif [[ $want == 2 && ! -s $TMP/err ]]; then
    fail "$name (exit code 2 but no message on stderr)"
  else
    pass "$name"
  fi
}

# Checks the .npy files in DIR against the chain's outputs (validate --json in
# $TMP/validate.json) and the run's shape: dtype, shape, all finite.
check_npy_outputs() {
  local dir=$1 shape=$2
  "$PYTHON" - "$TMP/validate.json" "$dir" "$shape" <<'EOF'
import json, sys, numpy as np
spec = json.load(open(sys.argv[1]))
d, (m, n) = sys.argv[2], [int(v) for v in sys.argv[3].split(",")[:2]]
numpy_dtype = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}  # bf16: raw bits as <u2
for out in spec["outputs"]:
    a = np.load(f"{d}/{out['name']}.npy")
    assert a.dtype == numpy_dtype[out["dtype"]], (out, a.dtype)
    assert a.shape == (m, n), (out, a.shape)
    f = (a.astype(np.uint32) << 16).view(np.float32) if out["dtype"] == "bf16" else a
    assert np.isfinite(f).all(), f"{out['name']}: non-finite values"
    assert (f != 0).any(), f"{out['name']}: all zero"
EOF
}

# --- every example chain -------------------------------------------------------------
for chain in "$CHAINS"/*.json; do
  name=$(basename "$chain" .json)
  expect 0 "validate $name" -- "$EPIFUSE" validate "$chain"
  expect 0 "validate --json $name" -- "$EPIFUSE" validate "$chain" --json
  cp "$TMP/out" "$TMP/validate.json"
  if "$PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["signature"] and d["outputs"]' \
       "$TMP/validate.json" 2>"$TMP/err"; then pass "validate --json $name is JSON"; else fail "validate --json $name is JSON"; fi
  shape=$("$PYTHON" -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["shape"])))' \
          "$TMP/validate.json")
  expect 0 "run $name --device cpu --output-dir" -- "$EPIFUSE" run "$chain" --device cpu --output-dir "$TMP/$name"
  if check_npy_outputs "$TMP/$name" "$shape" >"$TMP/out" 2>"$TMP/err"; then
    pass "numpy reads the outputs of $name"
  else
    fail "numpy reads the outputs of $name"
  fi
  expect 0 "run $name --json --verify" -- "$EPIFUSE" run "$chain" --device cpu --json --verify --seed 0x2a --offset 7
  if "$PYTHON" -c 'import json,sys; d=json.load(sys.stdin); assert d["device"]=="cpu" and d["seed"]==42 and d["offset"]==7 and d["outputs"]' \
       <"$TMP/out" 2>"$TMP/err"; then pass "run --json $name is JSON"; else fail "run --json $name is JSON"; fi
done

# --- numpy -> epifuse -> numpy: exact values -----------------------------------------
"$PYTHON" - "$TMP" <<'EOF'
import sys, numpy as np
d = sys.argv[1]
np.save(f"{d}/x.npy", np.arange(-6, 6, dtype=np.float32).reshape(3, 4))
np.save(f"{d}/y.npy", np.full((3, 4), 2.5, dtype=np.float32))
np.save(f"{d}/x16.npy", np.arange(-6, 6, dtype=np.float16).reshape(3, 4))  # converted to f32 on input
np.save(f"{d}/bad_shape.npy", np.zeros((4, 3), dtype=np.float32))
np.save(f"{d}/f64.npy", np.zeros((3, 4), dtype=np.float64))
np.save(f"{d}/fortran.npy", np.asfortranarray(np.zeros((3, 4), dtype=np.float32)))
open(f"{d}/garbage.npy", "wb").write(b"\x93NUMPY\x01\x00\xff\x7f{'descr'")
open(f"{d}/broken.json", "w").write('{"epifuse": 1, "name": ')
EOF
expect 0 "run add_mul with numpy inputs" -- "$EPIFUSE" run "$CHAINS/add_mul.json" --shape 3,4 --device cpu \
  --input x="$TMP/x.npy" --input y="$TMP/y.npy" --output out="$TMP/out_f32.npy"
expect 0 "run add_mul with an f16 file for an f32 input" -- "$EPIFUSE" run "$CHAINS/add_mul.json" --shape 3,4 \
  --device cpu --input x="$TMP/x16.npy" --input y="$TMP/y.npy" --output out="$TMP/out_f16in.npy"
if "$PYTHON" - "$TMP" >"$TMP/out" 2>"$TMP/err" <<'EOF'
import sys, numpy as np
d = sys.argv[1]
want = (np.arange(-6, 6, dtype=np.float32).reshape(3, 4) + 2.5) * 0.5
for f in ("out_f32.npy", "out_f16in.npy"):
    got = np.load(f"{d}/{f}")
    assert got.dtype == np.float32 and got.shape == (3, 4), (got.dtype, got.shape)
    assert (got == want).all(), (got, want)
EOF
then pass "numpy -> epifuse -> numpy values are exact"; else fail "numpy -> epifuse -> numpy values are exact"; fi

# --- bad invocations: exit code 2 with a message -------------------------------------
AM=$CHAINS/add_mul.json
expect 2 "bad --shape 12,x" -- "$EPIFUSE" run "$AM" --shape 12,x --device cpu
expect 2 "bad --shape -4,4" -- "$EPIFUSE" run "$AM" --shape -4,4 --device cpu
expect 2 "bad --shape 0,4" -- "$EPIFUSE" run "$AM" --shape 0,4 --device cpu
expect 2 "bad --shape 4,4,4 (elementwise)" -- "$EPIFUSE" run "$AM" --shape 4,4,4 --device cpu
expect 2 "bad --shape 4,4 (gemm needs K)" -- "$EPIFUSE" run "$CHAINS/gemm.json" --shape 4,4 --device cpu
expect 2 "bad --shape (too large)" -- "$EPIFUSE" run "$AM" --shape 99999999999999999999,4 --device cpu
expect 2 "missing chain file" -- "$EPIFUSE" run "$TMP/no_such_chain.json" --device cpu
expect 2 "validate missing chain file" -- "$EPIFUSE" validate "$TMP/no_such_chain.json"
expect 2 "malformed chain JSON" -- "$EPIFUSE" validate "$TMP/broken.json"
expect 2 "bad --input name" -- "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --input nope="$TMP/x.npy"
expect 2 "bad --input syntax" -- "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --input "$TMP/x.npy"
expect 2 "--input missing file" -- "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --input x="$TMP/none.npy"
expect 2 "--input wrong shape" -- "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --input x="$TMP/bad_shape.npy"
expect 2 "--input float64 file" -- "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --input x="$TMP/f64.npy"
expect 2 "--input Fortran-order file" -- "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --input x="$TMP/fortran.npy"
expect 2 "--input garbage file" -- "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --input x="$TMP/garbage.npy"
expect 2 "--input bound twice" -- "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --input x="$TMP/x.npy" --input x="$TMP/x.npy"
expect 2 "bad --output name" -- "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --output nope="$TMP/o.npy"
expect 2 "--output into a missing directory" -- "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --output out="$TMP/no/dir/o.npy"
expect 2 "bad --seed" -- "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --seed 12abc
expect 2 "bad --seed (negative)" -- "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --seed -1
expect 2 "bad --offset (too large)" -- "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --offset 0x10000000000000000
expect 2 "bad --device" -- "$EPIFUSE" run "$AM" --shape 3,4 --device tpu
expect 2 "unknown option" -- "$EPIFUSE" run "$AM" --frobnicate
expect 2 "unknown subcommand" -- "$EPIFUSE" frobnicate
expect 2 "no subcommand" -- "$EPIFUSE"
expect 2 "bad shape with --json" -- "$EPIFUSE" run "$AM" --shape 12,x --device cpu --json
if "$PYTHON" -c 'import json,sys; e=json.load(sys.stdin)["error"]; assert e["kind"]=="user" and "12,x" in e["message"]' \
     <"$TMP/out" 2>"$TMP/err"; then pass "--json error is {\"error\": {\"kind\": \"user\", ...}}"; else fail "--json error document"; fi
# A GPU device is either not built in yet (2) or not present on this machine (4).
"$EPIFUSE" run "$AM" --shape 3,4 --device cuda >"$TMP/out" 2>"$TMP/err"
rc=$?
if ((rc == 0)) || { ((rc == 2 || rc == 4)) && [[ -s $TMP/err ]]; }; then
  pass "--device cuda (exit code $rc)"
else
  fail "--device cuda (exit code $rc)"
fi

# --- help and version ---------------------------------------------------------------
expect 0 "--version" -- "$EPIFUSE" --version
expect 0 "--help" -- "$EPIFUSE" --help
# Every subcommand the binary lists under "Subcommands:" in its --help.
subcommands=$("$EPIFUSE" --help 2>/dev/null | awk '/^Subcommands:/ {on = 1; next} on && /^  [a-z]/ {print $1}')
[[ -n $subcommands ]] || subcommands="validate run"
for sub in $subcommands; do
  expect 0 "$sub --help" -- "$EPIFUSE" "$sub" --help
done

echo "$passed passed, $failed failed"
((failed == 0))
