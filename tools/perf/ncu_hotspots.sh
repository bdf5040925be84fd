#!/usr/bin/env bash
# Where an epifuse kernel's warps stall, per SASS instruction: Nsight Compute's
# warp-state sampling (SourceCounters), the N hottest instructions with their
# stall reasons. Usage: ncu_hotspots.sh BIN CHAIN M,N,K TILE [N] [OUTDIR]
# NCU_ARGS passes more options to ncu (e.g. "--clock-control none": clocks as
# the power limit leaves them, instead of locked to base).
set -eu
bin=$1 chain=$2 shape=$3 tile=$4 top=${5:-30} out=${6:-/tmp}
rep=$out/hot_$(basename "$chain" .json)_$tile
ncu ${NCU_ARGS:-} --section SourceCounters --section WarpStateStats -f -o "$rep" \
  "$bin" run "$chain" --shape "$shape" --tile "$tile" --device cuda >/dev/null 2>&1
ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$rep.csv" 2>/dev/null
python3 - "$rep.csv" "$top" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
h = next(i for i, r in enumerate(rows) if "Source" in r)
head, body = rows[h], rows[h + 1:]
col = {k: i for i, k in enumerate(head)}
samp = next(k for k in head if k.startswith("Warp Stall Sampling (All"))
def num(s):
    try: return float(s.replace(",", ""))
    except ValueError: return 0.0
print("columns:", head, file=sys.stderr)
total = sum(num(r[col[samp]]) for r in body if len(r) == len(head))
stalls = [k for k in head if k.startswith("stall_")] or []
print(f"{sys.argv[1]}: {total:.0f} samples")
for r in sorted((r for r in body if len(r) == len(head)), key=lambda r: -num(r[col[samp]]))[:int(sys.argv[2])]:
    top = sorted(((num(r[col[k]]), k) for k in head if "Sampl" not in k and k not in ("Address", "Source") and num(r[col[k]]) > 0 and "stall" in k.lower()), reverse=True)[:3]
    print(f"{num(r[col[samp]]) / total * 100:5.1f}%  {r[col['Address']]:>6}  {r[col['Source']][:60]:60}  {top}")
PY
