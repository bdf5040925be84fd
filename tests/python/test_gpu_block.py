"""GPU tier: the block op (epifuse.torch.block) behind epifuse.nn.MLP and GatedMLP,
whose backward runs the lower layer's epilogue backward in the upper layer's dgrad
GEMM. Forward and every gradient against plain-torch modules with the same weights
(f32 within 1e-4 of the largest value, tf32 off; bf16 no further from a float64 run
than twice torch's own bf16 run), fused and unfused (fused_dgrad=False) alike; with
dropout, fused and unfused gradients agree and dacc is zero where the forward
dropped; an MLP whose residual is another tensor (a pre-norm block); the dgrad op's
own fallback equals the unfused path bit for bit; opcheck; torch.compile(fullgraph=True); a captured CUDA graph; bias gradients bit-equal over
two backward calls; autocast; a second GPU. Skipped without torch 2.4+ and a GPU."""
import copy

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "register_autograd"):
    pytest.skip(f"torch {torch.__version__} has no torch.library.register_autograd (2.4+)", allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import epifuse  # noqa: E402
import epifuse.nn as enn  # noqa: E402
import epifuse.torch  # noqa: E402
from epifuse.layers import gated_chain, linear_chain  # noqa: E402

ACT = {"gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "silu": F.silu, "relu": F.relu}
DTYPES = [torch.float32, torch.bfloat16]
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")


@pytest.fixture(autouse=True)
def exact_f32_matmul():
    """f32 references multiply in f32, as the chains then do (tf32 follows torch's flag)."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def randn(*shape, dtype=torch.float32, device="cuda"):
    return torch.randn(*shape, device=device).to(dtype)


def rel_err(got, want):
    want = want.double()
    return ((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


class RefMLP(nn.Module):
    def __init__(self, hidden, ffn, activation="gelu_tanh", bias=True):
        super().__init__()
        self.fc1, self.fc2, self.act = nn.Linear(hidden, ffn, bias), nn.Linear(ffn, hidden, bias), ACT[activation]

    def forward(self, x, residual=None):
        return (x if residual is None else residual) + self.fc2(self.act(self.fc1(x)))


class RefGated(nn.Module):
    def __init__(self, hidden, ffn, activation="silu", bias=False):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn, bias)
        self.up_proj = nn.Linear(hidden, ffn, bias)
        self.down_proj = nn.Linear(ffn, hidden, bias)
        self.act = ACT[activation]

    def forward(self, x, residual=None):
        y = self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))
        return y if residual is None else y + residual


def run(module, inputs, dy, same=()):
    """y and the gradients (inputs, then parameters by name) of <module(*inputs), dy>;
    the inputs numbered in `same` are the first input itself (a residual that is x)."""
    xs = [t.detach().clone().requires_grad_(True) for t in inputs]
    xs = [xs[0] if i in same else t for i, t in enumerate(xs)]
    y = module(*xs)
    (y.float() * dy.float()).sum().backward()
    grads = {f"input{i}": x.grad for i, x in enumerate(xs) if i not in same}
    grads.update({n: p.grad for n, p in module.named_parameters()})
    return y, grads


def compare(ours, ref, inputs, dtype, same=()):
    """ours (loaded from ref's state_dict) against ref, as test_gpu_nn.py compares."""
    ours.load_state_dict(ref.state_dict())
    ours.to("cuda", dtype)
    ref = ref.to("cuda", dtype)
    dy = randn(*inputs[0].shape[:-1], ref_out_features(ref), dtype=dtype)
    got_y, got = run(ours, inputs, dy, same)
    ref_y, want = run(ref, inputs, dy, same)
    assert got_y.dtype == ref_y.dtype and got_y.shape == ref_y.shape
    assert set(got) == set(want) and all(g is not None for g in got.values()), (sorted(got), sorted(want))
    for name, p in ours.named_parameters():
        assert got[name].shape == p.shape and got[name].is_contiguous(), name  # nn.Linear's layout, no copy
    if dtype is torch.float32:
        assert rel_err(got_y, ref_y) <= 1e-4
        for name in want:
            assert rel_err(got[name], want[name]) <= 1e-4, name
        return got
    exact_y, exact = run(copy.deepcopy(ref).double(), [t.double() for t in inputs], dy, same)
    bound = torch.finfo(dtype).eps
    assert rel_err(got_y, exact_y) <= max(2 * rel_err(ref_y, exact_y), bound)
    for name in want:
        assert rel_err(got[name], exact[name]) <= max(2 * rel_err(want[name], exact[name]), bound), name
    return got


def ref_out_features(ref):
    return (ref.fc2 if hasattr(ref, "fc2") else ref.down_proj).out_features


# ---- against plain torch, dropout off
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("activation", ["gelu_tanh", "relu"])
def test_mlp_forward_and_gradients_match_torch(dtype, fused, activation):
    torch.manual_seed(8)
    x = randn(3, 50, 128, dtype=dtype)  # batched: folded into M
    if activation == "relu":  # ReLU's gradient jumps at 0: exact grids keep every sign the same
        x = torch.randint(-2, 3, x.shape, device="cuda").to(dtype) / 4
    ref = RefMLP(128, 512, activation)
    if activation == "relu":
        with torch.no_grad():
            for p in ref.parameters():
                p.copy_(torch.randint(-2, 3, p.shape) / 64)
    compare(enn.MLP(128, 512, activation, fused_dgrad=fused), ref, [x], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("activation, bias", [("silu", False), ("gelu_tanh", False), ("silu", True)])
def test_gated_mlp_forward_and_gradients_match_torch(dtype, fused, activation, bias):
    torch.manual_seed(11)
    compare(enn.GatedMLP(128, 352, activation, bias, fused_dgrad=fused), RefGated(128, 352, activation, bias),
            [randn(2, 64, 128, dtype=dtype)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("same", [(1,), ()])
def test_gated_mlp_with_a_residual_that_is_x_or_another_tensor(dtype, same):
    torch.manual_seed(12)
    x = randn(96, 128, dtype=dtype)
    compare(enn.GatedMLP(128, 256, residual=True), RefGated(128, 256), [x, randn(96, 128, dtype=dtype)], dtype,
            same)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("same", [(1,), ()])
def test_mlp_with_a_residual_that_is_x_or_another_tensor(dtype, fused, same):
    """A pre-norm block's MLP: forward(norm(x), x) adds the stream, not its own input."""
    torch.manual_seed(13)
    x = randn(2, 48, 128, dtype=dtype)
    compare(enn.MLP(128, 384, fused_dgrad=fused), RefMLP(128, 384), [x, randn(2, 48, 128, dtype=dtype)], dtype,
            same)


def test_mlp_residual_of_another_shape_is_refused():
    m = enn.MLP(64, 128).cuda()
    with pytest.raises(epifuse.UserError, match="residual has shape"):
        m(torch.randn(8, 64, device="cuda"), torch.randn(8, 32, device="cuda"))


# ---- dropout
def identity_mlp(p, fused, n=128, ffn=256):
    """An MLP whose x is I (M = hidden = n): fc1.weight.grad is daccᵀ, dacc element by element."""
    mlp = enn.MLP(n, ffn, "gelu_tanh", dropout=p, fused_dgrad=fused).cuda().train()
    return mlp, torch.eye(n, device="cuda")


def test_dropout_fused_and_unfused_gradients_agree_and_dacc_is_zero_where_the_forward_dropped():
    p, grads = 0.25, {}
    torch.manual_seed(21)
    fused, x = identity_mlp(p, True)
    unfused = enn.MLP(128, 256, "gelu_tanh", dropout=p, fused_dgrad=False).cuda().train()
    unfused.load_state_dict(fused.state_dict())
    dy = randn(128, 128)
    for name, mlp in (("fused", fused), ("unfused", unfused)):
        xs = x.clone().requires_grad_(True)
        torch.manual_seed(22)  # the same rng_state: the same masks
        mlp(xs).backward(dy)
        grads[name] = {"x": xs.grad, **{n: q.grad for n, q in mlp.named_parameters()}}
    for name in grads["fused"]:
        assert rel_err(grads["fused"][name], grads["unfused"][name]) <= 1e-5, name
    torch.manual_seed(22)
    kept = fused.fc1(x) != 0  # fc1's chain is the block's lower chain: the same draw, the same mask
    assert abs(1 - kept.float().mean().item() - p) < 0.02
    for name in grads:
        dacc = grads[name]["fc1.weight"].t()  # x = I
        assert (dacc[~kept] == 0).all(), name
        assert (dacc[kept] != 0).float().mean().item() > 0.99, name


def test_dropout_gradients_follow_the_forward_mask_against_torch():
    torch.manual_seed(9)
    p = 0.2
    mlp = enn.MLP(64, 256, activation="gelu_tanh", dropout=p).cuda().train()
    x = randn(128, 64).requires_grad_(True)
    torch.manual_seed(10)
    y = mlp(x)
    torch.manual_seed(10)
    kept = mlp.fc1(x.detach()) != 0
    dy = randn(*y.shape)
    y.backward(dy)
    xr = x.detach().clone().requires_grad_(True)
    w = [t.detach().clone().requires_grad_(True) for t in (mlp.fc1.weight, mlp.fc1.bias, mlp.fc2.weight,
                                                           mlp.fc2.bias)]
    want = xr + F.linear(F.gelu(F.linear(xr, w[0], w[1]), approximate="tanh") * kept / (1 - p), w[2], w[3])
    assert rel_err(y, want) <= 1e-4
    want.backward(dy)
    assert rel_err(x.grad, xr.grad) <= 1e-4
    for got, r in zip((mlp.fc1.weight, mlp.fc1.bias, mlp.fc2.weight, mlp.fc2.bias), w):
        assert rel_err(got.grad, r.grad) <= 1e-4


class Refusing:
    """A dgrad kernel that does not compile (as a GEMM family's UserError would say)."""

    def __init__(self, compiled):
        self.input_names = compiled.input_names

    def kernel(self, mnk, device=0):
        raise epifuse.UserError("no tile for this chain on this target")

    def __call__(self, *tensors, **kw):
        raise AssertionError("a chain that does not compile is never launched")


def test_the_dgrad_ops_fallback_gives_the_unfused_paths_bits(monkeypatch):
    torch.manual_seed(23)
    f = epifuse.torch.block(linear_chain("f32", True, "gelu_tanh", 0.1), linear_chain("f32", True, residual=True),
                            residual_is_x=True)
    tensors = [randn(200, 96), randn(384, 96) * 0.1, randn(384) * 0.1, randn(96, 384) * 0.1, randn(96) * 0.1]
    dy = randn(200, 96)

    def grads(**kw):
        ts = [t.clone().requires_grad_(True) for t in tensors]
        f(*ts, seed=5, **kw).backward(dy)
        return [t.grad for t in ts]

    unfused = grads(fused_dgrad=False)
    fused = grads(fused_dgrad=True)
    monkeypatch.setitem(f.plan._compiled, "dgrad", Refusing(f.plan.compiled("dgrad")))
    monkeypatch.setattr(f.plan, "_refused", {})
    monkeypatch.setattr(f.plan, "_compiles", set())
    fallback = grads(fused_dgrad=True)
    assert len(f.plan._refused) == 1
    for u, fb, fu in zip(unfused, fallback, fused):
        assert torch.equal(u, fb)
        assert rel_err(fu, u) <= 1e-5


# ---- torch integration
def block_args(dtype=torch.float32, requires_grad=True):
    g = torch.Generator(device="cuda").manual_seed(7)
    shapes = [(64, 128), (256, 128), (256,), (128, 256), (128,)]
    return [(torch.randn(s, device="cuda", generator=g) * 0.1).to(dtype).requires_grad_(requires_grad)
            for s in shapes]


@pytest.mark.parametrize("fused", [True, False])
def test_opcheck_passes_for_the_block_op(fused):
    f = epifuse.torch.block(linear_chain("f32", True, "gelu_tanh", 0.1), linear_chain("f32", True, residual=True),
                            residual_is_x=True)
    torch.library.opcheck(f.op, (block_args(), 5, 0, None, fused))
    g = epifuse.torch.block(gated_chain("f32", "silu"), linear_chain("f32", False))
    args = block_args()
    torch.library.opcheck(g.op, ([args[0], args[1], args[1].detach().clone().requires_grad_(True), args[3]], 0, 0,
                                 None, fused))


@pytest.mark.parametrize("module", ["block", "mlp", "gated"])
def test_torch_compile_fullgraph_runs_forward_and_backward(module):
    """The op alone with dropout (a fixed seed: Inductor draws its own random numbers
    otherwise), then nn.MLP and nn.GatedMLP (residual x) as modules."""
    torch.manual_seed(31)
    if module == "block":
        f = epifuse.torch.block(linear_chain("f32", True, "gelu_tanh", 0.1),
                                linear_chain("f32", True, residual=True), residual_is_x=True)
        weights = [t.detach().requires_grad_(True) for t in block_args()[1:]]
        params = dict(zip(["w1", "b1", "w2", "b2"], weights))

        def forward(x):
            return f(x, *weights, seed=3)
    else:
        m = (enn.MLP(128, 256) if module == "mlp" else enn.GatedMLP(128, 256, residual=True)).cuda()
        params = dict(m.named_parameters())

        def forward(x):
            return m(x) if module == "mlp" else m(x, x)

    def step(x):
        y = forward(x)
        return (y * y).sum()

    x = randn(4, 32, 128)
    xe = x.clone().requires_grad_(True)
    step(xe).backward()
    eager = {"x": xe.grad, **{n: p.grad.clone() for n, p in params.items()}}
    for p in params.values():
        p.grad = None
    explained = torch._dynamo.explain(step)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    xc = x.clone().requires_grad_(True)
    torch.compile(step, fullgraph=True)(xc).backward()
    compiled = {"x": xc.grad, **{n: p.grad for n, p in params.items()}}
    for name in eager:
        assert rel_err(compiled[name], eager[name]) <= 1e-5, name


def captured_step(mlp, x, dy):
    """A CUDA graph of mlp's forward and backward on x and dy, warmed up on its
    capture stream (kernels loaded, column-sum workspace made there); the gradients
    live in mlp's .grad tensors, refilled at each replay."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            mlp(x).backward(dy)
    torch.cuda.current_stream().wait_stream(s)
    mlp.zero_grad(set_to_none=True)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        mlp(x).backward(dy)
    return g


def test_a_captured_cuda_graph_replays_forward_and_backward():
    torch.manual_seed(32)
    mlp = enn.MLP(128, 256).cuda()
    x, dy = randn(64, 128), randn(64, 128)
    g = captured_step(mlp, x, dy)
    g.replay()
    torch.cuda.synchronize()
    replayed = {n: p.grad.clone() for n, p in mlp.named_parameters()}
    mlp.zero_grad(set_to_none=True)
    mlp(x).backward(dy)
    for n, p in mlp.named_parameters():
        assert rel_err(replayed[n], p.grad) <= 1e-6, n


def test_each_replay_of_a_captured_step_draws_a_fresh_mask():
    torch.manual_seed(33)
    mlp = enn.MLP(128, 256, dropout=0.1).cuda().train()
    x, dy = randn(64, 128), randn(64, 128)
    g = captured_step(mlp, x, dy)
    grads = []
    for _ in range(2):
        g.replay()
        torch.cuda.synchronize()
        grads.append(mlp.fc1.bias.grad.clone())
    assert torch.isfinite(grads[0]).all() and not torch.equal(grads[0], grads[1])


@pytest.mark.parametrize("module", ["mlp", "gated"])
def test_two_backward_calls_give_bit_identical_bias_gradients(module):
    torch.manual_seed(36)
    m = (enn.MLP(256, 1024) if module == "mlp" else enn.GatedMLP(256, 1024, bias=True)).cuda()
    x, dy = randn(1000, 256), randn(1000, 256)
    out = []
    for _ in range(2):
        m.zero_grad(set_to_none=True)
        m(x).backward(dy)
        out.append({n: p.grad.clone() for n, p in m.named_parameters() if n.endswith("bias")})
    assert out[0] and all(torch.equal(out[0][n], out[1][n]) for n in out[0])


def test_mlp_under_autocast_runs_in_autocasts_dtype():
    torch.manual_seed(34)
    ref = RefMLP(128, 256).cuda()
    ours = enn.MLP(128, 256).cuda()
    ours.load_state_dict(ref.state_dict())
    x = randn(32, 128)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y, want = ours(x), ref(x)
    assert y.dtype == torch.bfloat16 and rel_err(y, want) <= 8 * torch.finfo(torch.bfloat16).eps
    y.float().sum().backward()
    assert ours.fc1.weight.grad.dtype == torch.float32 and ours.fc2.bias.grad.dtype == torch.float32


def test_a_block_input_that_requires_grad_but_cannot_have_one_raises():
    lower = linear_chain("f32", True, "gelu_tanh")
    upper = epifuse.Chain("scaled_fc2", {"kind": "gemm", "a": "f32", "b": "f32", "b_layout": "col"})
    upper.output("y", upper.mul(upper.accumulator(), upper.input("scale", "f32", "row", grad=False)), "f32")
    f = epifuse.torch.block(lower, upper)
    args = block_args()[:4] + [torch.ones(128, device="cuda", requires_grad=True)]
    with pytest.raises(epifuse.UserError, match="'scale'.*not differentiable"):
        f(*args).sum().backward()


@two_gpus
def test_the_block_runs_on_the_second_gpu_while_the_first_is_current():
    torch.manual_seed(35)
    ref = RefMLP(128, 256)
    ours = enn.MLP(128, 256)
    ours.load_state_dict(ref.state_dict())
    x = randn(64, 128, device="cuda:1")
    assert torch.cuda.current_device() == 0
    got_y, got = run(ours.to("cuda:1"), [x], randn(64, 128, device="cuda:1"))
    assert got_y.device == torch.device("cuda:1") and torch.cuda.current_device() == 0
    assert all(g.device == torch.device("cuda:1") for g in got.values())
