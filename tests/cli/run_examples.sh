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

# judge NAME WANT RC [FRAGMENT]: passes when RC is WANT and, for WANT 2 and 5 (a
# user or output error), stderr says something (FRAGMENT, when given). Any exit
# code >= 128 (a signal: abort, segfault) fails whatever WANT says.
judge() {
  local name=$1 want=$2 rc=$3 fragment=${4:-}
  if ((rc >= 128)); then
    fail "$name (crashed: exit code $rc)"
  elif [[ $rc != "$want" ]]; then
    fail "$name (exit code $rc, want $want)"
  elif [[ ($want == 2 || $want == 5) && ! -s $TMP/err ]]; then
    fail "$name (exit code $want but no message on stderr)"
  elif [[ -n $fragment ]] && ! grep -qF -- "$fragment" "$TMP/err"; then
    fail "$name (stderr does not say: $fragment)"
  else
    return 0
  fi
  return 1
}

# expect RC NAME -- CMD...: runs CMD and judges its exit code.
expect() {
  local want=$1 name=$2
  shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"
  judge "$name" "$want" $? && pass "$name"
}

# expect_stderr RC NAME FRAGMENT -- CMD...: as expect, and stderr must contain FRAGMENT.
expect_stderr() {
  local want=$1 name=$2 fragment=$3
  shift 4
  "$@" >"$TMP/out" 2>"$TMP/err"
  judge "$name" "$want" $? "$fragment" && pass "$name"
}

