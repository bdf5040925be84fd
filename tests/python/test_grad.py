"""Chain.grad: the backward spec through the C ABI, run on NumPy arrays by the CPU
reference: its gradients against NumPy formulas and the forward's dropout mask."""
import json
import math

import numpy as np
import pytest

import epifuse
from conftest import ROOT

CHAINS = ROOT / "examples" / "chains"


def gelu_tanh_deriv(z):
    z = z.astype(np.float64)
    k, c = 0.7978845608028654, 0.044715
    t = np.tanh(k * (z + c * z ** 3))
    return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * k * (1 + 3 * c * z * z)


def test_bias_gelu_dropout_residual_backward_matches_numpy_and_the_forward_mask():
    chain = epifuse.load(CHAINS / "bias_gelu_dropout_add.json")
    g = chain.grad()
    assert g.wrt == ["x", "bias", "residual"] and g.saved == []  # recomputed from x and bias
    fwd, bwd = g
    r = np.random.default_rng(5)
    m, n = 24, 40
    x, res = (r.uniform(-2, 2, (m, n)).astype(np.float32) for _ in range(2))
    bias = r.uniform(-1, 1, n).astype(np.float32)
    dy = r.uniform(-1, 1, (m, n)).astype(np.float32)
    y = fwd.compile()(x, bias, res, seed=11, offset=3)
    dx, dbias, dres = bwd.compile()(dy, x, bias, seed=11, offset=3)
    assert dx.shape == (m, n) and dbias.shape == (n,) and dres.shape == (m, n)
    kept = y != res  # dropped elements leave the residual alone
    assert 0 < (~kept).sum() < m * n // 2
    want = np.where(kept, dy.astype(np.float64) / 0.9 * gelu_tanh_deriv(x + bias), 0.0)
    np.testing.assert_allclose(dx, want, rtol=2e-5, atol=1e-6)
    assert (dx[~kept] == 0).all()
    np.testing.assert_allclose(dbias, dx.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(dres, dy)


def test_softmax_backward_reads_its_output_and_is_y_times_dy_minus_sum():
    chain = epifuse.Chain("softmax")
    chain.output("y", chain.softmax(chain.input("x", "f32")), "f32")
    g = chain.grad()
    assert g.saved == [{"name": "y", "kind": "output", "of": g.saved[0]["of"]}]
    assert [b["name"] for b in g.backward.bindings(8, 16, 0)["inputs"]] == ["dy", "y"]
    r = np.random.default_rng(6)
    x = r.uniform(-3, 3, (8, 16)).astype(np.float32)
    y = g.forward.compile()(x)
    dy = r.uniform(-1, 1, (8, 16)).astype(np.float32)
    dx = g.backward.compile()(dy, y)
    y64 = y.astype(np.float64)
    want = y64 * (dy - (dy * y64).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(dx.astype(np.float64), want, rtol=1e-5, atol=1e-7)


def test_layernorm_saves_mean_and_variance_as_row_statistics():
    chain = epifuse.Chain("ln")
    x = chain.input("x", "f32")
    chain.output("y", chain.layernorm(x, chain.input("w", "f32", "row"), chain.input("b", "f32", "row")), "f32")
    g = chain.grad()
    assert [s["kind"] for s in g.saved] == ["row statistic", "row statistic"]
    outs = g.forward.bindings(8, 16, 0)["outputs"]
    assert [o["shape"] for o in outs[1:]] == [[8], [8]] and all(o["dtype"] == "f32" for o in outs[1:])
    r = np.random.default_rng(7)
    xs = r.uniform(-3, 3, (8, 16)).astype(np.float32)
    w, b = (r.uniform(-1, 1, 16).astype(np.float32) for _ in range(2))
    _, *stats = g.forward.compile()(xs, w, b)
    np.testing.assert_allclose(sorted(s.mean() for s in stats), sorted([xs.mean(axis=1).mean(), xs.var(axis=1).mean()]),
                               rtol=1e-5)


def test_grad_errors_name_the_reason():
    chain = epifuse.load(CHAINS / "scaled_masked_softmax_dropout.json")
    with pytest.raises(epifuse.UserError, match="marked not differentiable"):
        chain.grad("mask")
    with pytest.raises(epifuse.UserError, match="not an input: a mask is not differentiable"):
        chain.grad(["seed"])
    with pytest.raises(epifuse.UserError, match="is not an input of the chain"):
        chain.grad(["nope"])
    assert chain.grad().wrt == ["x"]


def test_dropout_stream_from_python():
    c = epifuse.Chain("s")
    x = c.input("x", "f32")
    c.output("y", c.dropout(c.dropout(x, 0.5, stream=4), 0.5), "f32")
    ops = c.doc["ops"]
    assert ops[0]["stream"] == 4 and "stream" not in ops[1]  # the second is 5, the default


def test_an_input_built_with_grad_false_is_never_differentiated():
    c = epifuse.Chain("masked")
    x = c.input("x", "f32")
    m = c.input("mask", "f32", grad=False)
    c.output("y", c.softmax(c.add(x, m)), "f32")
    assert json.loads(c.to_json())["inputs"]["mask"].get("grad") is False
    g = c.grad()
    assert g.wrt == ["x"]
    with pytest.raises(epifuse.UserError, match="mask"):
        c.grad(wrt=["mask"])
    with pytest.raises(epifuse.UserError, match="grad is True or False"):
        c.input("z", "f32", grad="no")
