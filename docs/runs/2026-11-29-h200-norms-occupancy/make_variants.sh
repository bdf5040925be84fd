#!/bin/bash
# Writes the variants of smem-tree-sweep.txt under scratch_dev/v/ (one folder a case, lbB.cu for
# each launch bound B) and their register counts (nvcc -Xptxas -v, sm_90a) to scratch_dev/v/regs.txt.
cd "$(dirname "$0")/../../.."
root=$PWD tmp=$(mktemp -d)
P=docs/runs/2026-11-29-h200-norms-backward-probes  # mktree.py
rm -rf scratch_dev/v; mkdir -p scratch_dev/v
list=scratch_dev/v/list.txt; : > $list
for c in layernorm add_rmsnorm; do
  cp examples/backward/${c}_backward.json scratch_dev/v/${c}_bf16.json
  sed 's/"bf16"/"f32"/g' scratch_dev/v/${c}_bf16.json > scratch_dev/v/${c}_f32.json
done
add() { # chain dtype shape tile
  local c=$1 d=$2 sh=$3 t=$4 case=$1_$2_${3#*,}_$4
  mkdir -p scratch_dev/v/$case
  build/epifuse emit scratch_dev/v/${c}_$d.json --shape $sh --target sm_90a --tile $t > $tmp/o.cu 2>/dev/null || { echo "skip $case (emit)"; rmdir scratch_dev/v/$case; return; }
  local thr=$(grep -oE "constexpr int THREADS = [0-9]+" $tmp/o.cu | grep -oE "[0-9]+$")
  for mb in 1 2 3 4; do
    (( thr * mb <= 2048 )) || continue
    (cd $P && python3 mktree.py $tmp/o.cu $root/scratch_dev/v/$case/lb$mb.cu $mb >/dev/null 2>&1) || continue
    local r=$(/usr/local/cuda-13.0/bin/nvcc -I templates -arch=sm_90a -cubin -o /dev/null -Xptxas -v scratch_dev/v/$case/lb$mb.cu 2>&1 | grep -oE 'Used [0-9]+ registers|[0-9]+ bytes spill stores' | grep -oE "^[0-9]+|Used [0-9]+" | tr '\n' ' ')
    echo "$case lb$mb: $r" >> scratch_dev/v/regs.txt
  done
  ls scratch_dev/v/$case/*.cu >/dev/null 2>&1 && echo "$c $d $sh $t $case" >> $list || { echo "skip $case (no variant)"; rmdir scratch_dev/v/$case; }
}
for c in layernorm add_rmsnorm; do
  for t in r1024v8x1c2s2 r512v8x2c2s2 r256v8x2c4s2 r512v8x1c4s2; do add $c bf16 8192,16384 $t; done
  for t in r512v8x2c8s2 r1024v8x2c4s2 r256v8x2c16s2 r1024v8x1c8s2; do add $c bf16 2048,65536 $t; done
  for t in r512v8x4c16s2 r1024v8x2c16s2; do add $c bf16 512,262144 $t; done
  for t in r1024v4x2c2s2 r512v4x2c4s2 r256v4x2c8s2; do add $c f32 8192,16384 $t; done
  for t in r1024v4x2c8s2 r512v4x2c16s2; do add $c f32 2048,65536 $t; done
done
cat $list | wc -l
