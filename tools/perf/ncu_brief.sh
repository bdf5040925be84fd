#!/usr/bin/env bash
# Nsight Compute on epifuse GEMM tiles, the few metrics that say where a wgmma
# kernel's time goes (tensor pipe, L2, DRAM, issue, stalls), one line each.
# Usage: ncu_brief.sh BIN CHAIN M,N,K TILE...
set -u
bin=$1 chain=$2 shape=$3; shift 3
metrics=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,\
lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,\
smsp__inst_executed.sum,launch__grid_size,launch__cluster_size,\
smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,\
smsp__average_warp_latency_issue_stalled_wait.ratio,smsp__average_warp_latency_issue_stalled_membar.ratio
for t in "$@"; do
  ncu --metrics "$metrics" --csv --page raw "$bin" run "$chain" --shape "$shape" --tile "$t" --device cuda 2>/dev/null |
    python3 -c '
import csv,sys
rows=[r for r in csv.reader(sys.stdin) if r]
h=next(r for r in rows if r[0]=="ID"); d=rows[rows.index(h)+2]
keep=("gpu__","sm__pipe","lts__t","lts__th","dram__th","smsp__inst","smsp__average","launch__grid_size","launch__cluster_size")
print(sys.argv[1], {k.split(".")[0]:v for k,v in zip(h,d) if k.startswith(keep)})' "$t"
done
