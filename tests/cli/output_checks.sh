# Sourced by tests/cli/run_examples.sh (its helpers and variables in scope): output
# files written whole or not at all, user strings escaped on the terminal, and names
# with control characters refused.
# --- output files: each written once, whole or not at all (docs/cli.md) ----------------
# Two outputs that resolve to one file are refused before any work (exit 2),
# naming both; before, the later silently replaced the earlier with exit code 0.
W=$TMP/writes
mkdir -p "$W/d"
"$PYTHON" -c 'import json,sys; json.dump({"epifuse": 1, "name": "two", "inputs": {"x": {"dtype": "f32"}},
  "ops": [{"name": "s", "op": "relu", "args": ["x"]}, {"name": "p", "op": "sigmoid", "args": ["x"]}],
  "outputs": {"s": {"dtype": "f32"}, "p": {"dtype": "f32"}}, "shape": [3, 4]}, open(sys.argv[1], "w"))' "$W/two.json"
TWO=$W/two.json
# same_file_refused NAME -- ARGS...: run TWO with ARGS (in $W, for relative paths)
# and expect the refusal naming s and p.
EPIFUSE_ABS=$(realpath "$EPIFUSE")
same_file_refused() {
  local name=$1
  shift 2
  (cd "$W" && "$EPIFUSE_ABS" run "$TWO" --device cpu "$@") >"$TMP/out" 2>"$TMP/err"
  judge "$name" 2 $? "name the same file" || return 0
  if grep -qF -- "output s" "$TMP/err" && grep -qF -- "output p" "$TMP/err"; then pass "$name"; else fail "$name (does not name both outputs)"; fi
}
rm -f "$W/f.npy"
same_file_refused "--output s=F --output p=F" -- --output s=f.npy --output p=f.npy
if [[ ! -e $W/f.npy ]]; then pass "a refused run writes nothing"; else fail "a refused run writes nothing"; fi
same_file_refused "--output s=F --output p=./F" -- --output s=f.npy --output p=./f.npy
same_file_refused "--output s=F --output p=D/../F" -- --output s=f.npy --output p=d/../f.npy
same_file_refused "--output-dir D --output p=D/s.npy" -- --output-dir d --output p=d/s.npy
same_file_refused "--output-dir D --output p=D/s.npy, D made by the run" -- --output-dir new --output p=new/s.npy
same_file_refused "--output-dir D --output p=D/s.npy, relative and absolute" -- --output-dir d --output p="$W/d/s.npy"
ln -sf f.npy "$W/link.npy"
same_file_refused "--output s=F --output p=a symbolic link to F" -- --output s=f.npy --output p=link.npy
"$EPIFUSE" run "$TWO" --device cpu --output s="$W/f.npy" >/dev/null 2>&1
ln -f "$W/f.npy" "$W/hard.npy"
same_file_refused "--output s=F --output p=a hard link of F" -- --output s=f.npy --output p=hard.npy
# compile --cubin F with several targets writes F.<target>: one target given
# twice would write one file twice. Refused before any compile (no NVRTC needed).
expect_stderr 2 "compile --cubin with a target given twice" "name the same file" -- \
  "$EPIFUSE" compile "$AM" --target sm_80 --target sm_80 --cubin "$W/k.cubin"
if grep -qF -- "--cubin for --target sm_80 and --cubin for --target sm_80" "$TMP/err"; then
  pass "the refusal names both --target options"
else
  fail "the refusal names both --target options"
fi
expect 0 "--output s=F --output p=G (two files)" -- "$EPIFUSE" run "$TWO" --device cpu --output s="$W/s1.npy" --output p="$W/p1.npy"
expect 0 "--output-dir D and --output p=G (different files)" -- "$EPIFUSE" run "$TWO" --device cpu --output-dir "$W/d2" --output p="$W/p2.npy"

# A write that fails part-way (here a file-size limit, as a full disk would)
# exits 5 and leaves the previous file as it was, with no temporary beside it.
# (Without SIGXFSZ ignored the process would die and leave the file cut short.)
A=$W/atomic
mkdir -p "$A"
"$EPIFUSE" run "$AM" --shape 3,4 --device cpu --output out="$A/out.npy" >/dev/null 2>&1
cp "$A/out.npy" "$TMP/good.npy"
# intact NAME: out.npy in $A is the good file and nothing else is there.
intact() {
  if cmp -s "$A/out.npy" "$TMP/good.npy" && [[ $(ls -A "$A") == out.npy ]]; then pass "$1"; else fail "$1 ($(ls -A "$A" | tr '\n' ' '))"; fi
}
expect_stderr 5 "ulimit -f: --output exits 5" "out.npy: write failed: File too large" -- \
  bash -c 'ulimit -f 4 && exec "$1" run "$2" --shape 64,64 --device cpu --output out="$3"' _ "$EPIFUSE" "$AM" "$A/out.npy"
