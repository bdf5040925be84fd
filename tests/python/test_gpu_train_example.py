"""GPU tier: examples/python/train_mlp.py run small as a subprocess: eager, torch.compile
and epifuse.nn training the same block from the same weights, --check holding
epifuse's f32 loss curve to eager's for the gpt and the llama block, and a bf16 run
with dropout that must train and time (skipped without torch >= 2.4 and a CUDA GPU)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
if not hasattr(torch.library, "register_autograd"):
    pytest.skip(f"torch {torch.__version__} has no torch.library.register_autograd (2.4+)", allow_module_level=True)

SCRIPT = ROOT / "examples" / "python" / "train_mlp.py"
SMALL = ["--tokens", "256", "--hidden", "64", "--ffn", "256", "--steps", "30", "--warmup", "5"]
RUNS = ("eager", "torch.compile", "epifuse")


def train(tmp_path, *args):
    """Runs the script with `args` on the small shape; its exit status, stdout and JSON record."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "train.json"
    r = subprocess.run([sys.executable, str(SCRIPT), *SMALL, *args, "--json", str(out),
                        "--plot", str(tmp_path / "loss.png")], capture_output=True, text=True, env=env, timeout=900)
    print(r.stdout[-4000:], r.stderr[-4000:])
    return r.returncode, r.stdout, json.loads(out.read_text()) if out.exists() else None


def assert_trained_and_timed(record, steps=30):
    assert set(record["results"]) == set(RUNS)
    for name in RUNS:
        r = record["results"][name]
        assert len(r["losses"]) == len(r["step_ms"]) == steps
        assert r["median_ms"] > 0
        assert r["losses"][-1] < r["losses"][0], name  # the block fits part of sin(x)
    assert record["gpu"] and record["torch"] == torch.__version__


@pytest.mark.parametrize("block", ["gpt", "llama"])
def test_epifuse_loss_curve_follows_eager_in_f32(tmp_path, block):
    rc, stdout, record = train(tmp_path, "--block", block, "--dtype", "f32", "--dropout", "0", "--check")
    assert rc == 0
    assert "epifuse's loss curve follows eager's" in stdout
    assert record["check"]["passed"] and record["check"]["bound_rel"] == 1e-4
    assert record["results"]["epifuse"]["max_rel_loss_diff"] <= 1e-4
    assert_trained_and_timed(record)


def test_bf16_with_dropout_trains_and_times(tmp_path):
    rc, _, record = train(tmp_path, "--block", "gpt", "--dtype", "bf16")
    assert rc == 0
    assert record["config"]["p"] == 0.1 and record["check"] is None
    assert_trained_and_timed(record)
