#!/usr/bin/env bash
# Checks that tools/gpu_groups.sh runs every GPU test case exactly once: each case of
# the gpu, gpu_nvidia and gpu_sm90 suites is listed by one group's doctest filters and
# by no other. A case no group lists would never run in tools/gpu_suite.sh (a new file
# in tests/gpu/ that did not join a group, a case renamed out of its group's -tc
# pattern); one that two groups list runs twice, at once, on the one GPU. Needs no
# GPU: the test binary lists every case whatever this machine can run.
#   tools/check_gpu_groups.sh [TESTS_BIN]     (default build/epifuse_tests)
# Prints what is wrong and exits 1, else prints one line and exits 0.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${1:-build/epifuse_tests}
[[ -x $bin ]] || { echo "check_gpu_groups: $bin: not built" >&2; exit 2; }
source tools/gpu_groups.sh

# The case names of a listing, one a line (doctest prints them between two rules).
list_cases() {
  "$bin" -ltc "$@" | awk '/^=+$/ { inside = !inside; next } inside'
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
list_cases -ts="gpu*" | sort > "$tmp/all"
: > "$tmp/grouped"
for i in "${!gpu_groups[@]}"; do
  mapfile -t args < <(gpu_group_args "$i")
  list_cases "${args[@]}" | sed "s/^/$i	/" >> "$tmp/grouped"
done

status=0
total=$(wc -l < "$tmp/all")
if [[ $total -eq 0 ]]; then
  echo "check_gpu_groups: $bin lists no GPU test case" >&2
  exit 1
fi
missing=$(cut -f2- "$tmp/grouped" | sort -u | comm -23 "$tmp/all" -)
if [[ -n $missing ]]; then
  echo "check_gpu_groups: in no group of tools/gpu_groups.sh (tools/gpu_suite.sh would never run them):" >&2
  sed 's/^/  /' <<< "$missing" >&2
  status=1
fi
twice=$(cut -f2- "$tmp/grouped" | sort | uniq -d)
if [[ -n $twice ]]; then
  echo "check_gpu_groups: in more than one group of tools/gpu_groups.sh:" >&2
  while IFS= read -r name; do
    groups=$(awk -F'\t' -v n="$name" '$2 == n { printf "%s%s", sep, $1; sep = ", " }' "$tmp/grouped")
    echo "  $name (groups $groups)" >&2
  done <<< "$twice"
  status=1
fi
[[ $status == 0 ]] && echo "check_gpu_groups: ok ($total GPU test cases in ${#gpu_groups[@]} groups, each in one)"
exit $status