# expect_fast MAX_S RC NAME FRAGMENT -- CMD...: as expect_stderr, and CMD must use
# less than MAX_S seconds of CPU time (user + system: wall time would count
# whatever else the machine is doing).
expect_fast() {
  local max=$1 want=$2 name=$3 fragment=$4
  shift 5
  local TIMEFORMAT='%3U %3S'
  { time "$@" >"$TMP/out" 2>"$TMP/err"; } 2>"$TMP/time"
  local rc=$?
  local cpu
  cpu=$(awk '{print $1 + $2}' "$TMP/time")
  judge "$name" "$want" $rc "$fragment" || return 0
  if awk -v t="$cpu" -v m="$max" 'BEGIN {exit !(t >= m)}'; then
    fail "$name (took $cpu s of CPU, want < $max s)"
  else
    pass "$name ($cpu s)"
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
    want = {"full": (m, n), "row": (n,), "col": (m,)}[out["broadcast"]]  # [M,N], [N] column sums, [M] statistics
    assert a.shape == want, (out, a.shape)
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
  expect 0 "grad --check $name" -- "$EPIFUSE" grad "$chain" --check --backward "$TMP/$name.bwd.json" --forward "$TMP/$name.fwd.json"
  expect 0 "validate the backward of $name" -- "$EPIFUSE" validate "$TMP/$name.bwd.json"
  expect 0 "validate the forward with saved tensors of $name" -- "$EPIFUSE" validate "$TMP/$name.fwd.json"
  expect 0 "run $name --json --verify" -- "$EPIFUSE" run "$chain" --device cpu --json --verify --seed 0x2a --offset 7
  if "$PYTHON" -c 'import json,sys; d=json.load(sys.stdin); assert d["device"]=="cpu" and d["seed"]==42 and d["offset"]==7 and d["outputs"]' \
       <"$TMP/out" 2>"$TMP/err"; then pass "run --json $name is JSON"; else fail "run --json $name is JSON"; fi
done

# --- grad: what cannot be differentiated is an error (exit 2) --------------------------
SMD="$CHAINS/scaled_masked_softmax_dropout.json"
expect_stderr 2 "grad --wrt an input marked \"grad\": false" "marked not differentiable" -- "$EPIFUSE" grad "$SMD" --wrt mask
expect_stderr 2 "grad --wrt seed" "not an input: a mask is not differentiable" -- "$EPIFUSE" grad "$SMD" --wrt seed
expect_stderr 2 "grad --wrt a GEMM operand" "differentiate with respect to the accumulator" -- "$EPIFUSE" grad "$CHAINS/gemm_bias_relu.json" --wrt b
expect 0 "grad --json" -- "$EPIFUSE" grad "$SMD" --json --check
if "$PYTHON" -c 'import json,sys; d=json.load(sys.stdin); assert d["wrt"]==["x"] and all(c["ok"] for c in d["check"]) and d["backward"]["outputs"]' \
     <"$TMP/out" 2>"$TMP/err"; then pass "grad --json is JSON"; else fail "grad --json is JSON"; fi

# --- grad --as-gemm-epilogue: the backward on the accumulator of the GEMM above ----------
BGDA="$CHAINS/bias_gelu_dropout_add.json"
expect 0 "grad --as-gemm-epilogue dy" -- "$EPIFUSE" grad "$BGDA" --as-gemm-epilogue dy --backward "$TMP/dgrad.json"
expect 0 "validate the dgrad chain" -- "$EPIFUSE" validate "$TMP/dgrad.json"
expect 0 "run the dgrad chain on the CPU" -- "$EPIFUSE" run "$TMP/dgrad.json" --device cpu --shape 8,16,4
expect_stderr 2 "grad --as-gemm-epilogue of a row input" "is a row input" -- "$EPIFUSE" grad "$BGDA" --as-gemm-epilogue bias
expect_stderr 2 "grad --as-gemm-epilogue of no input" "is not an input" -- "$EPIFUSE" grad "$BGDA" --as-gemm-epilogue nope

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
expect 0 "--shape 0,4 is an empty result" -- "$EPIFUSE" run "$AM" --shape 0,4 --device cpu --output-dir "$TMP/empty"
if "$PYTHON" -c "import numpy as np, sys; a = np.load(sys.argv[1]); assert a.shape == (0, 4), a.shape" "$TMP/empty/out.npy"
then pass "an empty result is written as a (0, 4) array"; else fail "an empty result is written as a (0, 4) array"; fi
expect 2 "bench on an empty shape" -- "$EPIFUSE" bench "$AM" --shape 0,4
expect_stderr 2 "bench --tile with --no-tune" "give one or the other" -- "$EPIFUSE" bench "$CHAINS/gemm.json" --tile h128x64x64s6g8p --no-tune
expect_stderr 2 "bench --tile that does not parse" "wgmma tile 'h128x64x'" -- "$EPIFUSE" bench "$CHAINS/gemm.json" --tile h128x64x
expect_stderr 2 "emit --tile with stages on a chain without column sums" "only a column-sum kernel has" -- \
  "$EPIFUSE" emit "$AM" --shape 64,64 --tile t256v4g0s3
expect_stderr 0 "emit --tile with stages on a column-sum chain" "" -- \
  "$EPIFUSE" emit "$CHAINS/bias_gelu_dropout_add_backward.json" --shape 64,1024 --tile t512v4g1s2
expect 2 "bad --shape 4,4,4 (elementwise)" -- "$EPIFUSE" run "$AM" --shape 4,4,4 --device cpu
expect 2 "bad --shape 4,4 (gemm needs K)" -- "$EPIFUSE" run "$CHAINS/gemm.json" --shape 4,4 --device cpu
expect_stderr 2 "--ld below the rows' length" "operand 'a': ld 30 is less than its rows' 32 elements" -- \
  "$EPIFUSE" run "$CHAINS/gemm.json" --shape 16,24,32 --ld a=30 --device cpu
expect_stderr 2 "--ld of no operand" "'c' is neither an operand nor an input or output" -- "$EPIFUSE" run "$CHAINS/gemm.json" --shape 16,24,32 --ld c=64 --device cpu
expect_stderr 2 "--ld of a row input" "input 'bias': an ld is for a full [M,N] tensor" -- \
  "$EPIFUSE" run "$CHAINS/gemm_bias_relu.json" --shape 16,24,32 --ld bias=64 --device cpu
expect_stderr 2 "--ld of an output below N" "output 'y': ld 20 is less than its rows' 24 elements (N)" -- \
  "$EPIFUSE" run "$CHAINS/gemm_bias_relu.json" --shape 16,24,32 --ld y=20 --device cpu
expect 0 "--ld of an output on the CPU reference" -- "$EPIFUSE" run "$CHAINS/gemm_bias_relu.json" --shape 16,24,32 --ld y=40 --device cpu
# Elementwise and row chains take lds of their full [M,N] tensors (Note [Strided
# rows]): on the CPU reference a strided run gives the dense run's values.
EW=$CHAINS/bias_gelu_dropout_add.json RN=$CHAINS/add_rmsnorm.json
expect 0 "--ld on an elementwise chain, dense" -- "$EPIFUSE" run "$EW" --shape 16,24 --device cpu --output-dir "$TMP/ew_dense"
expect 0 "--ld on an elementwise chain" -- "$EPIFUSE" run "$EW" --shape 16,24 --ld x=40 --ld residual=25 --ld y=32 \
  --device cpu --output-dir "$TMP/ew_ld"
expect 0 "--ld on a row chain, dense" -- "$EPIFUSE" run "$RN" --shape 16,64 --device cpu --output-dir "$TMP/rn_dense"
expect 0 "--ld on a row chain" -- "$EPIFUSE" run "$RN" --shape 16,64 --ld x=72 --ld h=65 --device cpu --output-dir "$TMP/rn_ld"
if "$PYTHON" - "$TMP" >"$TMP/out" 2>"$TMP/err" <<'PY'
import sys, numpy as np
d = sys.argv[1]
for dense, strided, name in (("ew_dense", "ew_ld", "y"), ("rn_dense", "rn_ld", "y"), ("rn_dense", "rn_ld", "h")):
    a, b = np.load(f"{d}/{dense}/{name}.npy"), np.load(f"{d}/{strided}/{name}.npy")
    assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape)
    assert a.tobytes() == b.tobytes(), name
