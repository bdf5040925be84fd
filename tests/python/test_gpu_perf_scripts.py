"""GPU tier: tools/perf/strided_vs_dense.py and tools/perf/batched_vs_cublas.py run tiny
as subprocesses: every strided position bit-identical to its dense copy with the
columns beside a strided output untouched, every batched configuration one batched
launch that matches torch, each row timed every round and written to the JSON
(skipped without torch and a CUDA GPU)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

PERF = ROOT / "tools" / "perf"


def run(script, *argv):
    env = dict(os.environ)
    if not os.environ.get("EPIFUSE_TEST_INSTALLED"):
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, str(PERF / script), *argv], capture_output=True, text=True, env=env,
                       timeout=900)
    print(r.stdout[-4000:], r.stderr[-4000:])
    return r


def test_tiny_strided_run_is_bit_identical_at_every_position(tmp_path):
    out = tmp_path / "strided.json"
    r = run("strided_vs_dense.py", "--gemm-shape", "256,192,128", "--ew-shape", "96,256", "--row-shape", "64,512",
            "--rounds", "3", "--warmup", "1", "--launches", "2", "--json", str(out))
    assert r.returncode == 0
    record = json.loads(out.read_text())
    assert record["gpu"] and record["torch"] == torch.__version__
    got = [(x["family"], x["dtype"], x["position"]) for x in record["results"]]
    assert got == ([("gemm", dt, p) for dt in ("f16", "bf16") for p in ("a", "b", "residual", "out", "all")]
                   + [("elementwise", "bf16", p) for p in ("x", "residual", "out", "all")]
                   + [("row", "bf16", p) for p in ("x", "residual", "out", "all")])
    for x in record["results"]:
        assert x["passed"] and x["identical"] and x["gap_untouched"], x
        assert len(x["dense"]["rounds_ms"]) == len(x["strided"]["rounds_ms"]) == 3
        assert x["dense"]["ms"] > 0 and x["strided"]["ms"] > 0 and x["ratio"] > 0
        for name, ld in x["ld"].items():  # rows of K (b: stored as the weight's [N, K]) or N, 64 more apart
            rows, cols = x["shapes"][name]
            assert ld == (rows if (x["family"], name) == ("gemm", "b") else cols) + 64, (name, ld)


def test_tiny_batched_run_takes_one_batched_launch_and_matches_torch(tmp_path):
    out = tmp_path / "batched.json"
    r = run("batched_vs_cublas.py", "--shape", "128,96,64", "--shape", "64,128,256", "--batches", "3,4",
            "--b-layouts", "row,col", "--rounds", "3", "--warmup", "1", "--launches", "2", "--json", str(out))
    assert r.returncode == 0
    record = json.loads(out.read_text())
    assert len(record["results"]) == 2 * 2 * 2 * 2
    for x in record["results"]:
        assert x["passed"], x
        assert set(x["rows"]) == {"bmm", "epifuse", "eager", "epifuse+epi"}
        assert all(len(row["rounds_ms"]) == 3 for row in x["rows"].values())
        for info in x["launch"].values():
            assert info["batch"] == x["batch"], info  # one batched launch, not folded into M
    assert set(record["summary"]) == {"epifuse/bmm", "epifuse+epi/eager", "epifuse+epi/bmm"}
    assert record["summary"]["epifuse/bmm"]["of"] == len(record["results"])
