#!/usr/bin/env bash
# The probes of docs/dropout-mask.md in one run on the GPU machine:
#  1. tools/perf/mask_kernel_probe.cu: the mask kernel's time against cuBLAS's bf16 GEMM
#     per shape (built here with nvcc; needs the CUDA toolkit and cuBLAS);
#  2. the epilogue's side, GPT fc1's dgrad (bf16, bias + GELU [+ dropout 0.1], as
#     `epifuse grad --as-gemm-epilogue` writes it), on the default tile of each shape:
#     - the dropout chain's fused kernel (Philox in the staged epilogue) against its
#       `bits` variant (keep bits read from memory), in one `epifuse bench` process;
#     - the dropout-free chain's fused kernel against its `fragbits` variant (dropout's
#       factor from bits on the fragment epilogue), in another.
#     The variants fail the output check on purpose (their bits drop everything), so
#     bench exits 1 for them; their rows are timed all the same (tools/perf/variant_probe.py).
#   [EPIFUSE_BIN=build/epifuse] tools/perf/mask_probe.sh OUT_DIR
#   SHAPES: M,N,K list (default 8192,8192,2048 16384,16384,4096 8192,8192,8192)
#   TARGET: the target to emit for (default sm_90a, the wgmma epilogues the design is
#   about: `epifuse emit` does not ask the GPU, and without it writes sm_80's mma.sync)
set -u
cd "$(dirname "$0")/../.."
bin=${EPIFUSE_BIN:-build/epifuse}
out=${1:?usage: mask_probe.sh OUT_DIR}
mkdir -p "$out"
nvcc=${NVCC:-nvcc}
command -v "$nvcc" > /dev/null || nvcc=/usr/local/cuda/bin/nvcc
if "$nvcc" -O3 -std=c++17 -I templates -gencode=arch=compute_90a,code=sm_90a -o "$out/mask_kernel_probe" \
    tools/perf/mask_kernel_probe.cu -lcublas; then
  "$out/mask_kernel_probe" | tee "$out/mask_kernel.txt"
else
  echo "mask_probe: the mask kernel probe did not build" >&2
fi
for drop in 1 0; do
  ops='{"name": "z", "op": "add", "args": ["acc", "bias"]}, {"name": "y", "op": "gelu_tanh", "args": ["z"]}'
  ((drop)) && ops='{"name": "z", "op": "add", "args": ["acc", "bias"]}, {"name": "g", "op": "gelu_tanh", "args": ["z"]},
    {"name": "y", "op": "dropout", "args": ["g"], "p": 0.1}'
  cat > "$out/fc1_$drop.json" <<EOF
{"epifuse": 1, "name": "fc1", "mainloop": {"kind": "gemm", "a": "bf16", "b": "bf16", "a_layout": "row", "b_layout": "col"},
 "inputs": {"bias": {"dtype": "bf16", "broadcast": "row"}}, "ops": [$ops], "outputs": {"y": {"dtype": "bf16"}}}
EOF
  "$bin" grad "$out/fc1_$drop.json" --wrt acc --wrt bias --as-gemm-epilogue dy --backward "$out/dgrad_$drop.json" > /dev/null
done
for shape in ${SHAPES:-8192,8192,2048 16384,16384,4096 8192,8192,8192}; do
  tag=${shape//,/x}
  for drop in 1 0; do
    probe=$( ((drop)) && echo bits || echo fragbits)
    k="$out/dgrad_${drop}_$tag.cu"
    "$bin" emit "$out/dgrad_$drop.json" --shape "$shape" --target "${TARGET:-sm_90a}" > "$k"
    python3 tools/perf/variant_probe.py "$k" "$probe" > /dev/null || continue
    echo "== dgrad $( ((drop)) && echo with || echo without) dropout, $shape, variant $probe"
    "$bin" bench "$out/dgrad_$drop.json" --shape "$shape" --no-tune --no-sweep --no-unfused --repeats 20 \
      --variant "${k%.cu}_$probe.cu" 2>&1 | grep -E "cuBLAS GEMM alone|fused|variant|tile" | grep -v "^ *check"
  done
done | tee "$out/epilogues.txt"
