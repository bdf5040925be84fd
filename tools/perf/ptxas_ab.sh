#!/usr/bin/env bash
# A/B of NVRTC/ptxas options on GEMM kernels (EPIFUSE_NVRTC_OPTIONS), alternating
# in one process: tune --tile times fixed tiles. Usage: ptxas_ab.sh BIN "OPTIONS"
B=$1 OPT=$2 C=examples/chains
one() {
  "$B" tune $C/gemm.json --shape 4096,4096,4096 --tile 128x256x32w2x4s4g8 --tile 256x128x32w4x2s6g8 2>/dev/null | grep "^  [0-9]"
  "$B" tune $C/gemm_bias_relu_dropout.json --shape 4096,4096,4096 --tile 128x256x32w2x4s4g8 --tile 256x128x32w4x2s6g8 2>/dev/null | grep "^  [0-9]"
  "$B" tune $C/gemm_bias_relu_dropout.json --shape 1024,1024,1024 --tile 64x128x32w2x2s6g8 --tile 64x64x64w2x2s3g8 2>/dev/null | grep "^  [0-9]"
  "$B" tune $C/gemm_bias_relu_dropout.json --shape 128,256,256 --tile 32x32x64w2x2s4g8 2>/dev/null | grep "^  [0-9]"
}
for round in 1 2; do
  echo "## round $round: default"; one
  echo "## round $round: $OPT"; EPIFUSE_NVRTC_OPTIONS="$OPT" one
done
