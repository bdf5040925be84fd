#!/usr/bin/env bash
# Profile GEMM kernels with Nsight Compute on the GPU machine: each epifuse tile given, and
# cuBLAS (through PyTorch) at the same shape, with the metrics that split compute from L2
# and launch costs.  Usage: ncu_gemm.sh BIN CHAIN M,N,K TILE... ; writes to stdout.
set -u
bin=$1 chain=$2 shape=$3; shift 3
metrics=gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread,\
launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,\
sm__warps_active.avg.pct_of_peak_sustained_active,\
sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,\
lts__t_bytes.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,\
dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,\
l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum
for t in "$@"; do
  echo "== epifuse $chain $shape tile $t"
  ncu --metrics "$metrics" --csv --page raw "$bin" run "$chain" --shape "$shape" --tile "$t" --device cuda 2>&1 \
    | grep -v '^==PROF' | tail -n +1 | python3 -c '
import csv,sys
rows=list(csv.reader(sys.stdin))
hdr=[r for r in rows if r and r[0]=="ID"]
if not hdr: print("".join(",".join(r) for r in rows[-5:])); sys.exit()
h=hdr[0]; data=[r for r in rows[rows.index(h)+2:] if len(r)==len(h)]
for d in data:
  print(d[h.index("Kernel Name")][:40], {k:v for k,v in zip(h,d) if "__" in k})'
done
IFS=, read -r M N K <<<"$shape"
echo "== cuBLAS (torch.matmul f16) $shape"
ncu --metrics "$metrics" --csv --page raw --launch-skip 2 --launch-count 1 python3 -c "
import torch
a=torch.randn($M,$K,device='cuda',dtype=torch.half); b=torch.randn($K,$N,device='cuda',dtype=torch.half)
for _ in range(3): c=a@b
torch.cuda.synchronize()" 2>&1 | grep -v '^==PROF' | python3 -c '
import csv,sys
rows=list(csv.reader(sys.stdin))
hdr=[r for r in rows if r and r[0]=="ID"]
if not hdr: print(rows[-5:]); sys.exit()
h=hdr[0]; data=[r for r in rows[rows.index(h)+2:] if len(r)==len(h)]
for d in data:
  print(d[h.index("Kernel Name")][:110], {k:v for k,v in zip(h,d) if "__" in k})'
