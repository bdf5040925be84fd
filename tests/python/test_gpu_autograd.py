"""GPU tier: loss.backward() through epifuse ops (skipped without torch and a CUDA
GPU). Gradients against PyTorch's own autograd where the chain is plain PyTorch,
and against the forward's dropout mask where it is not."""
import pytest

import epifuse
from conftest import ROOT

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
import epifuse.torch  # noqa: E402

CHAINS = ROOT / "examples" / "chains"


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def test_softmax_and_layernorm_gradients_equal_torch_autograd():
    c = epifuse.Chain("ln_sm")
    x = c.input("x", "f32")
    w, b = c.input("w", "f32", "row"), c.input("b", "f32", "row")
    c.output("y", c.softmax(c.layernorm(x, w, b, eps=1e-5)), "f32")
    f = epifuse.torch.op(c)
    g = torch.Generator(device="cuda").manual_seed(1)
    xs = torch.randn(64, 512, device="cuda", generator=g)
    ws, bs = torch.randn(512, device="cuda", generator=g), torch.randn(512, device="cuda", generator=g)
    dy = torch.randn(64, 512, device="cuda", generator=g)
    ours = [leaf(t) for t in (xs, ws, bs)]
    f(*ours).backward(dy)
    ref = [leaf(t) for t in (xs, ws, bs)]
    torch.softmax(torch.nn.functional.layer_norm(ref[0], (512,), ref[1], ref[2], 1e-5), -1).backward(dy)
    for o, r in zip(ours, ref):
        assert o.grad is not None
        torch.testing.assert_close(o.grad, r.grad, rtol=1e-4, atol=1e-5)


def test_bias_gelu_dropout_residual_gradient_uses_the_forward_mask():
    f = epifuse.torch.op(epifuse.load(CHAINS / "bias_gelu_dropout_add.json"))
    g = torch.Generator(device="cuda").manual_seed(2)
    m, n = 256, 1024
    x, res = (torch.randn(m, n, device="cuda", generator=g) for _ in range(2))
    bias = torch.randn(n, device="cuda", generator=g)
    dy = torch.randn(m, n, device="cuda", generator=g)
    xs, bs, rs = leaf(x), leaf(bias), leaf(res)
    y = f(xs, bs, rs, seed=9, offset=4)
    y.backward(dy)
    kept = (y.detach() != res)
    assert 0.05 < 1 - kept.float().mean().item() < 0.15  # p = 0.1
    z = leaf(x + bias)
    torch.nn.functional.gelu(z, approximate="tanh").backward(dy * kept / 0.9)
    torch.testing.assert_close(xs.grad, z.grad, rtol=1e-5, atol=1e-5)  # gelu' near its zero: different f32 formulas
    torch.testing.assert_close(bs.grad, z.grad.sum(0), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(rs.grad, dy)
    # Twice: the same bits.
    again = leaf(x)
    f(again, bias, res, seed=9, offset=4).backward(dy)
    assert torch.equal(again.grad, xs.grad)


def test_gemm_chain_through_linear_matches_torch():
    c = epifuse.Chain("lin", {"kind": "gemm", "a": "f32", "b": "f32", "a_layout": "row", "b_layout": "col"})
    bias = c.input("bias", "f32", "row")
    c.output("y", c.relu(c.add(c.accumulator(), bias)), "f32")
    lin = epifuse.torch.linear(c)
    g = torch.Generator(device="cuda").manual_seed(3)
    x, w = torch.randn(128, 64, device="cuda", generator=g), torch.randn(96, 64, device="cuda", generator=g)
    b = torch.randn(96, device="cuda", generator=g)
    dy = torch.randn(128, 96, device="cuda", generator=g)
    ours = [leaf(t) for t in (x, w, b)]
    lin(*ours).backward(dy)
    ref = [leaf(t) for t in (x, w, b)]
    torch.relu(torch.nn.functional.linear(ref[0], ref[1], ref[2])).backward(dy)
    for o, r in zip(ours, ref):
        torch.testing.assert_close(o.grad, r.grad, rtol=1e-4, atol=1e-4)


def test_an_input_marked_not_differentiable_raises_instead_of_losing_its_gradient():
    f = epifuse.torch.op(epifuse.load(CHAINS / "scaled_masked_softmax_dropout.json"))
    x = torch.randn(32, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    mask = torch.zeros(32, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    with pytest.raises(Exception, match="marked not differentiable"):
        f(x, mask, seed=1).sum().backward()


@pytest.mark.parametrize("direct", [True, False])
def test_two_equal_gradients_accumulate_into_leaves_of_their_own(direct, monkeypatch):
    # add+RMSNorm gives x and the residual one gradient, which the op stores once and
    # hands back for both: each leaf's .grad must still be its own tensor, so that a
    # second backward (gradient accumulation) or an in-place change to one leaves the
    # other as it was.
    monkeypatch.setattr(epifuse.torch, "direct", direct)
    c = epifuse.Chain("add_rmsnorm_leaves")
    x = c.input("x", "f32")
    c.output("y", c.rmsnorm(c.add(x, c.input("residual", "f32")), c.input("w", "f32", "row"), eps=1e-6), "f32")
    f = epifuse.torch.op(c)
    g = torch.Generator(device="cuda").manual_seed(4)
    xs, rs = (torch.randn(48, 256, device="cuda", generator=g) for _ in range(2))
    ws = torch.rand(256, device="cuda", generator=g) + 0.5
    dy = torch.randn(48, 256, device="cuda", generator=g)
    ours = [leaf(t) for t in (xs, rs, ws)]
    ref = [leaf(t) for t in (xs, rs, ws)]
    for _ in range(2):
        f(*ours).backward(dy)
        torch.nn.functional.rms_norm(ref[0] + ref[1], (256,), ref[2], 1e-6).backward(dy)
    dx, dr = ours[0].grad, ours[1].grad
    assert dx.untyped_storage().data_ptr() != dr.untyped_storage().data_ptr()
    for o, r in zip(ours, ref):
        torch.testing.assert_close(o.grad, r.grad, rtol=1e-4, atol=1e-5)
    before = dr.clone()
    dx.mul_(3.0)
    torch.testing.assert_close(dr, before, rtol=0, atol=0)
