"""GPU tier, two GPUs: examples/python/train_ddp.py under torchrun with DDP and with
FSDP2, its --check comparing the first step's distributed gradients with a
single-process run on the whole batch (skipped without torch >= 2.4, NCCL and two
CUDA GPUs)."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
    pytest.skip("needs two CUDA GPUs", allow_module_level=True)
if not hasattr(torch.library, "register_autograd") or not torch.distributed.is_nccl_available():
    pytest.skip("needs torch >= 2.4 with NCCL", allow_module_level=True)


@pytest.mark.parametrize("mode", [[], ["--fsdp"]], ids=["ddp", "fsdp2"])
def test_distributed_gradients_equal_one_process_and_training_runs(mode):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        str(ROOT / "examples" / "python" / "train_ddp.py"), "--check", "--steps", "20", *mode],
                       capture_output=True, text=True, env=env, timeout=600)
    print(r.stdout[-4000:], r.stderr[-4000:])
    assert r.returncode == 0
    assert "gradients equal the single-process run" in r.stdout
    losses = [float(line.split()[3]) for line in r.stdout.splitlines() if line.startswith("step")]
    assert len(losses) >= 2 and losses[-1] < losses[0]