PY
then pass "--ld runs of elementwise and row chains give the dense runs' values"
else fail "--ld runs of elementwise and row chains give the dense runs' values"; fi
expect_stderr 2 "--ld of an elementwise chain's row input" "input 'bias': an ld is for a full [M,N] tensor" -- \
  "$EPIFUSE" run "$EW" --shape 16,24 --ld bias=32 --device cpu
expect_stderr 2 "--ld of a row chain's output below N" "output 'y': ld 60 is less than its rows' 64 elements (N)" -- \
  "$EPIFUSE" run "$RN" --shape 16,64 --ld y=60 --device cpu
expect_stderr 2 "--ld of no tensor of an elementwise chain" "'a' is neither an input nor an output of this elementwise" -- \
  "$EPIFUSE" run "$AM" --shape 3,4 --ld a=8 --device cpu
expect 0 "--ld on the CPU reference" -- "$EPIFUSE" run "$CHAINS/gemm.json" --shape 16,24,32 --ld a=40 --ld b=32 --device cpu
expect_stderr 2 "--batch with overlapping batches" "operand 'b': batch stride 10 is less than its 768 elements" -- \
  "$EPIFUSE" run "$CHAINS/gemm.json" --shape 16,24,32 --batch 3 --batch-stride b=10 --device cpu
expect_stderr 2 "--batch-stride without --batch" "give --batch B above 1 too" -- \
  "$EPIFUSE" run "$CHAINS/gemm.json" --shape 16,24,32 --batch-stride b=0 --device cpu
expect_stderr 2 "--batch on an elementwise chain" "only GEMM chains are batched" -- "$EPIFUSE" run "$AM" --shape 3,4 --batch 2 --device cpu
expect 2 "--batch 0" -- "$EPIFUSE" run "$CHAINS/gemm.json" --shape 16,24,32 --batch 0 --device cpu
expect 0 "--batch on the CPU reference, a shared B" -- "$EPIFUSE" run "$CHAINS/gemm_bias_relu_dropout.json" --shape 16,24,32 \
  --batch 3 --batch-stride b=0 --device cpu --output-dir "$TMP/batched"
if "$PYTHON" -c "import numpy as np, sys; a = np.load(sys.argv[1]); assert a.shape == (3, 16, 24), a.shape" "$TMP/batched/y.npy"
then pass "a batched output is written as a (B, M, N) array"; else fail "a batched output is written as a (B, M, N) array"; fi
# emit without --target: the GPU's, as compile and bench take it, or, without a GPU, none
# in particular; either way it says which, and --json names it.
expect_stderr 0 "emit without --target says what it emits for" "emitting for" -- "$EPIFUSE" emit "$CHAINS/gemm_bias_relu.json"
if grep -qF "no GPU" "$TMP/err"; then want_target=""; else want_target=$(sed -n 's/.*GPU, \([^ ]*\) (.*/\1/p' "$TMP/err"); fi
if "$EPIFUSE" emit "$CHAINS/gemm_bias_relu.json" --json 2>/dev/null |
   "$PYTHON" -c "import json, sys; assert json.load(sys.stdin)['target'] == sys.argv[1]" "$want_target" &&
   "$EPIFUSE" emit "$CHAINS/gemm_bias_relu.json" --target sm_90a --shape 4096,4096,4096 --json 2>"$TMP/err" |
   "$PYTHON" -c "import json, sys; d = json.load(sys.stdin); assert d['target'] == 'sm_90a' and d['tile'].startswith('h'), d['tile']" &&
   ! grep -q "emitting for" "$TMP/err"
then pass "emit --json names the target it emitted for"; else fail "emit --json names the target it emitted for"; fi
if "$EPIFUSE" emit "$CHAINS/gemm_bias_relu.json" --target sm_80 --ld y=264 | grep -q "p.out0\[row \* p.ld_out0 + col\]"
then pass "emit --ld prints the strided output's kernel"; else fail "emit --ld prints the strided output's kernel"; fi
if "$EPIFUSE" emit "$EW" --shape 16,24 --target sm_80 --ld x=40 | grep -qF "p.in0 + r0 * (int)p.ld_in0 + c0"
then pass "emit --ld prints an elementwise chain's strided rows in the flat kernel"; else fail "emit --ld prints an elementwise chain's strided rows in the flat kernel"; fi
if "$EPIFUSE" emit "$EW" --shape 16,22 --target sm_80 --ld x=40 | grep -qF "p.in0[r * p.ld_in0 + c0 + j]"
then pass "emit --ld prints the 2-D kernel where dropout's vectors would cross rows"; else fail "emit --ld prints the 2-D kernel where dropout's vectors would cross rows"; fi
if "$EPIFUSE" emit "$RN" --shape 16,64 --target sm_80 --ld h=72 | grep -qF "const long long base_out1 = row * p.ld_out1;"
then pass "emit --ld prints a row chain's strided rows"; else fail "emit --ld prints a row chain's strided rows"; fi
if "$EPIFUSE" emit "$CHAINS/gemm_bias_relu_dropout.json" --target sm_80 --batch 4 | grep -q "const long long batch = (long long)blockIdx.z"
then pass "emit --batch prints the batched kernel"; else fail "emit --batch prints the batched kernel"; fi
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