intact "ulimit -f: the previous --output file is intact, no temporary left"
expect_stderr 5 "ulimit -f: --output-dir exits 5" "out.npy: write failed: File too large" -- \
  bash -c 'ulimit -f 4 && exec "$1" run "$2" --shape 64,64 --device cpu --output-dir "$3"' _ "$EPIFUSE" "$AM" "$A"
intact "ulimit -f: the previous --output-dir file is intact, no temporary left"
expect_stderr 5 "ulimit -f with --json: exit 5, kind io" "write failed" -- \
  bash -c 'ulimit -f 4 && exec "$1" run "$2" --shape 64,64 --device cpu --output-dir "$3" --json' _ "$EPIFUSE" "$AM" "$A"
if "$PYTHON" -c 'import json,sys; assert json.load(sys.stdin)["error"]["kind"] == "io"' <"$TMP/out" 2>/dev/null; then
  pass "ulimit -f with --json: the document says io"
else
  fail "ulimit -f with --json: the document says io"
fi
intact "ulimit -f with --json: the previous file is intact"
expect 0 "a good run replaces the file" -- "$EPIFUSE" run "$AM" --shape 64,64 --device cpu --output out="$A/out.npy"
if "$PYTHON" -c 'import numpy as np, sys; assert np.load(sys.argv[1]).shape == (64, 64)' "$A/out.npy" && [[ $(ls -A "$A") == out.npy ]]; then
  pass "the replaced file is whole, no temporary left"
else
  fail "the replaced file is whole, no temporary left"
fi
# SIGTERM while the output is being written (SIGINT would do the same, but a
# background job of a script starts with SIGINT ignored, and stays so): the
# process ends by the signal, the temporary is removed and the file is whole,
# the old one or the new one. The signal is sent as soon as the write shows:
# a temporary appears, or (writing in place) the file changes. Before, the
# file was left cut short.
S=$W/signal
mkdir -p "$S"
cp "$TMP/good.npy" "$S/out.npy"
touch -d '1 minute ago' "$S/out.npy"
touch "$S/.ref"
"$EPIFUSE" run "$AM" --shape 2048,4096 --device cpu --output out="$S/out.npy" >"$TMP/out" 2>"$TMP/err" &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  if compgen -G "$S/.*.epifuse-tmp" >/dev/null || [[ $S/out.npy -nt $S/.ref ]]; then
    kill -TERM "$pid" 2>/dev/null
    break
  fi
done
wait "$pid"
rc=$?
rm -f "$S/.ref"
if ((rc == 0)); then
  echo "skip  SIGTERM during a write (the run ended before the write could be caught)"
elif ((rc != 143)); then
  fail "SIGTERM during a write (exit code $rc, want 143: ended by SIGTERM)"
elif [[ $(ls -A "$S") == out.npy ]] &&
     "$PYTHON" -c 'import numpy as np, sys; assert np.load(sys.argv[1]).shape in ((3, 4), (2048, 4096))' "$S/out.npy" 2>/dev/null; then
  pass "SIGTERM during a write: the file is whole, no temporary left"
else
  fail "SIGTERM during a write: the file is whole, no temporary left ($(ls -A "$S" | tr '\n' ' '))"
fi

# A directory that takes no new file: exit 5 naming the file. /proc refuses
# root too; a chmod'ed directory only refuses others.
expect_stderr 5 "--output into /proc (no new files there)" "/proc/out.npy: cannot write" -- \
  "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --output out=/proc/out.npy
if (($(id -u) == 0)); then
  echo "skip  --output into a read-only directory or onto a read-only file (root writes there anyway)"
else
  mkdir -p "$W/ro" && cp "$TMP/good.npy" "$W/ro/out.npy" && chmod 555 "$W/ro"
  expect_stderr 5 "--output into a read-only directory" "out.npy: cannot write: Permission denied" -- \
    "$EPIFUSE" run "$AM" --shape 64,64 --device cpu --output out="$W/ro/out.npy"
  if cmp -s "$W/ro/out.npy" "$TMP/good.npy"; then pass "the read-only directory's file is intact"; else fail "the read-only directory's file is intact"; fi
  chmod 755 "$W/ro"
  # A read-only file stays refused, though a rename in its directory could replace it.
  chmod 444 "$W/ro/out.npy"
  expect_stderr 5 "--output onto a read-only file" "out.npy: cannot write: Permission denied" -- \
    "$EPIFUSE" run "$AM" --shape 64,64 --device cpu --output out="$W/ro/out.npy"
  if cmp -s "$W/ro/out.npy" "$TMP/good.npy"; then pass "the read-only file is intact"; else fail "the read-only file is intact"; fi
