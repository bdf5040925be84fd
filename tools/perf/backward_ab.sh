#!/usr/bin/env bash
# Two builds through tools/perf/backward_vs_torch.py, in alternating processes
# (A B A B ...), for a change to the backward that a Python user gets: each process
# prints its own copy ceiling and torch rows, so every line carries a same-process
# baseline, and the rounds show the spread from one process to the next.
#   tools/perf/backward_ab.sh A B [ARGS...]    (ARGS go to backward_vs_torch.py)
# A and B: a library (libepifuse_c.so; the Python module of this tree), or a checkout
# (a git worktree) with build/libepifuse_c.so: its library and its python/.
#   ROUNDS: rounds (default 2). Each line of the output is prefixed "A" or "B".
# Example: git worktree add ../ef-main main && (build it), then
#   tools/perf/backward_ab.sh ../ef-main . --dtype=bf16 --chains=layernorm,add_rmsnorm
set -u
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { echo "usage: backward_ab.sh A B [ARGS...]" >&2; exit 2; }
a=$1 b=$2
shift 2
where() {  # A or B -> "LIBRARY PYTHONDIR"
  if [ -d "$1" ]; then
    echo "$(realpath "$1")/build/libepifuse_c.so $(realpath "$1")/python"
  else
    echo "$(realpath "$1") $PWD/python"
  fi
}
for x in "$a" "$b"; do
  read -r lib py <<< "$(where "$x")"
  [ -f "$lib" ] && [ -d "$py" ] || { echo "backward_ab: no library $lib or no module $py" >&2; exit 2; }
done
status=0
for round in $(seq "${ROUNDS:-2}"); do
  for side in A B; do
    x=$a; [ $side = B ] && x=$b
    read -r lib py <<< "$(where "$x")"
    echo "# round $round, $side = $lib, $py"
    EPIFUSE_LIBRARY=$lib PYTHONPATH=$py${PYTHONPATH:+:$PYTHONPATH} \
      python3 tools/perf/backward_vs_torch.py "$@" 2>&1 | grep -v "Warning" | sed "s/^/$side /"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  done
done
exit $status