# --- AMD: the HIP runtime and AMD targets through the Jit (docs/amd.md) -------------
expect 0 "info" -- "$EPIFUSE" info
if grep -q "^HIP runtime" "$TMP/out"; then pass "info reports the HIP runtime"; else fail "info reports the HIP runtime"; fi
expect 0 "info --json" -- "$EPIFUSE" info --json
cp "$TMP/out" "$TMP/info.json"
backend_available() {  # NAME: whether `info --json` found that backend
  "$PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if any(b["name"]==sys.argv[2] and b["available"] for b in d["backends"]) else 1)' \
    "$TMP/info.json" "$1"
}
"$EPIFUSE" --version >"$TMP/out" 2>"$TMP/err"
if grep -q "^HIP runtime" "$TMP/out" && grep -q "^epifuse " "$TMP/out"; then pass "--version reports the HIP runtime"; else fail "--version reports the HIP runtime"; fi
if backend_available "HIP runtime"; then
  echo "skip  run --device hip without an AMD GPU (an AMD GPU is present)"
else
  # No AMD GPU: exit 4 naming why (the library is missing, or there is no device), never a crash.
  expect_stderr 4 "run --device hip without an AMD GPU" "--device hip: no " -- "$EPIFUSE" run "$AM" --shape 3,4 --device hip
  if grep -qE "no AMD GPU present|no HIP runtime" "$TMP/err"; then pass "--device hip says why"; else fail "--device hip says why"; fi
fi
if backend_available "hipRTC"; then
  # compile --target gfx90a goes through the Jit: a miss, then a hit; a second process finds it on disk.
  AMD_CACHE=$TMP/amd_cache
  expect 0 "compile --target gfx90a" -- env EPIFUSE_CACHE_DIR="$AMD_CACHE" "$EPIFUSE" compile "$AM" --target gfx90a \
    --shape 33,67 --cubin "$TMP/amd.co"
  if grep -q "^gfx90a: .* code object [0-9]* bytes, miss (compiled); again: hit" "$TMP/out" && ! grep -q "not cached" "$TMP/out"; then
    pass "compile --target gfx90a: miss, then hit"
  else
    fail "compile --target gfx90a: miss, then hit"
  fi
  if [[ $(head -c 4 "$TMP/amd.co" | od -An -c | tr -d ' ') == 177ELF ]]; then pass "--cubin writes the AMD code object"; else fail "--cubin writes the AMD code object"; fi
  expect 0 "compile --target gfx90a again" -- env EPIFUSE_CACHE_DIR="$AMD_CACHE" "$EPIFUSE" compile "$AM" --target gfx90a --shape 33,67
  if grep -q "miss (read from the disk cache); again: hit" "$TMP/out"; then pass "compile --target gfx90a: from the disk cache"; else fail "compile --target gfx90a: from the disk cache"; fi
  expect 0 "compile --target gfx90a --json" -- env EPIFUSE_CACHE_DIR="$AMD_CACHE" "$EPIFUSE" compile "$AM" --target gfx90a:xnack- --shape 33,67 --json
  if "$PYTHON" -c 'import json,sys; d=json.load(sys.stdin)[0]; assert d["target"]=="gfx90a:xnack-" and d["first_lookup"]=="miss" and not d["from_disk"] and d["second_lookup"]=="hit"' \
       <"$TMP/out" 2>"$TMP/err"; then pass "compile --target gfx90a:xnack- is its own key"; else fail "compile --target gfx90a:xnack- is its own key"; fi
else
  echo "skip  compile --target gfx90a (no hipRTC here)"
fi

# --- cache (docs/disk-cache.md): only reads the folder, so no GPU and no --target ------
# Things that are not records under a record's name (a FIFO, a directory) are listed as
# not whole, never read without end, and cleared; a bad EPIFUSE_CACHE_MAX_MB is one warning.
CACHE=$TMP/cli_cache
for action in stats list clear; do
  expect 0 "cache $action without --target" -- env -u EPIFUSE_CACHE EPIFUSE_CACHE_DIR="$CACHE" "$EPIFUSE" cache $action
done
mkdir -p "$CACHE/v1/kernels/00000000000000fe.bin/sub"
mkfifo "$CACHE/v1/kernels/00000000000000ff.bin"
expect 0 "cache list with a FIFO and a directory as records" -- \
  timeout 60 env -u EPIFUSE_CACHE EPIFUSE_CACHE_DIR="$CACHE" "$EPIFUSE" cache list
if [[ $(grep -c "(not a whole record: will be replaced)" "$TMP/out") == 2 ]]; then
  pass "cache list: both listed as not whole"
else
  fail "cache list: both listed as not whole"
fi
expect 0 "cache stats --json with a FIFO record" -- \
  timeout 60 env -u EPIFUSE_CACHE EPIFUSE_CACHE_DIR="$CACHE" "$EPIFUSE" cache stats --json
