#!/usr/bin/env bash
# epifuse binaries on explicit row tiles, interleaved (a b ... a b ...): the
# row family's A/B. BINS lists the binaries (default build-new/epifuse_base
# build-new/epifuse); arguments are specs "CHAIN N TILE...", default the
# long-row and block shapes below. Each line: BINARY CHAIN N TILE time...
set -u
cd "$(dirname "$0")/../.."
source tools/perf/row_chains.sh
tmp=${TMPDIR:-/tmp}/row_ab; mkdir -p "$tmp"
write_row_chains "$tmp"
read -r -a bins <<< "${BINS:-build-new/epifuse_base build-new/epifuse}"
specs=("$@")
[ ${#specs[@]} -eq 0 ] && specs=(
  "softmax_bf16 65536 r1024v8x8s1b r512v8x8c2s1b r512v8x4c4s1b r256v8x4c8s2"
  "softmax_bf16 262144 r512v8x8c8s1b r256v8x8c16s1b r1024v8x4c8s2k r512v8x4c16s2"
  "softmax_f32 262144 r256v4x16c16s1b r1024v4x8c8 r256v4x8c16s2"
  "attention_bf16 65536 r256v8x8c4s1b r512v8x4c4s2k r256v8x4c8s1b"
  "attention_bf16 262144 r256v8x8c16s1b r512v8x8c8s1b r512v8x4c16s2k"
  "layernorm_bf16 262144 r512v8x8c8s1b r256v8x8c16s1b r1024v8x4c8s2k"
  "add_rmsnorm_bf16 262144 r512v8x4c16s1b r512v8x8c8s1b r1024v8x2c16s3k"
  "softmax_bf16 16384 r512v8x4s1kb r1024v8x2b"
  "attention_bf16 16384 r512v8x4s2k r256v8x8s1b"
  "layernorm_bf16 65536 r512v8x8c2s1b r1024v8x8s1b"
  "softmax_f32 65536 r256v4x16c4s1b r512v4x8c4s1b")
for spec in "${specs[@]}"; do
  set -- $spec; c=$1 n=$2; shift 2
  m=$(((1 << 27) / n)); args=(); for t in "$@"; do args+=(--tile "$t"); done
  for round in 1 2; do
    for bin in "${bins[@]}"; do
      $bin tune $tmp/$c.json --shape $m,$n "${args[@]}" 2>/dev/null | grep -E "^  r" | sed "s|^|$(basename $bin) $c $n |"
    done
  done
done
