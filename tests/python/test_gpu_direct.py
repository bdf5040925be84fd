"""GPU tier: eager calls that skip the dispatcher (Note [Eager calls skip the
dispatcher] in python/epifuse/torch.py). Each case runs twice from the same torch
seed, once as `Direct` and once through the registered op, and compares the output
and every gradient bit for bit: an elementwise chain with dropout (torch's seed and
an explicit one), a GEMM chain through epifuse.torch.linear, and the MLP block with
dropout, in its fused and two-step backward. What the dispatcher must see (a
dispatch mode) still gets the op. Skipped without torch 2.4+ and a GPU."""
import pytest

from conftest import ROOT

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "register_autograd"):
    pytest.skip(f"torch {torch.__version__} has no torch.library.register_autograd (2.4+)", allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import epifuse  # noqa: E402
import epifuse.nn as enn  # noqa: E402
import epifuse.torch as et  # noqa: E402
from epifuse.layers import linear_chain  # noqa: E402

CHAINS = ROOT / "examples" / "chains"


def node(y):
    """The name of the autograd node that made y, looking through views (reshape)."""
    fn = y.grad_fn
    while type(fn).__name__.startswith(("View", "Unsafe", "Reshape", "AsStrided")):
        fn = fn.next_functions[0][0]
    return type(fn).__name__


def step(f, inputs, dy, **kw):
    """(y, gradients of every input) of <f(*inputs), dy> on fresh leaves, from torch seed 5."""
    torch.manual_seed(5)
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    y = f(*leaves, **kw)
    y.backward(dy)
    return y, [t.grad for t in leaves], node(y)


def both_ways(monkeypatch, f, inputs, dy, **kw):
    """The step as Direct and through the op: outputs and gradients equal bit for bit."""
    y, grads, made = step(f, inputs, dy, **kw)
    monkeypatch.setattr(et, "direct", False)
    y_op, grads_op, made_op = step(f, inputs, dy, **kw)
    monkeypatch.setattr(et, "direct", True)
    assert made == "DirectBackward" and made_op != made, (made, made_op)
    assert torch.equal(y, y_op)
    for i, (g, g_op) in enumerate(zip(grads, grads_op)):
        assert g is not None and g_op is not None, i
        assert torch.equal(g, g_op), i
    return y, grads


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda").to(dtype)


@pytest.mark.parametrize("seed", [None, 11])
def test_an_elementwise_chain_with_dropout_gives_the_ops_bits(monkeypatch, seed):
    f = et.op(epifuse.load(CHAINS / "bias_gelu_dropout_add.json"))
    torch.manual_seed(0)
    x, res, dy = randn(96, 1000), randn(96, 1000), randn(96, 1000)
    y, _ = both_ways(monkeypatch, f, [x, randn(1000), res], dy, seed=seed)
    assert 0.05 < (y == res).float().mean().item() < 0.15  # p = 0.1: the mask was drawn


def test_a_gemm_chain_through_linear_gives_the_ops_bits(monkeypatch):
    lin = et.linear(linear_chain("bf16", True, "gelu_tanh", 0.1))
    torch.manual_seed(1)
    x, w, b = randn(200, 256, dtype=torch.bfloat16), randn(384, 256, dtype=torch.bfloat16), randn(384)
    both_ways(monkeypatch, lin, [x, w, b.to(torch.bfloat16)], randn(200, 384, dtype=torch.bfloat16))


@pytest.mark.parametrize("fused", [False, True])
def test_the_mlp_block_with_dropout_gives_the_ops_bits(monkeypatch, fused):
    torch.manual_seed(2)
    m = enn.MLP(256, 1024, "gelu_tanh", dropout=0.1, device="cuda", dtype=torch.bfloat16, fused_dgrad=fused)
    x, dy = randn(320, 256, dtype=torch.bfloat16), randn(320, 256, dtype=torch.bfloat16)

    def grads_of(direct):
        monkeypatch.setattr(et, "direct", direct)
        m.zero_grad(set_to_none=True)
        torch.manual_seed(5)
        xs = x.clone().requires_grad_(True)
        y = m(xs)
        y.backward(dy)
        return [y, xs.grad] + [p.grad for p in m.parameters()], node(y)

    got, made = grads_of(True)
    want, made_op = grads_of(False)
    assert made == "DirectBackward" and made_op != made, (made, made_op)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g is not None and torch.equal(g, w), i


class Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_a_dispatch_mode_still_sees_the_op():
    f = et.op(epifuse.load(CHAINS / "bias_gelu_dropout_add.json"))
    x, b, r = randn(8, 64), randn(64), randn(8, 64)
    assert et.runs_direct([x, b, r])
    with Recorder() as rec:
        assert not et.runs_direct([x, b, r])
        y = f(x, b, r, seed=3)
    assert any(name.startswith("epifuse.") for name in rec.ops), rec.ops
    assert torch.equal(y, f(x, b, r, seed=3))