if "$PYTHON" -c 'import json,sys; d=json.load(sys.stdin); assert d["disk"]["files"]==2 and d["target"] is None' <"$TMP/out" 2>"$TMP/err"; then
  pass "cache stats --json counts them"
else
  fail "cache stats --json counts them"
fi
expect 0 "cache clear with a FIFO and a directory as records" -- \
  timeout 60 env -u EPIFUSE_CACHE EPIFUSE_CACHE_DIR="$CACHE" "$EPIFUSE" cache clear
if [[ -z $(ls -A "$CACHE/v1/kernels") ]] && grep -q "cleared 2 files" "$TMP/out"; then
  pass "cache clear removes them"
else
  fail "cache clear removes them"
fi
expect_stderr 0 "cache stats with EPIFUSE_CACHE_MAX_MB=12x" "EPIFUSE_CACHE_MAX_MB='12x' is not a whole number" -- \
  env -u EPIFUSE_CACHE EPIFUSE_CACHE_DIR="$CACHE" EPIFUSE_CACHE_MAX_MB=12x "$EPIFUSE" cache stats
if [[ $(grep -c "warning" "$TMP/err") == 1 ]] && grep -q "using the default, 512 MiB" "$TMP/err"; then
  pass "EPIFUSE_CACHE_MAX_MB=12x: one warning, the default"
else
  fail "EPIFUSE_CACHE_MAX_MB=12x: one warning, the default"
fi
expect_stderr 2 "cache stats --target that is no target" "sm_1" -- "$EPIFUSE" cache stats --target sm_1
if backend_available "NVRTC"; then
  expect 0 "compile --target sm_90a into a fresh cache" -- \
    env -u EPIFUSE_CACHE EPIFUSE_CACHE_DIR="$CACHE" "$EPIFUSE" compile "$AM" --target sm_90a --shape 33,67
  expect 0 "cache list --target sm_90a" -- env -u EPIFUSE_CACHE EPIFUSE_CACHE_DIR="$CACHE" "$EPIFUSE" cache list --target sm_90a
  if [[ $(grep -c "^  disk kernel sm_90a " "$TMP/out") == 1 ]]; then pass "cache list --target sm_90a names its record"; else fail "cache list --target sm_90a names its record"; fi
  expect 0 "cache stats --target sm_80 --json" -- \
    env -u EPIFUSE_CACHE EPIFUSE_CACHE_DIR="$CACHE" "$EPIFUSE" cache stats --target sm_80 --json
  if "$PYTHON" -c 'import json,sys; d=json.load(sys.stdin); assert d["disk"]["files"]==0 and d["target"]=="sm_80"' <"$TMP/out" 2>"$TMP/err"; then
    pass "cache stats --target sm_80 counts no sm_90a record"
  else
    fail "cache stats --target sm_80 counts no sm_90a record"
  fi
else
  echo "skip  cache list --target (no NVRTC here)"
fi

# --- limits (docs/limits.md): refused at once, with a message naming the limit --------
# Each chain is valid but for one size, so that before the limits it ran (or hung,
# or crashed); now it exits 2 in well under a second. The first three are the
# reproducers that brought the limits; the rest are 10x a limit.
L=$TMP/limits
mkdir -p "$L"
"$PYTHON" - "$L" <<'PY'
import json, sys
d = sys.argv[1]
def spec(body, inputs=None):
    return {"epifuse": 1, "inputs": inputs or {"x": {"dtype": "f32"}}, **body}
def save(name, doc):
    with open(f"{d}/{name}.json", "w") as f:
        f.write(doc if isinstance(doc, str) else json.dumps(doc, separators=(",", ":")))
def key(i):  # short distinct identifiers: k0, k1, ..., k1z, ...
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    s = ""
    while True:
        s = digits[i % 36] + s
        i //= 36
        if not i:
            return "k" + s
def chain_inputs(n):  # x and n-1 more inputs, each added by the chain
    names = [key(i) for i in range(1, n)]
    return spec({"chain": names}, {"x": {"dtype": "f32"}, **{k: {"dtype": "f32"} for k in names}})
def outputs(n):
    return spec({"outputs": {key(i): {"dtype": "f32", "value": "x"} for i in range(n)}})
def ops(n):
    op = lambda i: {"name": f"v{i}", "op": "relu", "args": [f"v{i-1}" if i else "x"]}
    return spec({"ops": [op(i) for i in range(n)], "outputs": {"y": {"dtype": "f32", "value": f"v{n-1}"}}})
