#!/usr/bin/env bash
# The training line's GPU checks in few device calls (each call's machine starts
# bare and a call runs at most 10 minutes), logs and JSON under $OUT (default
# ./gpu-out). Build here first (tools/setup.sh) and carry build/.
#   tools/gpu_training_check.sh tests   # one GPU, ~6 min: the GPU test tier and
#                                       # every GPU pytest (CI runs the compile tiers)
#   tools/gpu_training_check.sh perf    # one GPU, ~10 min: seeds on the device against
#                                       # seeds by value, backward specs against PyTorch,
#                                       # the MLP blocks against their GEMMs, the
#                                       # training example's curves
#   tools/gpu_training_check.sh multi   # two GPUs (nvidia-h100-x2): DDP and FSDP2,
#                                       # tensors on cuda:1
# EPIFUSE_COMMIT names the commit where the tree was copied without its git history.
# Exits non-zero when a test failed or a script did.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
what=${1:-tests}
export EPIFUSE_LIBRARY=$PWD/build/libepifuse_c.so PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
status=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpu.txt"
echo "${EPIFUSE_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}" | tee "$out/commit.txt"

case $what in
  tests)
    echo "== GPU test tier (tools/gpu_suite.sh)"
    tools/gpu_suite.sh build/epifuse_tests "$out/suite" || status=1
    echo "== Python, GPU modules included"
    python3 -m pytest -q -rfEs tests/python --durations=15 -p no:cacheprovider 2>&1 | tee "$out/pytest.txt" | tail -15
    [[ ${PIPESTATUS[0]} == 0 ]] || status=1
    ;;
  perf)
    echo "== seeds read on the device against seeds by value (the same kernels), in turns"
    for round in 1 2; do
      for flag in "" --seeds-on-device; do
        for chain in gemm_bias_relu_dropout:4096,4096,4096 bias_gelu_dropout_add:16384,4096 \
                     scaled_masked_softmax_dropout:16384,4096; do
          build/epifuse bench "examples/chains/${chain%%:*}.json" --shape "${chain#*:}" --no-unfused --no-sweep \
            --no-cublas --no-tune $flag --json 2>/dev/null |
            python3 -c "import json,sys; d=json.load(sys.stdin); r=d['results'][0]; print('round $round', '${chain%%:*}', 'device' if d['seeds_on_device'] else 'value ', '%.4f ms' % r['fused']['ms'], '%.1f%% of copy' % (100 * r['fused']['of_copy']))" \
            | tee -a "$out/seeds_on_device.txt" || status=1
        done
      done
    done
    echo "== backward specs against PyTorch (default tiles through the module)"
    for dt in bf16 f32; do
      timeout 200 python3 tools/perf/backward_vs_torch.py --dtype=$dt --json="$out/backward_vs_torch_$dt.json" \
        2>&1 | grep -v -i warn | tail -40 || status=1
    done
    echo "== MLP blocks, forward + backward, against their GEMMs"
    for block in gpt llama; do
      timeout 150 python3 tools/perf/mlp_block.py --block $block --check --json "$out/mlp_block_$block.json" \
        2>&1 | grep -v -i warn | tail -20 || status=1
    done
    echo "== training example: loss curves with dropout off"
    timeout 90 python3 examples/python/train_mlp.py --block gpt --dropout 0 --steps 200 --check \
      --plot "$out/loss_curves.png" --json "$out/train_mlp.json" 2>&1 | tail -12 || status=1
    ;;
  multi)
    echo "== two GPUs: DDP, FSDP2, cuda:1"
    python3 -m pytest -q -rfEs tests/python/test_gpu_ddp.py tests/python/test_gpu_seeds_devices.py \
      -p no:cacheprovider 2>&1 | tee "$out/pytest_multi.txt" | tail -15
    [[ ${PIPESTATUS[0]} == 0 ]] || status=1
    build/epifuse_tests -tc="*own device*" 2>&1 | tail -3 || status=1
    ;;
  *)
    echo "usage: tools/gpu_training_check.sh tests|perf|multi" >&2
    exit 2
    ;;
esac
exit $status
