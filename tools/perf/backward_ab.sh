#!/usr/bin/env bash
# Two builds of the library through tools/perf/backward_vs_torch.py, in alternating
# processes (A B A B ...), for a change to the backward that a Python user gets: each
# process prints its own copy ceiling and torch rows, so every line carries a
# same-process baseline, and the rounds show the spread from one process to the next.
#   tools/perf/backward_ab.sh LIB_A LIB_B [ARGS...]    (ARGS go to backward_vs_torch.py)
#   ROUNDS: rounds (default 2). Each line of the output is prefixed "A" or "B".
# Example: tools/perf/backward_ab.sh build-main/libepifuse_c.so build/libepifuse_c.so \
#            --dtype=bf16 --chains=layernorm,add_rmsnorm
set -u
cd "$(dirname "$0")/../.."
a=${1:?usage: backward_ab.sh LIB_A LIB_B [ARGS...]} b=${2:?usage: backward_ab.sh LIB_A LIB_B [ARGS...]}
shift 2
for lib in "$a" "$b"; do
  [ -f "$lib" ] || { echo "backward_ab: no library $lib" >&2; exit 2; }
done
status=0
for round in $(seq "${ROUNDS:-2}"); do
  for side in A B; do
    lib=$a; [ $side = B ] && lib=$b
    echo "# round $round, $side = $lib"
    EPIFUSE_LIBRARY=$(realpath "$lib") PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} \
      python3 tools/perf/backward_vs_torch.py "$@" 2>&1 | grep -v "Warning" | sed "s/^/$side /"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  done
done
exit $status
