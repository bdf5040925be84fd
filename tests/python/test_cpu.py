"""Chains on NumPy arrays run the CPU reference: checked against NumPy formulas,
dropout masks against their definition's statistics and against themselves."""
import numpy as np
import pytest

import epifuse
from conftest import ROOT

CHAINS = ROOT / "examples" / "chains"


def rng(seed=0):
    return np.random.default_rng(seed)


def test_add_mul_matches_numpy():
    fn = epifuse.load(CHAINS / "add_mul.json").compile()
    x, y = (rng(1).uniform(-2, 2, (37, 129)).astype(np.float32) for _ in range(2))
    out = fn(x, y)
    assert out.shape == x.shape and out.dtype == np.float32
    np.testing.assert_array_equal(out, ((x + y) * np.float32(0.5)).astype(np.float32))


def test_leading_dimensions_fold_as_x_does():
    fn = epifuse.load(CHAINS / "add_mul.json").compile()
    x = rng(2).uniform(-1, 1, (2, 3, 64)).astype(np.float32)
    np.testing.assert_array_equal(fn(x, x), x)  # (x + x) * 0.5


def test_gemm_bias_relu_matches_numpy():
    fn = epifuse.load(CHAINS / "gemm_bias_relu.json").compile()
    chain = fn.chain
    dt = {"f32": np.float32, "f16": np.float16}[chain.bindings(1, 1, 1)["inputs"][0]["dtype"]]
    r = rng(3)
    a, b = r.uniform(-1, 1, (33, 70)).astype(dt), r.uniform(-1, 1, (70, 45)).astype(dt)
    bias = r.uniform(-1, 1, 45).astype(dt)
    acc = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    want = np.maximum(acc + bias.astype(np.float32), 0).astype(dt)
    got = fn(a, b, bias)
    assert got.dtype == dt
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=1e-6)


def test_dropout_keeps_about_1_minus_p_and_scales_what_it_keeps():
    c = epifuse.Chain("d")
    c.output("y", c.dropout(c.input("x", "f32"), 0.25), "f32")
    fn = c.compile()
    x = np.ones((256, 512), np.float32)
    y = fn(x, seed=11, offset=3)
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.01
    np.testing.assert_allclose(y[kept], np.float32(1 / 0.75))
    np.testing.assert_array_equal(fn(x, seed=11, offset=3), y)      # a pure function of (seed, offset)
    assert (fn(x, seed=12, offset=3) != y).any()


def test_bf16_travels_as_16_bit_patterns():
    c = epifuse.Chain("b")
    c.output("y", c.scale(c.input("x", "bf16"), 2.0), "bf16")
    x = np.array([[0x3F80, 0x4000, 0xC040]], np.uint16)  # 1, 2, -3
    np.testing.assert_array_equal(c.compile()(x), np.array([[0x4000, 0x4080, 0xC0C0]], np.uint16))


@pytest.mark.parametrize("call, message", [
    (lambda fn, x: fn(x), "missing input(s) y"),
    (lambda fn, x: fn(x, x, x), "3 positional arguments for 2 inputs"),
    (lambda fn, x: fn(x, z=x), "'z' is not an input"),
    (lambda fn, x: fn(x, x.astype(np.float64)), "input 'y' is float64, the chain reads f32"),
    (lambda fn, x: fn(x, x[:, :3]), "input 'y' has shape [4, 3], expected [4, 8]"),
])
def test_bad_calls_are_user_errors(call, message):
    fn = epifuse.load(CHAINS / "add_mul.json").compile()
    with pytest.raises(epifuse.UserError) as e:
        call(fn, np.zeros((4, 8), np.float32))
    assert message in str(e.value)


def test_error_kinds_are_exception_classes():
    assert issubclass(epifuse.UserError, ValueError)
    assert issubclass(epifuse.CompileError, RuntimeError) and issubclass(epifuse.DeviceError, RuntimeError)
    assert epifuse.__version__.count(".") == 2
