#!/usr/bin/env bash
# Count what the sm_90a GEMM epilogue executes (docs/perf/gemm.md; count first, docs/perf/README.md):
# for the GEMM alone, bias+ReLU and bias+ReLU+dropout at one tile, Nsight Compute's
# executed SASS instructions per opcode (SourceCounters), summed over the kernel and
# divided by the outputs, then each chain's opcodes minus the GEMM alone's: the
# epilogue's instructions per output element, by opcode. Also the instructions per
# pipe and the tensor pipe's activity. Writes OUTDIR/count_<chain>.txt and prints the
# comparison.
#   tools/perf/epilogue_count.sh BIN OUTDIR [M,N,K] [TILE]  (default 4096^3, f16, h128x256x64s4g8)
set -u
cd "$(dirname "$0")/../.."
bin=$1 out=$2 shape=${3:-4096,4096,4096} tile=${4:-h128x256x64s4g8}
chains=${CHAINS:-"examples/chains/gemm.json examples/chains/gemm_bias_relu.json examples/chains/gemm_bias_relu_dropout.json"}
mkdir -p "$out"
metrics=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,\
smsp__inst_executed.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum,\
smsp__inst_executed_pipe_fmaheavy.sum,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed_pipe_xu.sum,\
smsp__inst_executed_pipe_uniform.sum,smsp__issue_active.avg.pct_of_peak_sustained_elapsed
for c in $chains; do
  name=$(basename "$c" .json)
  rep=$out/count_$name
  ncu --kernel-name regex:^ef_ --section SourceCounters --metrics "$metrics" -f -o "$rep" \
    "$bin" run "$c" --shape "$shape" --tile "$tile" --device cuda > /dev/null 2>&1
  ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$rep.sass.csv" 2>/dev/null
  ncu -i "$rep.ncu-rep" --page raw --csv --metrics "$metrics" > "$rep.raw.csv" 2>/dev/null
done
python3 - "$out" "$shape" $chains <<'PY'
import csv, os, sys, collections
out, shape, chains = sys.argv[1], sys.argv[2], sys.argv[3:]
m, n, k = (int(x) for x in shape.split(","))
elements = m * n
def num(s):
    try: return float(s.replace(",", ""))
    except ValueError: return 0.0
def opcodes(path):
    rows = list(csv.reader(open(path)))
    h = next(i for i, r in enumerate(rows) if "Source" in r)
    head = rows[h]; col = {x: i for i, x in enumerate(head)}
    ex = "Instructions Executed" if "Instructions Executed" in col else next(x for x in head if x.startswith("Instructions Executed"))
    count = collections.Counter()
    for r in rows[h + 1:]:
        if len(r) != len(head): continue
        src = r[col["Source"]].strip()
        if src.startswith("@"): src = src.split(None, 1)[1] if " " in src else src
        op = src.split(" ")[0] if src else "?"
        count[op] += num(r[col[ex]])
    return count
def raw(path):
    rows = [r for r in csv.reader(open(path)) if r]
    h = next(r for r in rows if r[0] == "ID"); d = rows[rows.index(h) + 2]
    return {a.split(".")[0] if not a.startswith("smsp__inst_executed") else a.rsplit(".", 1)[0]: b for a, b in zip(h, d) if "__" in a}
res = {}
for c in chains:
    name = os.path.basename(c)[:-5]
    base = os.path.join(out, "count_" + name)
    try:
        ops = opcodes(base + ".sass.csv")
    except Exception as e:
        print(name, "no SASS counts:", e); continue
    try:
        r = raw(base + ".raw.csv")
    except Exception as e:
        print(name, "no metrics:", e); r = {}
    res[name] = (ops, r)
lines = [f"== {shape}, warp instructions x 32 / outputs = thread instructions per output element"]
for name, (ops, r) in res.items():
    lines.append(f"-- {name}: " + ", ".join(f"{k.replace('smsp__inst_executed_pipe_', 'pipe_').replace('smsp__inst_executed', 'all')}={float(v.replace(',', '')) * 32 / elements:.2f}" if k.startswith("smsp__inst") else f"{k}={v}" for k, v in r.items()))
names = list(res)
if names:
    base_ops = res[names[0]][0]
    for name in names[1:]:
        ops = res[name][0]
        diff = {op: (ops[op] - base_ops.get(op, 0)) * 32 / elements for op in set(ops) | set(base_ops)}
        total = sum(diff.values())
        lines.append(f"-- {name} minus {names[0]}: {total:.2f} thread instructions an element; by opcode:")
        lines.append("   " + ", ".join(f"{op} {v:+.2f}" for op, v in sorted(diff.items(), key=lambda x: -abs(x[1])) if abs(v) >= 0.05))
text = "\n".join(lines)
print(text)
open(os.path.join(out, "epilogue_count.txt"), "w").write(text + "\n")
PY
