"""GPU tier: tools/perf/mlp_block.py run tiny as a subprocess, both blocks: it must check
epifuse against eager (--check), time every row per step and in loops (--loop), and
write them all to its JSON (skipped without torch >= 2.4 and a CUDA GPU)."""
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

SCRIPT = ROOT / "tools" / "perf" / "mlp_block.py"
ROWS = {"gemms", "eager", "compile", "epifuse", "efused", "epiop"}


def test_tiny_run_checks_and_times_every_row(tmp_path):
    out = tmp_path / "mlp_block.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, str(SCRIPT), "--shape", "256,128,512", "--rounds", "3", "--warmup", "1",
                        "--loop", "2", "--check", "--json", str(out)], capture_output=True, text=True, env=env, timeout=900)
    print(r.stdout[-4000:], r.stderr[-4000:])
    assert r.returncode == 0, f"mlp_block.py exited {r.returncode}: {r.stderr[-1500:] or r.stdout[-1500:]}"
    record = json.loads(out.read_text())
    assert record["gpu"] and record["torch"] == torch.__version__ and record["date"]
    assert record["commit"] is None or len(record["commit"]["sha"]) == 40
    assert [(c["block"], c["tokens"], c["hidden"], c["ffn"]) for c in record["results"]] == \
        [("gpt", 256, 128, 512), ("llama", 256, 128, 512)]
    for c in record["results"]:
        assert c["check"]["passed"], c["check"]
        assert len(c["gemms"]) == (6 if c["block"] == "gpt" else 9)
        assert set(c["rows"]) == ROWS
        for name, row in c["rows"].items():
            if name == "compile" and row["failed"]:  # reported, not fatal: torch.compile's own trouble
                assert row["failed"].strip()
                continue
            assert row["failed"] is None, (c["block"], name, row["failed"])
            assert len(row["rounds_ms"]) == 3 and all(t > 0 for t in row["rounds_ms"])
            assert row["ms"] > 0 and row["ratio_to_gemms"] > 0
            assert len(row["loop_rounds_ms"]) == 3 and row["loop_ms"] > 0 and row["loop_ratio_to_gemms"] > 0
        assert c["rows"]["gemms"]["ratio_to_gemms"] == 1.0 and c["rows"]["gemms"]["loop_ratio_to_gemms"] == 1.0
