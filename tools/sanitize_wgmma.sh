#!/bin/bash
# compute-sanitizer memcheck and racecheck over every wgmma tile at a small ragged shape
# (the dual tiles on the gating chain, f16 row/row and bf16 col/col)
# Usage (on an sm_90a GPU machine): EPIFUSE=build/epifuse tools/sanitize_wgmma.sh
# (ONLY=dual: the dual tiles alone)
cd "$(dirname "$0")/.."
colcol() { sed 's/"row"}/"col"}/; s/"a_layout": "row"/"a_layout": "col"/; s/"f16"/"bf16"/g' "$1" > "$2"; }
colcol examples/chains/gemm_bias_relu_dropout.json /tmp/colcol.json
colcol examples/chains/gating.json /tmp/gating_colcol.json

# sweep LABEL "TILES" CHAIN...: each tool over each tile and chain, one line each.
sweep() {
  local label=$1 tiles=$2; shift 2
  for t in $tiles; do
    for tool in memcheck racecheck; do
      for c in "$@"; do
        r=$(timeout 120 compute-sanitizer --tool $tool ${EPIFUSE:-build/epifuse} run $c --shape 328,392,200 --tile $t --device cuda 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rror:" | head -2 | tr '\n' ' ')
        echo "$label$t $tool $(basename $c): $r"
      done
    done
  done
}

sweep "dual " "h128x128x64s4g8 h128x64x64s6g8 h128x64x64s6g8p h64x128x64s5g8p h128x64x64s6g8c2p" \
  examples/chains/gating.json /tmp/gating_colcol.json
[[ ${ONLY:-} == dual ]] && exit 0
sweep "" "h128x256x64s4g8 h128x256x64s4g8c2 h256x128x64s4g8 h256x128x64s4g8c2 h128x128x64s6g8 h128x128x64s6g8p h128x64x64s8g8 h128x128x64s5g8c2p h128x64x64s3g1p h128x64x64s8g8c2" \
  examples/chains/gemm_bias_relu_dropout.json /tmp/colcol.json