# The reproducers: an object of 100,000 keys, a chain of 60,000 inputs,
# a chain of 200,000 {"op": "scale"} steps, a million unclosed arrays.
save("keys_100000", spec({"chain": ["relu"], "name": "k"}) | {"inputs": {"x": {"dtype": "f32"}, **{key(i): 0 for i in range(1, 100000)}}})
save("inputs_60000", chain_inputs(60000))
save("scale_200000", spec({"chain": [{"op": "scale"}] * 200000}))
save("deep_1000000", "[" * 1000000 + "\n")
# 10x each limit, and each graph limit + 1.
save("depth_640", json.dumps(spec({"chain": ["relu"]}))[:-1] + ',"extra":' + "[" * 640 + "]" * 640 + "}")
save("keys_2560", spec({"chain": ["relu"], "extra": {key(i): 0 for i in range(2560)}}))
save("array_40960", spec({"chain": ["relu"] * 40960}))
save("bytes_10MiB", json.dumps(spec({"chain": ["relu"]})) + " " * (10 << 20))
save("ops_10240", ops(10240))
save("ops_1025", ops(1025))
save("chain_ops_1025", spec({"chain": ["relu"] * 1025}))
save("inputs_1280", chain_inputs(1280))
save("inputs_129", chain_inputs(129))
save("outputs_320", outputs(320))
save("outputs_33", outputs(33))
save("scale_2560", spec({"chain": [{"scale": 1.5}] * 2560}))
save("scale_257", spec({"chain": [{"scale": 1.5}] * 257}))
save("dropout_2560", spec({"chain": [{"dropout": 0.1}] * 2560}))
save("dropout_257", spec({"chain": [{"dropout": 0.1}] * 257}))
save("name_640", spec({"ops": [{"name": "n" * 640, "op": "relu", "args": ["x"]}], "outputs": {"y": {"dtype": "f32", "value": "n" * 640}}}))
save("name_65", spec({"ops": [{"name": "n" * 65, "op": "relu", "args": ["x"]}], "outputs": {"y": {"dtype": "f32", "value": "n" * 65}}}))
save("alpha_1e39", spec({"chain": [{"op": "scale", "alpha": 1e39}], "shape": [2, 2]}))
PY
BYTES="the limit of 1048576 bytes (1 MiB)"
# The acceptance bound of the deep reproducer: 0.1 s and 50 MB.
expect_fast 0.1 2 "a million nested [ (the crash)" "nesting deeper than the limit of 64 levels" -- \
  "$EPIFUSE" validate "$L/deep_1000000.json"
if [[ -x /usr/bin/time ]]; then
  /usr/bin/time -f '%M' -o "$TMP/rss" "$EPIFUSE" validate "$L/deep_1000000.json" >/dev/null 2>&1
  rss=$(tail -1 "$TMP/rss")
  if ((rss < 50000)); then pass "a million nested [ in $rss KB (< 50 MB)"; else fail "a million nested [ took $rss KB (want < 50 MB)"; fi
else
  echo "note  no /usr/bin/time: the memory bound of the million nested [ is not checked"
fi
expect_fast 1 2 "an object of 100,000 keys" "the limit of 256 keys in one object" -- "$EPIFUSE" validate "$L/keys_100000.json"
expect_fast 1 2 "a chain of 60,000 inputs" "$BYTES" -- "$EPIFUSE" validate "$L/inputs_60000.json"
expect_fast 1 2 "a chain of 200,000 scale steps" "$BYTES" -- "$EPIFUSE" validate "$L/scale_200000.json"
expect_fast 1 2 "10x depth" "nesting deeper than the limit of 64 levels" -- "$EPIFUSE" validate "$L/depth_640.json"
expect_fast 1 2 "10x keys in an object" "the limit of 256 keys in one object" -- "$EPIFUSE" validate "$L/keys_2560.json"
expect_fast 1 2 "10x array elements" "the limit of 4096 elements in one array" -- "$EPIFUSE" validate "$L/array_40960.json"
expect_fast 1 2 "10x chain bytes" "$BYTES" -- "$EPIFUSE" validate "$L/bytes_10MiB.json"
expect_fast 1 2 "10x ops" "the limit of 4096 elements in one array" -- "$EPIFUSE" validate "$L/ops_10240.json"
expect_fast 1 2 "ops + 1" "ops[1024]: relu: more than the limit of 1024 ops" -- "$EPIFUSE" validate "$L/ops_1025.json"
expect_fast 1 2 "chain ops + 1" "chain[1024]: relu: more than the limit of 1024 ops" -- "$EPIFUSE" validate "$L/chain_ops_1025.json"
expect_fast 1 2 "10x inputs" "the limit of 256 keys in one object" -- "$EPIFUSE" validate "$L/inputs_1280.json"
expect_fast 1 2 "inputs + 1" "more than the limit of 128 inputs" -- "$EPIFUSE" validate "$L/inputs_129.json"
expect_fast 1 2 "10x outputs" "the limit of 256 keys in one object" -- "$EPIFUSE" validate "$L/outputs_320.json"
expect_fast 1 2 "outputs + 1" "more than the limit of 32 outputs" -- "$EPIFUSE" validate "$L/outputs_33.json"
expect_fast 1 2 "10x scale ops" "chain[256]: scale: more than the limit of 256 scale ops" -- "$EPIFUSE" validate "$L/scale_2560.json"
expect_fast 1 2 "scale ops + 1" "chain[256]: scale: more than the limit of 256 scale ops" -- "$EPIFUSE" validate "$L/scale_257.json"
expect_fast 1 2 "10x dropouts" "chain[256]: dropout: more than the limit of 256 dropout ops" -- "$EPIFUSE" validate "$L/dropout_2560.json"
expect_fast 1 2 "dropouts + 1" "chain[256]: dropout: more than the limit of 256 dropout ops" -- "$EPIFUSE" validate "$L/dropout_257.json"
expect_fast 1 2 "10x name length" "has 640 characters, more than the limit of 64" -- "$EPIFUSE" validate "$L/name_640.json"
expect_fast 1 2 "name length + 1" "has 65 characters, more than the limit of 64" -- "$EPIFUSE" validate "$L/name_65.json"
expect_stderr 2 "alpha not finite in float32 (validate)" "chain[0].alpha: scale: alpha 1e+39 is not finite in float32" -- \
  "$EPIFUSE" validate "$L/alpha_1e39.json"
