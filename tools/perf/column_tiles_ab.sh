#!/usr/bin/env bash
# The column-sum kernel's tiles pinned in alternate `epifuse bench` processes (Note
# [Staged column loads]): the bias+GELU+dropout+residual backward (epifuse grad of
# examples/chains/bias_gelu_dropout_add.json) at M*N = 2^27, rows of 1,024 to 262,144,
# and three training shapes; every tile's time over the first tile's in the same round.
#   tools/perf/column_tiles_ab.sh [OUTDIR]       (default column-tiles; build/epifuse)
# DTYPES (default "bf16 f32"), ROUNDS (2), TILES_bf16 and TILES_f32 (the first of each
# is the baseline; "default" runs --no-tune) and SHAPES override the sweep.
set -u
cd "$(dirname "$0")/../.."
out=${1:-column-tiles}; bin=${EPIFUSE:-build/epifuse}
mkdir -p "$out"
read -r -a dtypes <<< "${DTYPES:-bf16 f32}"
read -r -a shapes <<< "${SHAPES:-131072,1024 32768,4096 8192,16384 2048,65536 512,262144 16384,8192 8192,2048 8192,8192}"
TILES_bf16=${TILES_bf16:-t256v8g0 default t256v8g0s3 t512v8g1s2 t512v8g0s2}
TILES_f32=${TILES_f32:-t256v4g0 default t512v8g1 t256v8g2}
"$bin" grad examples/chains/bias_gelu_dropout_add.json --backward "$out/backward_f32.json" >/dev/null || exit 2
sed 's/"f32"/"bf16"/g' "$out/backward_f32.json" > "$out/backward_bf16.json"
for round in $(seq 1 "${ROUNDS:-2}"); do
  for dt in "${dtypes[@]}"; do
    tiles_var=TILES_$dt; read -r -a tiles <<< "${!tiles_var}"
    for shape in "${shapes[@]}"; do
      for t in "${tiles[@]}"; do
        if [[ $t == default ]]; then flag=(--no-tune); else flag=(--tile "$t"); fi
        "$bin" bench "$out/backward_$dt.json" --shape "$shape" "${flag[@]}" --no-unfused --no-sweep \
          --seeds-on-device --json > "$out/r${round}_${dt}_${shape/,/x}_$t.json" 2>/dev/null ||
          echo "bench failed: $dt $shape $t round $round" >&2
      done
    done
  done
done
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import collections, glob, json, os, sys
out = sys.argv[1]
rows = collections.defaultdict(list)
order = []
for f in sorted(glob.glob(os.path.join(out, "r*_*.json")), key=os.path.getmtime):
    rnd, dt, shape, tile = os.path.basename(f)[:-5].split("_", 3)
    try:
        r = json.load(open(f))["results"][0]
    except (ValueError, KeyError, IndexError):
        continue
    key = (dt, shape)
    if key not in order:
        order.append(key)
    rows[key].append((rnd, tile, r["fused"]["tile"], r["fused"]["ms"], r["fused"]["of_copy"]))
for key in order:
    dt, shape = key
    base = {}
    for rnd, tile, ran, ms, of_copy in rows[key]:
        base.setdefault(rnd, ms)
    by_tile = collections.defaultdict(list)
    for rnd, tile, ran, ms, of_copy in rows[key]:
        by_tile[(tile, ran)].append((ms / base[rnd], of_copy))
    for (tile, ran), v in by_tile.items():
        print(f"{dt:5} {shape:12} {tile:11} ran {ran:12} time/first "
              + " ".join(f"{r:.3f}" for r, _ in v) + "  of copy " + " ".join(f"{100 * c:.1f}%" for _, c in v))
PY
