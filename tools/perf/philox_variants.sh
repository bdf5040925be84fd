#!/usr/bin/env bash
# Compare Philox round implementations (build/variants/epifuse_*) on the bf16
# dropout-only and full chains; dump the SASS opcode histogram of each.
set -u
cd "$(dirname "$0")/../.."
tools/perf/ablate_bf16.sh >/dev/null 2>&1 || true   # writes $TMPDIR/ablate/*.json
tmp=${TMPDIR:-/tmp}/ablate
for bin in build/epifuse build/variants/epifuse_*; do
  echo "== $bin"
  for c in dropout full; do
    printf '%-8s ' $c
    $bin bench "$tmp/$c.json" --shape 16384,4096 --no-sweep --no-unfused --json 2>/dev/null |
      python3 -c "import json,sys; r=json.load(sys.stdin)['results'][0]; print(f\"{r['fused']['tile']:>12} {r['fused']['ms']:.4f} ms {100*r['fused']['of_copy']:5.1f}% of copy\")"
  done
  $bin compile "$tmp/full.json" --shape 16384,4096 --threads 512 --vec 8 --blocks-per-sm 16 --cubin /tmp/k.cubin >/dev/null
  cuobjdump -sass /tmp/k.cubin > "${OUT:-/tmp}/$(basename $bin).sass"
  grep -oE '^\s+/\*[0-9a-f]+\*/\s+(@!?U?P[0-9T] )?[A-Z0-9_.]+' "${OUT:-/tmp}/$(basename $bin).sass" |
    awk '{print $NF}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -14 | tr '\n' ' '
  echo
done
