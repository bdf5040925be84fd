"""Chain.as_gemm_epilogue (ef_spec_as_gemm_epilogue) on the CPU reference: the dgrad
chain of an epifuse.nn layer's backward, run on A = dy_above and B = W_above, computes
what the backward spec computes with dy := A·B (dropout masks included), and the
inputs it refuses say why. No torch needed."""
import json

import numpy as np
import pytest

import epifuse
from epifuse.layers import gated_chain, linear_chain

R = np.random.default_rng(31)
ROW_B = {"kind": "gemm", "a": "f32", "b": "f32", "a_layout": "row", "b_layout": "row"}


def f32(*shape):
    """Random non-zero values: uniform in ±[0.25, 2)."""
    v = R.uniform(0.25, 2.0, shape) * R.choice([-1.0, 1.0], shape)
    return v.astype(np.float32)


def eighths(*shape):
    """Random non-zero multiples of 1/8 in [-2, 2]: their products' sums are exact in
    double, so the accumulator and dy := A·B are the same fp32 numbers whatever the
    order of the additions."""
    v = R.integers(1, 17, shape) * R.choice([-1, 1], shape) / 8
    return v.astype(np.float32)


def outputs(chain, result):
    names = [o["name"] for o in chain.bindings(1, 1, 1)["outputs"]]
    return dict(zip(names, result if isinstance(result, tuple) else (result,)))


def dgrad_equals_matmul_then_backward(chain, m=24, n=40, k=32, seed=None):
    """Runs both forms on random data (the saved tensors from the forward on random
    x and weights) and returns (dgrad outputs, backward outputs)."""
    g = chain.grad()
    dgrad = g.backward.as_gemm_epilogue("dy", ROW_B)
    assert dgrad.mainloop == "gemm" and dgrad.name == g.backward.name + "_dgrad"
    fwd = g.forward.compile()
    fwd_inputs = fwd.input_names
    kf = 16
    given = {"a": f32(m, kf)}
    for name in fwd_inputs[1:]:
        shape = [i["shape"] for i in g.forward.bindings(m, n, kf)["inputs"] if i["name"] == name][0]
        given[name] = f32(*shape)
    run = {} if seed is None else {"seed": seed, "offset": 5}
    saved = outputs(g.forward, fwd(*[given[i] for i in fwd_inputs], **run))
    a, b = eighths(m, k), eighths(k, n)  # dy_above [M, K] and W_above [K, N] (row-major B)
    dy = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    values = {**given, **saved, "dy": dy}
    back = g.backward.compile()
    want = outputs(g.backward, back(*[values[i] for i in back.input_names], **run))
    fused = dgrad.compile()
    values.update(a=a, b=b)
    got = outputs(dgrad, fused(*[values[i] for i in fused.input_names], **run))
    assert set(got) == set(want)
    return got, want


@pytest.mark.parametrize("activation, p", [("gelu_tanh", 0.0), ("gelu_tanh", 0.25), ("relu", 0.0), (None, 0.0)])
def test_linear_chain_dgrad_equals_matmul_then_backward(activation, p):
    got, want = dgrad_equals_matmul_then_backward(linear_chain("f32", True, activation, p), seed=7 if p else None)
    for name in want:  # bit for bit: the accumulator and dy are the same numbers (eighths)
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert set(want) == {"dacc", "dbias"}
    if p:
        dropped = want["dacc"] == 0
        assert 0 < dropped.mean() < 0.5
        assert (got["dacc"][dropped] == 0).all() and (got["dacc"][~dropped] != 0).all()


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_gated_chain_dgrad_writes_both_accumulators_gradients(activation):
    got, want = dgrad_equals_matmul_then_backward(gated_chain("f32", activation, bias=True))
    assert set(want) == {"dacc0", "dacc1", "dgate_bias", "dup_bias"}
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_the_dgrad_chain_keeps_the_forward_dropout_stream_and_takes_tf32():
    g = linear_chain("f32", True, "gelu_tanh", 0.1, tf32=True).grad()
    d = g.backward.as_gemm_epilogue("dy", dict(ROW_B, math="tf32"))
    assert d.doc["mainloop"]["math"] == "tf32"
    drop = [op for op in d.doc["ops"] if op["op"] == "dropout"]
    want = [op for op in g.backward.doc["ops"] if op["op"] == "dropout"]
    assert len(drop) == 1 and drop[0]["args"] == ["acc"] and drop[0]["p"] == want[0]["p"]
    assert drop[0].get("stream") == want[0].get("stream")
    assert "dy" not in d.doc["inputs"]


@pytest.mark.parametrize("upstream, mainloop, says", [
    ("nope", ROW_B, "'nope' is not an input"),
    ("dy", dict(ROW_B, kind="dual_gemm"), "a single GEMM"),
    ("dy", "elementwise", "a single GEMM"),
    ("dy", dict(ROW_B, a="f64"), "unknown dtype 'f64'"),
    ("dy", dict(ROW_B, a="bf16", math="tf32"), "tf32"),
    ("dy", {"kind": "gemm", "layout": "row"}, "layout"),
    ("d\0y", ROW_B, "NUL"),
])
def test_as_gemm_epilogue_refuses_what_cannot_be_a_gemm_epilogue(upstream, mainloop, says):
    g = linear_chain("f32", True, "gelu_tanh", 0.1).grad()
    with pytest.raises(epifuse.UserError, match=says):
        g.backward.as_gemm_epilogue(upstream, mainloop)


def test_as_gemm_epilogue_refuses_a_gemm_chain_a_row_upstream_and_an_operand_name():
    g = linear_chain("f32", True, "gelu_tanh").grad()
    with pytest.raises(epifuse.UserError, match="already has a gemm mainloop"):
        g.forward.as_gemm_epilogue("dy", ROW_B)
    c = epifuse.Chain("scaled")
    c.output("dx", c.mul(c.input("dy", "f32"), c.input("g", "f32", "row")), "f32")
    with pytest.raises(epifuse.UserError, match="'g' is a row input"):
        c.as_gemm_epilogue("g", ROW_B)
    c = epifuse.Chain("reads_b")
    c.output("dx", c.mul(c.input("dy", "f32"), c.input("b", "f32")), "f32")
    with pytest.raises(epifuse.UserError, match="the names a, b, b0, b1 are the GEMM operands"):
        c.as_gemm_epilogue("dy", ROW_B)
    json.loads(c.to_json())  # the chain asked is unchanged and still whole
