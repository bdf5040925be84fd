"""The block op's plan (epifuse.torch_block.Plan) without a GPU (skipped without
torch): its forward and backward with every kernel run by the CPU reference on
NumPy arrays, against torch autograd in float64 on the same weights. The fused dgrad
(the lower backward in the dgrad GEMM's epilogue), the two-step form
(fused_dgrad=False) and the dgrad op's own fallback give the same gradients; weight
gradients come in nn.Linear's layout; the residual's gradient reaches dx when the
residual is x. The registered op itself runs in test_gpu_block.py."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import epifuse  # noqa: E402
from epifuse.layers import gated_chain, linear_chain  # noqa: E402
from epifuse.torch_block import Plan  # noqa: E402

ACT = {"gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "silu": F.silu, "relu": F.relu}
M, HIDDEN, FFN = 24, 32, 48


class OnNumpy:
    """A compiled chain called with torch CPU tensors: through NumPy on the CPU reference."""

    def __init__(self, compiled):
        self.compiled, self.input_names = compiled, compiled.input_names

    def kernel(self, mnk, device=0):
        """Nothing to compile on the CPU reference."""

    def __call__(self, *tensors, seed=0, offset=0, rng_state=None):
        assert rng_state is None
        out = self.compiled(*[t.detach().contiguous().numpy() for t in tensors], seed=seed, offset=offset)
        out = tuple(torch.from_numpy(np.ascontiguousarray(o)) for o in (out if isinstance(out, tuple) else (out,)))
        return out if len(out) > 1 else out[0]


class Refusing:
    """A dgrad kernel that does not compile for this shape and target."""

    def __init__(self, compiled):
        self.input_names = compiled.input_names

    def kernel(self, mnk, device=0):
        raise epifuse.UserError("gemm family: no tile for this chain on this target")

    def __call__(self, *tensors, **kw):
        raise AssertionError("a chain that does not compile is never launched")


def on_cpu(plan, refuse_dgrad=False):
    """`plan` with its kernels run on the CPU reference, and the backward's kernels
    as the registered ops are called: (list, seed, offset, rng_state) -> list."""
    plan.lower_forward, plan.upper_forward = OnNumpy(plan.lower_forward), OnNumpy(plan.upper_forward)
    roles = {"upper_backward": plan.upper_kernel, "lower_backward": plan.lower_kernel, "dgrad": plan.dgrad,
             "lower_backward_full": plan.lower_backward}
    for role, chain in roles.items():
        if chain is not None:
            plan._compiled[role] = OnNumpy(plan.compiled(role))
    if refuse_dgrad and plan.dgrad is not None:
        plan._compiled["dgrad"] = Refusing(plan._compiled["dgrad"])

    def op(run):
        return lambda ts, seed, offset, state: list(_listed(run(*ts, seed=seed, offset=offset, rng_state=state)))

    kernels = {role: op(plan._compiled[role]) for role in ("upper_backward", "lower_backward")
               if roles[role] is not None}
    if plan.dgrad is not None:
        kernels["dgrad"] = op(plan.run_dgrad)
    return kernels


def _listed(out):
    return out if isinstance(out, tuple) else (out,)


def randn(*shape, scale=1.0):
    return torch.randn(*shape, dtype=torch.float32) * scale


def run_plan(plan, kernels, tensors, dy, seed, fused):
    """(outputs by key, gradients of `tensors`) of the plan's forward and backward."""
    outs = plan.forward(tensors, seed, 0, None)
    kept = [outs[i] for i in plan.kept]
    needs = [True] * len(tensors)
    grads = plan.backward(kernels, tensors, kept, dy, seed, 0, None, fused, needs)
    return dict(zip(plan.outputs, outs)), grads


