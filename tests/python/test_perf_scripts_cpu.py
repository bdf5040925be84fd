"""tools/perf/strided_vs_dense.py and tools/perf/batched_vs_cublas.py without a GPU:
their --dry-run builds the chains, lists every strided position with its strides, and
asks epifuse.batching for each batched configuration's launch plan, which must be one
batched launch, never folded into M; their arguments are checked. The timed runs need
a GPU (test_gpu_perf_scripts.py). tools/perf/default_vs_tuned.py's and
tools/perf/elementwise_default_vs_tuned.py's measurements are checked with their epifuse
calls stood in for."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

PERF = ROOT / "tools" / "perf"


def run(script, *argv):
    env = dict(os.environ)
    if not os.environ.get("EPIFUSE_TEST_INSTALLED"):
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, str(PERF / script), *argv], capture_output=True, text=True, env=env,
                          timeout=300)


def test_strided_dry_run_lists_every_position_with_its_strides():
    r = run("strided_vs_dense.py", "--dry-run")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(line.startswith("gemm f16: chain 'linear', inputs ['a', 'b', 'bias', 'residual']") for line in lines)
    assert any(line.startswith("row bf16: chain 'rmsnorm', inputs ['x', 'residual', 'weight'], outputs ['y', 'h']")
               for line in lines)
    positions = [line.split()[0] for line in lines if line.startswith("  ")]
    # gemm f16 and bf16: a, b, residual, out, all; elementwise: x, residual, out, all; row: the same
    assert positions == ["a", "b", "residual", "out", "all"] * 2 + ["x", "residual", "out", "all"] * 2
    text = r.stdout
    assert "b [4096, 4096] strides (1, 4160)" in text  # the weight's rows K + 64 apart, read column-major
    assert "a [4096, 4096] strides (4160, 1)" in text
    assert "out y [16384, 8192] strides (8256, 1); out h [16384, 8192] strides (8256, 1)" in text


def test_strided_dry_run_takes_the_layernorm_chain_and_a_pad():
    r = run("strided_vs_dense.py", "--dry-run", "--families", "row", "--row-chain", "layernorm", "--pad", "8",
            "--row-shape", "64,1000")
    assert r.returncode == 0, r.stderr
    assert "row bf16: chain 'layernorm', inputs ['x', 'weight', 'bias'], outputs ['y']" in r.stdout
    assert [line.split()[0] for line in r.stdout.splitlines() if line.startswith("  ")] == ["x", "out", "all"]
    assert "x [64, 1000] strides (1008, 1)" in r.stdout


@pytest.mark.parametrize("argv", [["--pad", "0"], ["--families", "gemm,attention"], ["--gemm-shape", "64,64"],
                                  ["--dropout", "1.0"]])
def test_strided_refuses_bad_arguments(argv):
    r = run("strided_vs_dense.py", "--dry-run", *argv)
    assert r.returncode == 2 and "error:" in r.stderr


def test_batched_dry_run_plans_one_batched_launch_for_every_configuration():
    r = run("batched_vs_cublas.py", "--dry-run", "--b-layouts", "row,col")
    assert r.returncode == 0, r.stdout + r.stderr
    configs = [line for line in r.stdout.splitlines() if not line.startswith("#")]
    assert len(configs) == 2 * 2 * 5 * 4  # dtypes x layouts x shapes x batches
    for line in configs:
        assert line.count("one batched launch") == 2 and "NOT batched" not in line, line
    largest = next(line for line in configs if line.startswith("bf16 row 256x2048,2048,2048:"))
    assert "skipped" not in largest  # the sweep's largest fits the default 20 GB
    assert "batch strides (4194304, 4194304)" in largest


def test_batched_dry_run_skips_what_exceeds_the_memory_limit():
    r = run("batched_vs_cublas.py", "--dry-run", "--dtypes", "bf16", "--shape", "2048,2048,2048", "--batches",
            "32,256", "--max-gb", "8")
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if not line.startswith("#")]
    assert "skipped" not in lines[0] and lines[1].endswith("skipped (over --max-gb)")


@pytest.mark.parametrize("argv", [["--batches", "1,32"], ["--shape", "512,512"], ["--b-layouts", "diag"],
                                  ["--epilogues", "softmax"], ["--max-gb", "0"]])
def test_batched_refuses_bad_arguments(argv):
    r = run("batched_vs_cublas.py", "--dry-run", *argv)
    assert r.returncode == 2 and "error:" in r.stderr


@pytest.mark.parametrize("argv", [["--few-rows", "--validation"], ["--wide-192", "--shapes", "64,64,64"],
                                  ["--quick", "--rescore", "somewhere"]])
def test_default_vs_tuned_takes_one_set_of_shapes(argv):
    r = run("default_vs_tuned.py", *argv)
    assert r.returncode == 2 and "not allowed with" in r.stderr


def test_default_vs_tuned_times_the_rule_s_default_not_an_earlier_tune_s_choice(monkeypatch):
    # A tune keeps its choice in the disk cache and a later bench of the same chain and
    # shape reads it; the bench of the default must run without the cache, the tune with it.
    monkeypatch.syspath_prepend(str(PERF))
    if not os.environ.get("EPIFUSE_TEST_INSTALLED"):
        monkeypatch.syspath_prepend(str(ROOT / "python"))
    import default_vs_tuned as dvt

    calls = []

    def fake_run(argv, capture_output, text, env=None):
        calls.append((argv, env))
        if argv[1] == "bench":
            doc = {"results": [{"device": "test", "fused": {"tile": "h128x128x64s6g8p"},
                                "gemm": {"rows": {"fused": {"of_cublas": 1.1}}}}]}
        else:
            doc = {"results": [{"tile": "h128x256x64s4g8", "candidates": [
                {"tile": "h128x128x64s6g8p", "ms": 1.2}, {"tile": "h128x256x64s4g8", "ms": 1.0}]}]}
        return subprocess.CompletedProcess(argv, 0, stdout=json.dumps(doc), stderr="")

    monkeypatch.setattr(dvt.subprocess, "run", fake_run)
    monkeypatch.setenv("EPIFUSE_CACHE", "1")
    row = dvt.measure("chain.json", (4096, 4096, 4096))
    (bench_argv, bench_env), (tune_argv, tune_env) = calls
    assert bench_argv[1:3] == ["bench", "chain.json"] and "--no-tune" in bench_argv
    assert bench_env is not None and bench_env["EPIFUSE_CACHE"] == "0"
    assert tune_argv[1] == "tune" and (tune_env is None or tune_env.get("EPIFUSE_CACHE") != "0")
    assert row["default_tile"] == "h128x128x64s6g8p" and row["fastest_first_round"] == "h128x256x64s4g8"
    assert abs(row["default_over_best"] - 1.2) < 1e-12


def test_default_vs_tuned_rescore_scores_today_s_default_against_recorded_candidates(monkeypatch, tmp_path, capsys):
    # --rescore asks `epifuse emit` for today's default at each recorded shape and takes
    # its time from the recorded candidates; a default that was not a candidate is n/a
    # and left out of the summary.
    monkeypatch.syspath_prepend(str(PERF))
    if not os.environ.get("EPIFUSE_TEST_INSTALLED"):
        monkeypatch.syspath_prepend(str(ROOT / "python"))
    import default_vs_tuned as dvt

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    chain = {"epifuse": 1, "name": "c", "ops": []}
    (run_dir / "cfg.json").write_text(json.dumps({"config": "cfg", "chain": chain, "results": [
        {"shape": [3072, 3072, 3072], "default_tile": "old", "candidates": {"old": 1.2, "new": 1.0, "other": 1.1}},
        {"shape": [4096, 4096, 4096], "default_tile": "old", "candidates": {"old": 1.0, "other": 1.04}},
        {"shape": [768, 3072, 768], "default_tile": "old", "candidates": {"old": 1.0}},
        {"shape": [64, 64, 64], "error": {"message": "no candidates"}}]}))
    (run_dir / "summary.txt").write_text("not a config\n")
    (run_dir / "broken.json").write_text("{")
    (run_dir / "other.json").write_text("[1, 2]")
    emitted = {"3072,3072,3072": "new", "4096,4096,4096": "other", "768,3072,768": "unseen"}
    calls = []

    def fake_run(argv, capture_output, text, env=None):
        calls.append(argv)
        assert argv[1] == "emit" and argv[argv.index("--target") + 1] == "sm_90a" and env["EPIFUSE_CACHE"] == "0"
        assert json.loads(open(argv[2]).read()) == chain
        tile = emitted[argv[argv.index("--shape") + 1]]
        return subprocess.CompletedProcess(argv, 0, stdout=json.dumps({"tile": tile}), stderr="")

    monkeypatch.setattr(dvt.subprocess, "run", fake_run)
    lines = dvt.rescore([str(run_dir)], "sm_90a")
    assert len(calls) == 3
    assert "default/best 1.000" in lines[0] and "(recorded old)" in lines[0]
    assert "default/best 1.040" in lines[1]
    assert "n/a" in lines[2]
    assert lines[-1] == "shapes 2: default within 5% of the fastest at 2 (100%), within 10% at 2; worst 1.040"
    err = capsys.readouterr().err
    assert "broken.json: skipped, not readable JSON" in err and "other.json: skipped, not a run's" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit, match="no <config>.json"):
        dvt.rescore([str(empty)], "sm_90a")


def test_default_vs_tuned_counts_the_default_against_cublaslt_s_fused_epilogue(monkeypatch):
    # Both ratios are to the same process's cuBLAS GEMM; rows without the epilogue
    # (a chain cuBLASLt has no form for) and failed rows are left out.
    monkeypatch.syspath_prepend(str(PERF))
    if not os.environ.get("EPIFUSE_TEST_INSTALLED"):
        monkeypatch.syspath_prepend(str(ROOT / "python"))
    import default_vs_tuned as dvt

    rows = [{"default_of_cublas": 1.00, "cublaslt_epilogue_of_cublas": 1.05},
            {"default_of_cublas": 1.08, "cublaslt_epilogue_of_cublas": 1.04},
            {"default_of_cublas": 1.30, "cublaslt_epilogue_of_cublas": 1.00},
            {"default_of_cublas": 1.20},
            {"error": {"message": "x"}, "cublaslt_epilogue_of_cublas": 1.0}]
    text = dvt.cublaslt_line(rows)
    assert text.startswith("cuBLASLt's fused epilogue, 3 shapes with one: the default no slower at 1, within 5% at 2;")
    assert text.endswith("worst 1.300x its time")
    assert dvt.cublaslt_line(rows[3:]) is None


def test_elementwise_default_vs_tuned_scores_the_rule_s_default_against_every_candidate(monkeypatch, tmp_path):
    # The default comes from `epifuse compile` with the disk cache off (an earlier tune
    # would stand in for it otherwise), its time from the tune's candidates.
    monkeypatch.syspath_prepend(str(PERF))
    import elementwise_default_vs_tuned as ewdt

    real_run = subprocess.run
    calls = []

    def fake_run(argv, capture_output, text, env=None):
        calls.append((argv, env))
        if argv[1] == "compile":
            doc = [{"key": "dc415a4be55e8cd8 tile=t256v8g0 shape_class=row_aligned/i32 path=vector target=sm_90a"}]
        else:
            assert argv[1] == "tune"
            doc = {"results": [{"tile": "t256v16g0", "candidates": [
                {"tile": "t256v8g0", "ms": 0.209}, {"tile": "t256v16g0", "ms": 0.2}, {"tile": "t128v8g0", "ms": 0.25}]}]}
        return subprocess.CompletedProcess(argv, 0, stdout=json.dumps(doc), stderr="")

    monkeypatch.setattr(ewdt.subprocess, "run", fake_run)
    monkeypatch.setattr(sys, "argv", ["elementwise_default_vs_tuned.py", "--out", str(tmp_path), "--configs",
                                      "bga,add_mul", "--dtypes", "bf16", "--shapes", "16384,8192"])
    ewdt.main()
    assert all(env is not None and env["EPIFUSE_CACHE"] == "0" for _, env in calls)
    assert [argv[1] for argv, _ in calls] == ["compile"] + ["compile", "tune"] * 2  # a GPU check first
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert summary[0].split()[:5] == ["bga", "bf16", "16384x8192", "default", "t256v8g0"]
    assert "1.045x the fastest (t256v16g0" in summary[0]
    assert summary[-1] == "default within 5% of the fastest candidate: 2 of 2; within 10%: 2 of 2"
    assert json.loads((tmp_path / "bga_bf16_16384x8192.tune.json").read_text())["results"][0]["tile"] == "t256v16g0"
    # The chain without its dropout is a valid chain of the same inputs and output.
    monkeypatch.setattr(ewdt.subprocess, "run", real_run)
    bga = json.loads((tmp_path / "bga_bf16.json").read_text())
    assert [op["op"] for op in bga["ops"]] == ["add", "gelu_tanh", "add"] and bga["ops"][2]["args"] == ["g", "residual"]
    assert all(t["dtype"] == "bf16" for t in list(bga["inputs"].values()) + list(bga["outputs"].values()))
    epifuse = str(ROOT / "build" / "epifuse")
    if os.path.exists(epifuse):
        r = real_run([epifuse, "validate", str(tmp_path / "bga_bf16.json")], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr


def test_elementwise_default_vs_tuned_refuses_bad_arguments():
    for argv in (["--configs", "bgda,nope"], ["--dtypes", "f64"], ["--shapes", "64"], ["--shapes", "0,64"]):
        r = run("elementwise_default_vs_tuned.py", *argv)
        assert r.returncode == 2 and "error:" in r.stderr, (argv, r.stderr)