expect_stderr 2 "alpha not finite in float32 (run)" "not finite in float32" -- "$EPIFUSE" run "$L/alpha_1e39.json" --device cpu

# --- reading chains: never past the limit; pipes and process substitution work -------
expect_fast 1 2 "validate /dev/zero" "/dev/zero: more than $BYTES" -- "$EPIFUSE" validate /dev/zero
expect 0 "validate <(cat chain)" -- "$EPIFUSE" validate <(cat "$AM")
expect 0 "validate /dev/stdin" -- "$EPIFUSE" validate /dev/stdin <"$AM"
expect 0 "run /dev/stdin from a pipe" -- bash -c 'cat "$1" | "$2" run /dev/stdin --shape 3,4 --device cpu' _ "$AM" "$EPIFUSE"
expect_stderr 2 "a chain larger than the limit from a pipe" "/dev/stdin: more than $BYTES" -- \
  bash -c 'cat "$1" | "$2" validate /dev/stdin' _ "$L/bytes_10MiB.json" "$EPIFUSE"
printf '%s\0' "$(cat "$AM")" >"$TMP/nul_after.json"
"$PYTHON" -c 'import sys; t = open(sys.argv[1]).read().replace("\"add_mul\"", "\"add\u0000mul\""); open(sys.argv[2], "w").write(t)' \
  "$AM" "$TMP/nul_inside.json"
expect_stderr 2 "a NUL byte after the JSON" "NUL byte in the chain text" -- "$EPIFUSE" validate "$TMP/nul_after.json"
expect_stderr 2 "a NUL byte inside a string" "NUL byte in the chain text" -- "$EPIFUSE" validate "$TMP/nul_inside.json"

# --- output that cannot be written: exit code 5 --------------------------------------
expect_stderr 5 "emit > /dev/full" "standard output: write failed" -- bash -c '"$1" emit "$2" >/dev/full' _ "$EPIFUSE" "$AM"
expect_stderr 5 "validate > /dev/full" "standard output" -- bash -c '"$1" validate "$2" >/dev/full' _ "$EPIFUSE" "$AM"
expect_stderr 5 "validate --json > /dev/full" "standard output" -- bash -c '"$1" validate "$2" --json >/dev/full' _ "$EPIFUSE" "$AM"
expect_stderr 5 "emit --json > /dev/full" "standard output" -- bash -c '"$1" emit "$2" --json >/dev/full' _ "$EPIFUSE" "$AM"
expect_stderr 5 "run --json > /dev/full" "standard output" -- \
  bash -c '"$1" run "$2" --shape 3,4 --device cpu --json >/dev/full' _ "$EPIFUSE" "$AM"
expect_stderr 5 "--help > /dev/full" "standard output" -- bash -c '"$1" --help >/dev/full' _ "$EPIFUSE"
# A failure reported already keeps its exit code; the lost document is told too.
expect_stderr 2 "a user error with --json > /dev/full stays 2" "standard output" -- \
  bash -c '"$1" validate "$2" --json >/dev/full' _ "$EPIFUSE" "$TMP/no_such_chain.json"
expect_stderr 5 "run --output to /dev/full" "/dev/full: write failed" -- \
  "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --output out=/dev/full
mkdir -p "$TMP/full_dir" && ln -sf /dev/full "$TMP/full_dir/out.npy"
expect_stderr 5 "run --output-dir onto /dev/full" "out.npy: write failed" -- \
  "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --output-dir "$TMP/full_dir"
expect_stderr 5 "run --output-dir --json, an output cannot be written" "write failed" -- \
  "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --output-dir "$TMP/full_dir" --json
if "$PYTHON" -c 'import json,sys; assert json.load(sys.stdin)["error"]["kind"] == "io"' <"$TMP/out" 2>/dev/null; then
  pass "--json names an output failure kind \"io\""
else
  fail "--json names an output failure kind \"io\""