fi

# --- user strings on the terminal: control characters escaped ------------------------
# A file name, an option's value or a chain name could otherwise clear the
# screen or recolour it; human-readable output shows them as \x1b.
ESC=$'\e'
E=$TMP/esc
mkdir -p "$E"
cp "$AM" "$E/${ESC}[31mred.json"
"$PYTHON" -c 'import json,sys; d = json.load(open(sys.argv[1])); d.pop("name"); json.dump(d, open(sys.argv[2], "w"))' \
  "$AM" "$E/${ESC}[2Junnamed.json"
# no_raw_escape NAME FILE WANT: FILE has no ESC byte and says WANT.
no_raw_escape() {
  if ! grep -q "$ESC" "$2" && grep -qF -- "$3" "$2"; then pass "$1"; else fail "$1"; fi
}
expect 0 "validate a chain file named with an escape" -- "$EPIFUSE" validate "$E/${ESC}[31mred.json"
no_raw_escape "validate shows the file name escaped" "$TMP/out" '\x1b[31mred.json: ok'
expect 0 "run an unnamed chain from a file named with an escape" -- \
  "$EPIFUSE" run "$E/${ESC}[2Junnamed.json" --shape 3,4 --device cpu --output out="$E/${ESC}[1mo.npy"
no_raw_escape "run shows the chain's file name escaped" "$TMP/out" '\x1b[2Junnamed.json on cpu'
no_raw_escape "run shows the output file escaped" "$TMP/out" '\x1b[1mo.npy'
expect 0 "run --json with an output file named with an escape" -- \
  "$EPIFUSE" run "$AM" --shape 3,4 --device cpu --output out="$E/${ESC}[1mo.npy" --json
if ! grep -q "$ESC" "$TMP/out" &&
   "$PYTHON" -c 'import json,sys; assert json.load(sys.stdin)["outputs"][0]["files"] == [sys.argv[1]]' "$E/${ESC}[1mo.npy" <"$TMP/out"; then
  pass "run --json escapes the file name as JSON (\\u001b) and keeps it exact"
else
  fail "run --json escapes the file name as JSON (\\u001b) and keeps it exact"
fi
expect_stderr 2 "an option's value with an escape, in an error" '\x1b[2J' -- "$EPIFUSE" run "$AM" --shape "${ESC}[2J" --device cpu
no_raw_escape "the error shows the value escaped" "$TMP/err" "--shape '\\x1b[2J'"
expect_stderr 2 "a missing chain file named with an escape" '\x1b[31m' -- "$EPIFUSE" validate "$E/${ESC}[31mnone.json"
no_raw_escape "the error shows the file name escaped" "$TMP/err" 'none.json'

# --- names: control characters and NUL are refused, never printed or cut short --------
"$PYTHON" - "$E" <<'PY'
import json, sys
d = sys.argv[1]
base = {"epifuse": 1, "inputs": {"x": {"dtype": "f32"}}, "chain": ["relu"]}
json.dump(base | {"name": "\x1b[2Jcleared"}, open(f"{d}/name_esc.json", "w"))   # written as \u001b
json.dump(base | {"name": "add\x00mul"}, open(f"{d}/name_nul.json", "w"))         # written as \u0000
json.dump(base | {"inputs": {"x": {"dtype": "f32"}, "b\x00ias": {"dtype": "f32"}}, "chain": ["relu", "b\x00ias"]},
          open(f"{d}/input_nul.json", "w"))
json.dump(base | {"shape": [4.0, 8]}, open(f"{d}/shape_float.json", "w"))
PY
expect_stderr 2 "a chain name with an escape is refused" 'name: the chain name must not contain control characters, got "\x1b[2Jcleared"' -- \
  "$EPIFUSE" validate "$E/name_esc.json"
no_raw_escape "the refusal shows the name escaped" "$TMP/err" 'cleared'
expect_stderr 2 "a chain name with \\u0000 is refused, whole" 'got "add\x00mul"' -- "$EPIFUSE" validate "$E/name_nul.json"
expect_stderr 2 "an input name with \\u0000 is refused, whole" "input name 'b\\x00ias' must be an identifier" -- \
  "$EPIFUSE" run "$E/input_nul.json" --shape 3,4 --device cpu
expect_stderr 2 '"shape": [4.0, 8] is refused as "epifuse": 1.0 is' \
  "shape[0]: a dimension is a non-negative integer written without a fraction or exponent, got 4.0" -- \
  "$EPIFUSE" validate "$E/shape_float.json"

