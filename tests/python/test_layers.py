"""The chains of epifuse.nn's modules (epifuse.layers), run on NumPy arrays by the CPU
reference: forwards and backwards against NumPy formulas in float64. No torch needed."""
import json

import numpy as np
import pytest

from epifuse.layers import gated_chain, linear_chain, norm_chain, softmax_chain

R = np.random.default_rng(21)
K0, C0 = 0.7978845608028654, 0.044715
ACT = {None: lambda z: z, "relu": lambda z: np.maximum(z, 0),
       "gelu_tanh": lambda z: 0.5 * z * (1 + np.tanh(K0 * (z + C0 * z ** 3))),
       "silu": lambda z: z / (1 + np.exp(-z))}


def f32(*shape, lo=-2.0, hi=2.0):
    return R.uniform(lo, hi, shape).astype(np.float32)


def close(got, want, tol=2e-5):
    want = np.asarray(want, np.float64)
    err = np.abs(np.asarray(got, np.float64) - want).max() / max(np.abs(want).max(), 1e-30)
    assert err <= tol, err


@pytest.mark.parametrize("activation", [None, "relu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("bias, residual", [(True, False), (False, True), (True, True)])
def test_linear_chain_is_x_weight_t_bias_activation_residual(activation, bias, residual):
    c = linear_chain("f32", bias, activation, 0.0, residual)
    assert c.doc["mainloop"]["b_layout"] == "col"
    m, k, n = 9, 16, 12
    x, w, b, res = f32(m, k), f32(n, k), f32(n), f32(m, n)
    args = [x, w.T] + ([b] if bias else []) + ([res] if residual else [])
    z = x.astype(np.float64) @ w.T.astype(np.float64) + (b if bias else 0)
    close(c.compile()(*args), ACT[activation](z) + (res if residual else 0))


def test_linear_chain_without_dropout_has_no_dropout_op():
    ops = [op["op"] for op in json.loads(linear_chain("bf16", True, "gelu_tanh", 0.0).to_json())["ops"]]
    assert "dropout" not in ops
    ops = [op["op"] for op in json.loads(linear_chain("bf16", True, "gelu_tanh", 0.1).to_json())["ops"]]
    assert "dropout" in ops


def test_relu_then_dropout_saves_nothing_and_reads_the_output_back():
    # relu'(z) = [y > 0] wherever dropout kept z; where it dropped, dy's term is 0.
    c = linear_chain("f32", True, "relu", 0.25)
    g = c.grad()
    assert [(s["name"], s["kind"]) for s in g.saved] == [("y", "output")]
    m, k, n = 32, 8, 24
    x, w, b = f32(m, k), f32(n, k), f32(n)
    y = g.forward.compile()(x, w.T, b, seed=5, offset=2)  # one output: y itself
    z = x.astype(np.float64) @ w.T.astype(np.float64) + b
    kept = (y != 0) | (z <= 0)
    assert ((z > 0) & ~kept).any()  # some positive z dropped: the case the rule rests on
    dy = f32(m, n)
    dacc, dbias = g.backward.compile()(dy, y, seed=5, offset=2)
    want = np.where((z > 0) & (y != 0), dy / 0.75, 0.0)
    close(dacc, want, 1e-6)
    close(dbias, want.sum(0), 1e-5)


def test_linear_chain_backward_uses_the_forward_mask():
    c = linear_chain("f32", True, "gelu_tanh", 0.25)
    g = c.grad()
    assert set(g.wrt) == {"acc", "bias"} and [s["kind"] for s in g.saved] == ["pre-activation"]
    m, k, n = 32, 8, 24
    x, w, b = f32(m, k), f32(n, k), f32(n)
    y, pre = g.forward.compile()(x, w.T, b, seed=5, offset=2)
    z = x.astype(np.float64) @ w.T.astype(np.float64) + b
    close(pre, z)
    dropped = (y == 0) & (ACT["gelu_tanh"](pre) != 0)  # GELU is 0 itself far below zero
    assert 0.1 < dropped.mean() < 0.4
    close(y, np.where(dropped, 0, ACT["gelu_tanh"](z) / 0.75), 5e-5)
    dy = f32(m, n)
    dacc, dbias = g.backward.compile()(dy, pre, seed=5, offset=2)
    assert (dacc[dropped] == 0).all()
    t = np.tanh(K0 * (z + C0 * z ** 3))
    deriv = 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * K0 * (1 + 3 * C0 * z * z)
    close(dacc, np.where(dropped, 0, dy / 0.75 * deriv), 5e-5)
    close(dbias, dacc.astype(np.float64).sum(0))


def test_gated_chain_is_act_gate_times_up():
    c = gated_chain("f32", "silu", bias=True)
    m, k, n = 10, 16, 20
    x, wg, wu, bg, bu = f32(m, k), f32(n, k), f32(n, k), f32(n), f32(n)
    x64 = x.astype(np.float64)
    want = ACT["silu"](x64 @ wg.T + bg) * (x64 @ wu.T + bu)
    close(c.compile()(x, wg.T, wu.T, bg, bu), want)
    assert set(c.grad().wrt) == {"acc0", "acc1", "gate_bias", "up_bias"}


def rms(h, eps):
    return h / np.sqrt((h * h).mean(-1, keepdims=True) + eps)


def ln(h, eps):
    c = h - h.mean(-1, keepdims=True)
    return c / np.sqrt((c * c).mean(-1, keepdims=True) + eps)


@pytest.mark.parametrize("kind, norm", [("rms", rms), ("layer", ln)])
@pytest.mark.parametrize("weight, bias", [("f32", "f32"), ("f32", None), (None, None), ("f16", "f16")])
@pytest.mark.parametrize("residual", [False, True])
def test_norm_chains(kind, norm, weight, bias, residual):
    if kind == "rms" and bias:
        bias = None
    c = norm_chain(kind, "f32", weight, bias, 1e-5, residual)
    m, n = 6, 48
    x, res = f32(m, n), f32(m, n)
    w = f32(n, lo=0.5, hi=1.5).astype(np.float16 if weight == "f16" else np.float32)
    b = f32(n).astype(np.float16 if bias == "f16" else np.float32)
    args = [x] + ([res] if residual else []) + ([w] if weight else []) + ([b] if bias else [])
    out = c.compile()(*args)
    h = x.astype(np.float64) + (res if residual else 0)
    want = norm(h, 1e-5) * (w if weight else 1) + (b if bias else 0)
    if residual:
        close(out[0], want)
        close(out[1], h)
    else:
        close(out, want)


def test_rmsnorm_chain_backward_matches_the_formula():
    g = norm_chain("rms", "f32", "f32", None, 1e-6, residual=True).grad()
    assert g.wrt == ["x", "residual", "weight"]
    m, n = 8, 64
    x, res, w, dy, dh = f32(m, n), f32(m, n), f32(n), f32(m, n), f32(m, n)
    y, h, *saved = g.forward.compile()(x, res, w)
    given = {"dy": dy, "dh": dh, "x": x, "residual": res, "weight": w, "y": y, "h": h}
    given.update(zip([o["name"] for o in g.forward.bindings(m, n)["outputs"]][2:], saved))
    bwd = g.backward.compile()
    outs = dict(zip([o["name"] for o in g.backward.bindings(m, n)["outputs"]],
                    bwd(*[given[name] for name in bwd.input_names])))
    h64 = x.astype(np.float64) + res
    r = 1 / np.sqrt((h64 * h64).mean(-1, keepdims=True) + 1e-6)
    hhat, gg = h64 * r, dy * w.astype(np.float64)
    want = r * (gg - hhat * (gg * hhat).mean(-1, keepdims=True)) + dh
    close(outs["dx"], want, 1e-4)
    close(outs["dresidual"], want, 1e-4)
    close(outs["dweight"], (dy * hhat).sum(0), 1e-4)


def test_softmax_chain_marks_the_mask_not_differentiable():
    c = softmax_chain("f32", 0.5, 0.0, mask=True)
    assert c.doc["inputs"]["mask"].get("grad") is False
    assert c.grad().wrt == ["x"]
    x = f32(4, 32)
    mask = np.where(np.tri(4, 32, 20) > 0, 0, -np.inf).astype(np.float32)
    z = x.astype(np.float64) * 0.5 + mask
    e = np.exp(z - z.max(-1, keepdims=True))
    close(c.compile()(x, mask), e / e.sum(-1, keepdims=True))


def test_softmax_chain_with_dropout_scales_kept_probabilities():
    c = softmax_chain("f32", 1.0, 0.5, mask=False)
    x = f32(16, 64)
    y = c.compile()(x, seed=3)
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    kept = y != 0
    assert 0.35 < kept.mean() < 0.65
    close(y, np.where(kept, p * 2, 0))
