#!/bin/bash
# compute-sanitizer memcheck and racecheck over every wgmma tile at a small ragged shape
# (the dual tiles on the gating chain, f16 row/row and bf16 col/col)
# Usage (on an sm_90a GPU machine): EPIFUSE=build/epifuse tools/sanitize_wgmma.sh
# (ONLY=dual: the dual tiles alone)
cd "$(dirname "$0")/.."
sed 's/"row"}/"col"}/; s/"a_layout": "row"/"a_layout": "col"/; s/"f16"/"bf16"/g' examples/chains/gemm_bias_relu_dropout.json > /tmp/colcol.json
sed 's/"row"}/"col"}/; s/"a_layout": "row"/"a_layout": "col"/; s/"f16"/"bf16"/g' examples/chains/gating.json > /tmp/gating_colcol.json
for t in h128x128x64s4g8 h128x64x64s6g8 h128x64x64s6g8p h64x128x64s5g8p h128x64x64s6g8c2p; do
  for tool in memcheck racecheck; do
    for c in examples/chains/gating.json /tmp/gating_colcol.json; do
      r=$(timeout 120 compute-sanitizer --tool $tool ${EPIFUSE:-build/epifuse} run $c --shape 328,392,200 --tile $t --device cuda 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rror:" | head -2 | tr '\n' ' ')
      echo "dual $t $tool $(basename $c): $r"
    done
  done
done
[[ ${ONLY:-} == dual ]] && exit 0
for t in h128x256x64s4g8 h128x256x64s4g8c2 h256x128x64s4g8 h256x128x64s4g8c2 h128x128x64s6g8 h128x128x64s6g8p h128x64x64s8g8 h128x128x64s5g8c2p h128x64x64s3g1p h128x64x64s8g8c2; do
  for tool in memcheck racecheck; do
    for c in examples/chains/gemm_bias_relu_dropout.json /tmp/colcol.json; do
      r=$(timeout 120 compute-sanitizer --tool $tool ${EPIFUSE:-build/epifuse} run $c --shape 328,392,200 --tile $t --device cuda 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rror:" | head -2 | tr '\n' ' ')
      echo "$t $tool $(basename $c): $r"
    done
  done
done
