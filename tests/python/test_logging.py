"""A first call that compiles for longer than epifuse.compiled.LOG_SECONDS logs one
line on the "epifuse" logger. Compiles for an AMD target with hipRTC (no GPU needed),
else for sm_90a with NVRTC; skipped when neither compiler is here."""
import logging

import pytest

import epifuse
import epifuse.compiled
from conftest import ROOT


def compiled_for_some_target():
    chain = epifuse.load(ROOT / "examples" / "chains" / "bias_gelu_dropout_add.json")
    for target in ("gfx90a", "sm_90a"):
        c = chain.compile(target=target)
        try:
            c.jit()
            return c, target
        except epifuse.DeviceError:  # the target's compiler is missing
            continue
    pytest.skip("neither hipRTC nor NVRTC is here")


def test_a_slow_first_compile_logs_one_line(monkeypatch, caplog):
    c, target = compiled_for_some_target()
    monkeypatch.setattr(epifuse.compiled, "LOG_SECONDS", 0.0)
    with caplog.at_level(logging.INFO, logger="epifuse"):
        c.kernel((64, 256, 0))
    lines = [r.getMessage() for r in caplog.records if r.name == "epifuse"]
    assert len(lines) == 1
    assert "bias_gelu_dropout_add" in lines[0] and "M=64 N=256" in lines[0] and target in lines[0]


def test_a_fast_compile_logs_nothing(monkeypatch, caplog):
    c, _ = compiled_for_some_target()
    monkeypatch.setattr(epifuse.compiled, "LOG_SECONDS", 1e9)
    with caplog.at_level(logging.INFO, logger="epifuse"):
        c.kernel((64, 256, 0))
    assert not [r for r in caplog.records if r.name == "epifuse"]


def test_tune_is_a_bool_and_a_given_tile_is_never_tuned(monkeypatch):
    chain = epifuse.load(ROOT / "examples" / "chains" / "add_mul.json")
    with pytest.raises(epifuse.UserError, match="tune is True, False or None"):
        chain.compile(tune="yes")
    assert chain.compile(tune=True).tune
    assert not chain.compile(tile="t256v4g0", tune=True).tune
    monkeypatch.setenv("EPIFUSE_AUTOTUNE", "1")
    assert chain.compile().tune and not chain.compile(tune=False).tune
    monkeypatch.setenv("EPIFUSE_AUTOTUNE", "0")
    assert not chain.compile().tune


def test_tuning_where_the_target_cannot_run_says_so(monkeypatch, caplog):
    c, target = compiled_for_some_target()
    b = c.chain.bindings(64, 256, 0)
    with pytest.raises(epifuse.Error, match="cannot run here|no AMD GPU present|no CUDA driver"):
        c.tune_on((64, 256, 0), 0, [0] * len(b["inputs"]), [0] * len(b["outputs"]))
