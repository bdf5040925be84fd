#!/bin/bash
# Prepared for the next GPU run: every default tile of the norms' backward (layernorm and
# add+RMSNorm, bf16 and f32, N = 1024 ... 262144, M*N = 2^27) against the same kernel with
# the lean column tree (lean_tree.cuh: a call of its own, one (sum, item) pair at a time,
# two children in flight), timed in turns by `epifuse bench --variant`.
#   run_lean.sh EPIFUSE_BIN OUTDIR
set -eu
here=$(cd "$(dirname "$0")" && pwd) bin=$(realpath "$1") out=$(realpath -m "$2")
mkdir -p "$out/src"
cd "$out/src"
for c in layernorm add_rmsnorm; do
  cp "$here/../../../examples/backward/${c}_backward.json" "${c}_bf16.json"
  sed 's/"bf16"/"f32"/g' "${c}_bf16.json" > "${c}_f32.json"
  for d in bf16 f32; do
    for n in 1024 4096 16384 65536 262144; do
      m=$(( (1 << 27) / n )) s=${c}_${d}_$n
      # the default tile on this GPU, from a one-repeat bench (emit alone does not know the GPU)
      tile=$("$bin" bench "${c}_$d.json" --shape $m,$n --no-tune --no-sweep --no-unfused --no-cublas --repeats 3 --json 2>/dev/null |
             python3 -c "import json,sys; print(json.load(sys.stdin)['results'][0]['fused']['tile'])")
      "$bin" emit "${c}_$d.json" --shape $m,$n --target sm_90a --tile "$tile" > "$s.cu"
      (cd "$here" && python3 mklean.py "$out/src/$s.cu" "$out/src/lean_$s.cu" 2) || { echo "$s: no lean variant"; continue; }
      "$bin" bench "${c}_$d.json" --shape $m,$n --no-tune --no-sweep --no-unfused --repeats 30 --json \
        --variant "lean_$s.cu" > "$out/$s.json" 2> "$out/$s.err" || echo "$s: bench failed"
      python3 -c "
import json,sys
r=json.load(open('$out/$s.json'))['results'][0]; v=list(r['variants'].values())[0]
print('%-28s %-18s fused %.1f%% of copy, lean %.3fx (%s)' % ('$s', r['fused']['tile'], 100*r['fused']['of_copy'], v.get('of_fused',0), 'ok' if v.get('ok') else v))"  || true
    done
  done
done
