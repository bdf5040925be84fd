#!/usr/bin/env bash
# Where the fused dual GEMM loses per clock against cuBLAS's two GEMMs (docs/perf/dual-gemm.md,
# "What bounds it": 83-86% of the tensor peak at the held clock against cuBLAS's 89-90%).
# Nsight Compute at its default locked clock on both, one launch each, with the
# sections that split the time: speed of light (tensor pipe, shared memory, L2),
# compute and memory workload tables, warp states.
#   tools/perf/ncu_dual.sh BIN OUTDIR [M,N,K] [DTYPE] [TILE...]
#       (default 4096,4096,4096, f16, the default tile)
# Writes OUTDIR/fused_<tile>.txt and OUTDIR/cublas.txt, and prints the lines that
# compare them (duration, SM throughput, tensor pipe, shared memory, L2, issue).
set -u
cd "$(dirname "$0")/../.."
bin=$1 out=$2 shape=${3:-4096,4096,4096} dtype=${4:-f16}; shift $(( $# < 4 ? $# : 4 ))
tiles=("$@"); ((${#tiles[@]})) || tiles=("")
py=${PYTHON:-/opt/torch/.venv/bin/python3}
mkdir -p "$out"
m=${shape%%,*}; rest=${shape#*,}; n=${rest%%,*}; k=${rest#*,}
sed -e "s/\"f16\"/\"$dtype\"/g" examples/chains/gating.json > "$out/gating.json"
sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables
          --section WarpStateStats --section LaunchStats)
summary() {  # the lines worth comparing from an ncu text report
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|Issue Slots Busy|Executed Ipc Active|Shared Memory|Stall|Warp Cycles Per Issued|Registers Per Thread|Grid Size|Cluster Size" "$1" | head -40
}
for t in "${tiles[@]}"; do
  name=fused_${t:-default}
  ncu "${sections[@]}" -k regex:'^ef_' --launch-count 1 "$bin" run "$out/gating.json" --shape "$shape" \
      ${t:+--tile "$t"} --device cuda > "$out/$name.txt" 2>&1
  echo "== $name"; summary "$out/$name.txt"
done
torch_dtype=$([[ $dtype == bf16 ]] && echo bfloat16 || echo half)
ncu "${sections[@]}" -k regex:'nvjet|gemm|xmma|cutlass' --launch-skip 4 --launch-count 2 "$py" -c "
import torch
a = torch.randn($m, $k, device='cuda', dtype=torch.$torch_dtype)
b0 = torch.randn($k, $n, device='cuda', dtype=torch.$torch_dtype); b1 = torch.randn($k, $n, device='cuda', dtype=torch.$torch_dtype)
for _ in range(3): torch.matmul(a, b0); torch.matmul(a, b1)
torch.cuda.synchronize()" > "$out/cublas.txt" 2>&1
echo "== cuBLAS two GEMMs (torch.matmul)"; summary "$out/cublas.txt"
