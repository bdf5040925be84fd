"""The chain builder: the C++ builder's ops and checks, reached through the C ABI."""
import json

import pytest

import epifuse


def bias_gelu_dropout_add(dtype="f32", p=0.1):
    c = epifuse.Chain("bgda")
    x = c.input("x", dtype)
    bias = c.input("bias", dtype, broadcast="row")
    residual = c.input("residual", dtype)
    c.output("y", c.add(c.dropout(c.gelu_tanh(c.add(x, bias)), p), residual), dtype)
    return c


def test_builds_the_example_chain_as_the_json_file_does():
    built = json.loads(bias_gelu_dropout_add().to_json())
    loaded = json.loads(epifuse.load(epifuse_examples() / "bias_gelu_dropout_add.json").to_json())
    assert [op["op"] for op in built["ops"]] == [op["op"] for op in loaded["ops"]] == ["add", "gelu_tanh", "dropout", "add"]
    assert built["inputs"] == loaded["inputs"]
    assert built["outputs"] == loaded["outputs"]


def test_every_op_and_composite_is_reachable():
    c = epifuse.Chain("all", precision="fast")
    x = c.input("x", "bf16")
    w = c.input("w", "bf16", broadcast="row")
    v = c.scale(c.add_scalar(c.silu(c.sigmoid(c.tanh(c.relu(x)))), 1.0), 0.5)
    v = c.cast(c.max(c.min(c.sub(v, x), x), x), "bf16")
    v = c.div(c.exp(c.log(c.rsqrt(c.add_scalar(c.mul(v, v), 1.0)))), c.add_scalar(c.gelu_erf(x), 2.0))
    n = c.rmsnorm(c.layernorm(v, w, w, eps=1e-5), w)
    c.output("y", c.softmax(c.log_softmax(n)), "bf16")
    c.verify()
    doc = json.loads(c.to_json())
    assert doc["precision"] == "fast"
    assert {"row_max", "row_sum", "row_mean", "rsqrt", "exp", "log", "div"} <= {op["op"] for op in doc["ops"]}


def test_gemm_and_dual_gemm_chains_name_their_accumulators():
    g = epifuse.Chain("g", mainloop={"kind": "gemm", "a": "f16", "b": "f16", "b_layout": "col"})
    g.output("y", g.relu(g.add(g.acc(), g.input("bias", "f16", broadcast="row"))), "f16")
    assert g.bindings(64, 128, 32)["inputs"] == [
        {"name": "a", "dtype": "f16", "shape": [64, 32]},
        {"name": "b", "dtype": "f16", "shape": [32, 128]},
        {"name": "bias", "dtype": "f16", "shape": [128]}]
    d = epifuse.Chain("gating", mainloop={"kind": "dual_gemm", "a": "bf16", "b": "bf16"})
    d.output("y", d.mul(d.sigmoid(d.acc(0)), d.acc(1)), "bf16")
    assert [t["name"] for t in d.bindings(16, 32, 8)["inputs"]] == ["a", "b0", "b1"]


@pytest.mark.parametrize("build, message", [
    (lambda c, x: c.input("y", "f64"), "unknown dtype 'f64'"),
    (lambda c, x: c.input("y", "f32", broadcast="diagonal"), "unknown broadcast 'diagonal'"),
    (lambda c, x: c.dropout(x, 1.5), "dropout.p"),
    (lambda c, x: c.scale(x, float("inf")), "scale.alpha"),
    (lambda c, x: c.op("sqrt", x), "unknown op 'sqrt'"),
    (lambda c, x: c.op("add", x), "add takes 2 operand(s), got 1"),
    (lambda c, x: c.op("relu", x, p=0.5), "relu: unknown attribute 'p' (it takes none)"),
    (lambda c, x: c.op("dropout", x, q=0.5), "dropout: unknown attribute 'q' (it takes p, rng, stream)"),
    (lambda c, x: c.dropout(x, 0.1, rng="mt19937"), "rng"),
    (lambda c, x: c.input("x", "f32"), "'x'"),
    (lambda c, x: c.relu(epifuse.Chain("other").input("z", "f32")), "not a value of this chain"),
])
def test_bad_builder_calls_raise_user_errors_at_the_call(build, message):
    c = epifuse.Chain("bad")
    x = c.input("x", "f32")
    with pytest.raises(epifuse.UserError) as e:
        build(c, x)
    assert message in str(e.value)
    assert isinstance(e.value, ValueError)


def test_a_chain_without_outputs_or_with_the_wrong_leaf_fails_verification():
    c = epifuse.Chain("empty")
    x = c.input("x", "f32")
    with pytest.raises(epifuse.UserError):
        c.verify()
    c.output("y", c.add(x, c.acc()), "f32")  # an accumulator in an elementwise chain
    with pytest.raises(epifuse.UserError, match="acc"):
        c.verify()


def epifuse_examples():
    from conftest import ROOT
    return ROOT / "examples" / "chains"