def rel_err(got, want):
    want = want.double()
    return ((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def reference(f, tensors, dy):
    """y and the gradients of f(*tensors) in float64 autograd."""
    leaves = [t.detach().double().requires_grad_(True) for t in tensors]
    y = f(*leaves)
    y.backward(dy.double())
    return y.detach(), [t.grad for t in leaves]


def check(plan_results, want, tol=2e-5):
    (outs, grads), (y, wgrads) = plan_results, want
    assert rel_err(outs["upper", "y"], y) <= tol
    for i, (g, w) in enumerate(zip(grads, wgrads)):
        assert g is not None and g.shape == w.shape and g.is_contiguous(), i
        assert rel_err(g, w) <= tol, i


@pytest.mark.parametrize("activation, p", [("gelu_tanh", 0.0), ("gelu_tanh", 0.25), ("relu", 0.0)])
def test_mlp_plan_matches_autograd_fused_unfused_and_fallback(activation, p):
    torch.manual_seed(1)
    lower = linear_chain("f32", True, activation, p)
    upper = linear_chain("f32", True, residual=True)
    x, w1, b1 = randn(M, HIDDEN), randn(FFN, HIDDEN, scale=0.2), randn(FFN, scale=0.1)
    w2, b2, dy = randn(HIDDEN, FFN, scale=0.2), randn(HIDDEN, scale=0.1), randn(M, HIDDEN)
    tensors = [x, w1, b1, w2, b2]
    seed = 11 if p else 0
    plan = Plan(lower, upper, residual_is_x=True)
    assert plan.names == [("lower", "a"), ("lower", "b"), ("lower", "bias"), ("upper", "b"), ("upper", "bias")]
    assert plan.dgrad is not None and plan.dgrad.mainloop == "gemm"
    fused = run_plan(plan, on_cpu(plan), tensors, dy, seed, True)
    plan = Plan(lower, upper, residual_is_x=True)
    unfused = run_plan(plan, on_cpu(plan), tensors, dy, seed, False)
    plan = Plan(lower, upper, residual_is_x=True)
    fallback = run_plan(plan, on_cpu(plan, refuse_dgrad=True), tensors, dy, seed, True)
    assert len(plan._refused) == 1  # remembered: the next call goes straight to the two steps

    kept = fused[0]["lower", "y"] != 0  # the forward's mask (GELU is not 0 here)
    if p:
        assert 0 < 1 - kept.float().mean().item() < 0.5

    def mlp(x, w1, b1, w2, b2):
        h = ACT[activation](F.linear(x, w1, b1))
        if p:
            h = h * kept / (1 - p)
        return x + F.linear(h, w2, b2)

    want = reference(mlp, tensors, dy)
    for got in (fused, unfused, fallback):
        check(got, want)
    # The fallback is the two-step form inside the dgrad op: the same numbers as fused_dgrad=False.
    for g, u in zip(fallback[1], unfused[1]):
        assert torch.equal(g, u)


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("bias", [False, True])
def test_gated_plan_matches_autograd_with_the_residual_as_x(activation, bias):
    torch.manual_seed(2)
    lower = gated_chain("f32", activation, bias)
    upper = linear_chain("f32", bias, residual=True)
    x, wg, wu, wd = randn(M, HIDDEN), randn(FFN, HIDDEN, scale=0.2), randn(FFN, HIDDEN, scale=0.2), \
        randn(HIDDEN, FFN, scale=0.2)
    bg, bu, bd = randn(FFN, scale=0.1), randn(FFN, scale=0.1), randn(HIDDEN, scale=0.1)
    tensors = [x, wg, wu] + ([bg, bu] if bias else []) + [wd] + ([bd] if bias else [])
    dy = randn(M, HIDDEN)

    def gated(x, wg, wu, *rest):
        bg, bu, wd, bd = rest if bias else (None, None) + rest + (None,)
        return x + F.linear(ACT[activation](F.linear(x, wg, bg)) * F.linear(x, wu, bu), wd, bd)

    want = reference(gated, tensors, dy)
    for fused in (True, False):
        plan = Plan(lower, upper, residual_is_x=True)
        check(run_plan(plan, on_cpu(plan), tensors, dy, 0, fused), want)


def test_a_residual_that_is_not_x_gets_its_own_gradient_and_unneeded_ones_are_none():
    torch.manual_seed(3)
    plan = Plan(gated_chain("f32", "silu"), linear_chain("f32", False, residual=True))
    assert plan.names[-1] == ("upper", "residual")
    x, wg, wu, wd = randn(M, HIDDEN), randn(FFN, HIDDEN, scale=0.2), randn(FFN, HIDDEN, scale=0.2), \
        randn(HIDDEN, FFN, scale=0.2)
    res, dy = randn(M, HIDDEN), randn(M, HIDDEN)
    tensors = [x, wg, wu, wd, res]
    kernels = on_cpu(plan)
    outs = plan.forward(tensors, 0, 0, None)
    kept = [outs[i] for i in plan.kept]
    grads = plan.backward(kernels, tensors, kept, dy, 0, 0, None, True, [True, False, True, False, True])
    assert grads[1] is None and grads[3] is None
    assert torch.equal(grads[4], dy)
    want = reference(lambda x, wg, wu, wd, r: F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd) + r,
                     tensors, dy)[1]
    assert rel_err(grads[0], want[0]) <= 2e-5 and rel_err(grads[2], want[2]) <= 2e-5


def test_a_lower_chain_that_passes_dy_through_takes_torch_mm_for_its_dgrad():
    plan = Plan(linear_chain("f32", False), linear_chain("f32", True))
    assert plan.dgrad is None and "torch.mm" in plan.dgrad_refused
    torch.manual_seed(4)
    x, w1, w2, b2, dy = randn(M, HIDDEN), randn(FFN, HIDDEN), randn(HIDDEN, FFN), randn(HIDDEN), randn(M, HIDDEN)
    want = reference(lambda x, w1, w2, b2: F.linear(F.linear(x, w1), w2, b2), [x, w1, w2, b2], dy)
    check(run_plan(plan, on_cpu(plan), [x, w1, w2, b2], dy, 0, True), want)


def test_the_forward_saves_what_the_backward_reads():
    plan = Plan(linear_chain("f32", True, "gelu_tanh", 0.1), linear_chain("f32", True, residual=True), True)
    kept = [plan.outputs[i] for i in plan.kept]
    assert ("upper", "y") not in kept  # y itself is never read back
    assert ("lower", "y") in kept  # h: dW2's operand
    assert [k for k in kept if k[0] == "lower" and k[1].startswith("saved_")]


@pytest.mark.parametrize("lower, upper, residual_is_x, says", [
    (lambda: linear_chain("f32", True), lambda: linear_chain("f32", True, p=0.1), False, "has a dropout"),
    (lambda: epifuse.Chain("row_b", {"kind": "gemm", "a": "f32", "b": "f32"}), lambda: linear_chain("f32"), False,
     "B column-major"),
    (lambda: linear_chain("f32"), lambda: gated_chain("f32"), False, "must be a gemm chain"),
    (lambda: linear_chain("f32"), lambda: linear_chain("f32", True), True, "residual_is_x needs a full input"),
    (lambda: linear_chain("bf16"), lambda: linear_chain("f32"), False, "reads A as f32"),
])
def test_the_plan_refuses_chains_it_cannot_stack(lower, upper, residual_is_x, says):
    with pytest.raises(epifuse.UserError, match=says):
        Plan(lower(), upper(), residual_is_x)


def test_a_lower_chain_with_two_outputs_is_refused():
    c = linear_chain("f32", True, "gelu_tanh")
    c.output("z", c.accumulator(), "f32")
    with pytest.raises(epifuse.UserError, match="must have one output"):
        Plan(c, linear_chain("f32"))


def test_nothing_below_the_upper_layer_taking_a_gradient_launches_no_dgrad():
    torch.manual_seed(5)
    plan = Plan(linear_chain("f32", True, "gelu_tanh"), linear_chain("f32", True, residual=True), True)
    kernels = on_cpu(plan)
    kernels["dgrad"] = kernels["lower_backward"] = None  # would raise if called
    x, w1, b1, w2, b2, dy = randn(M, HIDDEN), randn(FFN, HIDDEN), randn(FFN), randn(HIDDEN, FFN), randn(HIDDEN), \
        randn(M, HIDDEN)
    tensors = [x, w1, b1, w2, b2]
    outs = plan.forward(tensors, 0, 0, None)
    grads = plan.backward(kernels, tensors, [outs[i] for i in plan.kept], dy, 0, 0, None, True,
                          [False, False, False, True, True])
    assert grads[:3] == [None, None, None]
    assert rel_err(grads[4], dy.double().sum(0)) <= 1e-6
    assert rel_err(grads[3], dy.double().t() @ outs[plan.outputs.index(("lower", "y"))].double()) <= 1e-6