fi
expect_stderr 2 "run --output into a file, not a directory" "'/dev/full' is not a directory" -- \
  "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --output out=/dev/full/x.npy
if "$EPIFUSE" compile "$AM" --target sm_80 >/dev/null 2>&1; then
  expect_stderr 5 "compile --cubin /dev/full" "--cubin /dev/full: write failed" -- \
    "$EPIFUSE" compile "$AM" --target sm_80 --cubin /dev/full
else
  echo "skip  compile --cubin /dev/full (no NVRTC here)"
fi

# --- output files, user strings, names (tests/cli/output_checks.sh) ------------------
source "$(dirname "${BASH_SOURCE[0]}")/output_checks.sh"

# --- options: no silent defaults, messages name the limit ----------------------------
expect_stderr 2 "--blocks-per-sm -7" "not in range 0 to 64" -- "$EPIFUSE" emit "$AM" --blocks-per-sm -7
expect_stderr 2 "--blocks-per-sm 65" "not in range 0 to 64" -- "$EPIFUSE" emit "$AM" --blocks-per-sm 65
expect_stderr 2 "--threads 48" "multiple of 32 in [32, 1024]" -- "$EPIFUSE" emit "$AM" --threads 48
expect_stderr 2 "--threads 2048" "multiple of 32 in [32, 1024]" -- "$EPIFUSE" emit "$AM" --threads 2048
expect_stderr 2 "--vec 3" "{1,2,4,8,16}" -- "$EPIFUSE" emit "$AM" --vec 3
expect 0 "--threads 1024 --vec 16 --blocks-per-sm 64" -- "$EPIFUSE" emit "$AM" --threads 1024 --vec 16 --blocks-per-sm 64
expect_stderr 2 "run --shape ''" "--shape: must not be empty" -- "$EPIFUSE" run "$AM" --shape "" --device cpu
expect_stderr 2 "emit --shape ''" "--shape: must not be empty" -- "$EPIFUSE" emit "$AM" --shape ""
expect_stderr 2 "run --output-dir ''" "--output-dir: must not be empty" -- "$EPIFUSE" run "$AM" --device cpu --output-dir ""
expect_stderr 2 "validate ''" "must not be empty" -- "$EPIFUSE" validate ""
expect_stderr 2 "compile --target ''" "--target: must not be empty" -- "$EPIFUSE" compile "$AM" --target ""
# Targets before sm_80 are refused at once, naming the supported range (no NVRTC needed).
expect_stderr 2 "emit --target sm_75" "sm_80 and newer" -- "$EPIFUSE" emit "$AM" --target sm_75
expect_stderr 2 "compile --target sm_75" "sm_80 and newer" -- "$EPIFUSE" compile "$AM" --target sm_75 --shape 8,8
# AMD targets emit their source (no hipRTC needed); an unknown gfx name is refused with the list.
expect 0 "emit --target gfx90a" -- "$EPIFUSE" emit "$AM" --target gfx90a
expect_stderr 2 "emit --target gfx803" "an AMD target is one of gfx90a, gfx942" -- "$EPIFUSE" emit "$AM" --target gfx803
# --standalone writes the project's headers into the source: no #include of them is
# left, and each is written once (a variant for another build's bench, docs/bench.md).
expect 0 "emit --standalone (wgmma GEMM)" -- "$EPIFUSE" emit "$CHAINS/gemm_bias_relu_dropout.json" --shape 4096,4096,4096 --target sm_90a --standalone
if ! grep -q '#include "common/' "$TMP/out" && [[ $(grep -c '(inlined)' "$TMP/out") -ge 4 ]] &&
   [[ $(grep -c '^// ---- common/philox.cuh (inlined)' "$TMP/out") == 1 ]] && grep -q 'ef_philox4_draws' "$TMP/out"; then
  pass "emit --standalone has the headers written in, once each"
else
  fail "emit --standalone has the headers written in, once each"
fi
# An unnamed chain is named by its file, never printed as '' or with a leading space.
"$PYTHON" -c 'import json,sys; d = json.load(open(sys.argv[1])); d.pop("name"); json.dump(d, open(sys.argv[2], "w"))' \
  "$AM" "$TMP/unnamed.json"
expect 0 "validate an unnamed chain" -- "$EPIFUSE" validate "$TMP/unnamed.json"
if head -1 "$TMP/out" | grep -q "ok: unnamed, " && ! grep -q "''" "$TMP/out"; then
  pass "validate says 'unnamed'"
else
  fail "validate says 'unnamed'"
fi
expect 0 "run an unnamed chain" -- "$EPIFUSE" run "$TMP/unnamed.json" --shape 3,4 --device cpu
if head -1 "$TMP/out" | grep -q "^unnamed.json on cpu: "; then pass "run names an unnamed chain by its file"; else fail "run names an unnamed chain by its file"; fi
"$EPIFUSE" --help >"$TMP/out" 2>"$TMP/err"
if grep -q "5 an output" "$TMP/out"; then pass "--help footer has exit code 5"; else fail "--help footer has exit code 5"; fi

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
