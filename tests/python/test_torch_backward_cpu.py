"""The torch op's backward plan without a GPU (skipped without torch): outputs of a
backward spec that are one of its inputs unchanged, or repeat another output, are
handed back as that tensor, and the kernel that runs the rest computes what the whole
spec computes (CPU reference, NumPy arrays)."""
import numpy as np
import pytest

pytest.importorskip("torch")
import epifuse  # noqa: E402
import epifuse.torch as et  # noqa: E402
from epifuse.layers import linear_chain  # noqa: E402


@pytest.mark.parametrize("bias, activation, residual, passthrough, kernel_outputs", [
    (False, None, False, {"dacc": "dy"}, None),
    (True, None, True, {"dacc": "dy", "dresidual": "dy"}, ["dbias"]),
    (False, None, True, {"dacc": "dy", "dresidual": "dy"}, None),
    (True, "gelu_tanh", True, {"dresidual": "dy"}, ["dacc", "dbias"]),
    (True, "relu", False, {}, ["dacc", "dbias"]),
])
def test_passthrough_outputs_leave_the_kernel_and_the_rest_computes_the_same(
        bias, activation, residual, passthrough, kernel_outputs):
    g = linear_chain("f32", bias, activation, 0.0, residual).grad()
    kernel, got, aliases = et._without_passthrough(g.backward)
    assert got == passthrough
    assert aliases == {}
    if kernel_outputs is None:
        assert kernel is None
        return
    assert [o["name"] for o in kernel.bindings(1, 1, 1)["outputs"]] == kernel_outputs
    m, n = 5, 12
    rng = np.random.default_rng(3)
    full = g.backward.bindings(m, n, 0)
    arrays = {i["name"]: rng.standard_normal(i["shape"]).astype(np.float32) for i in full["inputs"]}
    want = g.backward.compile()(*[arrays[i["name"]] for i in full["inputs"]])
    want = dict(zip([o["name"] for o in full["outputs"]], want if isinstance(want, tuple) else (want,)))
    names = [i["name"] for i in kernel.bindings(m, n, 0)["inputs"]]
    out = kernel.compile()(*[arrays[x] for x in names])
    out = dict(zip(kernel_outputs, out if isinstance(out, tuple) else (out,)))
    for name in kernel_outputs:
        np.testing.assert_array_equal(out[name], want[name])
    for name, source in passthrough.items():
        np.testing.assert_array_equal(arrays[source], want[name])


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_an_output_that_repeats_another_is_stored_once(dt):
    # add+RMSNorm: x and the residual get the same gradient; the kernel stores it once.
    c = epifuse.Chain("add_rmsnorm")
    x = c.input("x", dt)
    c.output("y", c.rmsnorm(c.add(x, c.input("residual", dt)), c.input("w", dt, "row"), eps=1e-6), dt)
    g = c.grad()
    full_outputs = [o["name"] for o in g.backward.bindings(1, 1, 1)["outputs"]]
    assert sorted(full_outputs) == ["dresidual", "dw", "dx"]
    kernel, passthrough, aliases = et._without_passthrough(g.backward)
    assert passthrough == {}
    assert aliases == {"dresidual": "dx"}
    assert [o["name"] for o in kernel.bindings(1, 1, 1)["outputs"]] == ["dx", "dw"]
    if dt != "f32":
        return  # the values: f32 arrays below (NumPy has no bf16)
    m, n = 4, 16
    rng = np.random.default_rng(5)
    arrays = {i["name"]: rng.standard_normal(i["shape"]).astype(np.float32)
              for i in g.backward.bindings(m, n, 0)["inputs"]}
    arrays["saved_row_mean"] = np.abs(arrays["saved_row_mean"]) + 0.5  # a mean of squares
    def run(chain):
        names = [i["name"] for i in chain.bindings(m, n, 0)["inputs"]]
        out = chain.compile()(*[arrays[k] for k in names])
        outs = [o["name"] for o in chain.bindings(m, n, 0)["outputs"]]
        return dict(zip(outs, out if isinstance(out, tuple) else (out,)))
    want, got = run(g.backward), run(kernel)
    for name in ("dx", "dw"):
        np.testing.assert_array_equal(got[name], want[name])
    np.testing.assert_array_equal(want["dresidual"], want["dx"])
