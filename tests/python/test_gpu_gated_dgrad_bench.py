"""GPU tier: tools/perf/gated_dgrad.py run tiny as a subprocess: the fused dgrad must agree
with the two steps (the script exits 1 otherwise), its strided outputs with its dense ones
bit for bit, and every row and piece must be timed against the same round's floor
(skipped without torch >= 2.4, triton and a CUDA GPU)."""
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
if not hasattr(torch.library, "register_autograd"):
    pytest.skip(f"torch {torch.__version__} has no torch.library.register_autograd (2.4+)", allow_module_level=True)

SCRIPT = ROOT / "tools" / "perf" / "gated_dgrad.py"
ROWS = ["two_step", "fused", "two_step_cat", "fused_cat"]
PIECES = ["copy [T,F]", "dy @ Wd", "[dg du] @ [Wg; Wu]", "dg @ Wg, addmm_ du @ Wu", "backward (h, g, u -> dg, du)",
          "backward into the halves", "fused dgrad", "fused dgrad into the halves"]


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_tiny_run_checks_and_times_every_row_and_piece(activation):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, str(SCRIPT), "--shape", "256,128,384", "--activation", activation,
                        "--rounds", "2", "--pieces"], capture_output=True, text=True, env=env, timeout=900)
    print(r.stdout[-4000:], r.stderr[-4000:])
    assert r.returncode == 0, f"gated_dgrad.py exited {r.returncode}: {r.stderr[-1500:] or r.stdout[-1500:]}"
    head = next(line for line in r.stdout.splitlines() if line.startswith(f"{activation} T,H,F = 256,128,384"))
    assert "2 rounds: cublas" in head
    for row in ROWS:
        m = re.search(rf"\| {re.escape(row)} ([0-9.]+) ms ([0-9.]+)x \(([0-9.]+)-([0-9.]+)\)", head)
        assert m, (row, head)
        ms, ratio, lo, hi = map(float, m.groups())
        assert ms > 0 and 0 < lo <= ratio <= hi
    err = float(re.search(r"rel\. error ([0-9.e+-]+)", head).group(1))
    assert 0 < err <= 2e-2  # dh rounded to bf16 in the two steps: never exactly equal, never far
    for piece in PIECES:
        m = re.search(rf"^  {re.escape(piece)} +([0-9.]+) ms, model ([0-9.]+) ms: ([0-9.]+)x$", r.stdout, re.M)
        assert m, (piece, r.stdout[-2000:])
        assert all(float(v) > 0 for v in m.groups())
