"""GPU tier: epifuse.nn modules against their PyTorch counterparts (skipped without
torch 2.4+ and a CUDA GPU). Forward and gradients of inputs and parameters on random
data with dropout off; with dropout on, the drop rate, the 1/(1-p) scale and the
backward's use of the forward's mask; swap() on a LLaMA-style and a GPT-style block."""
import copy

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "register_autograd"):
    pytest.skip(f"torch {torch.__version__} has no torch.library.register_autograd", allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import epifuse.nn as enn  # noqa: E402

ACT = {None: lambda v: v, "relu": F.relu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "gelu": F.gelu,
       "silu": F.silu}
DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(autouse=True)
def exact_f32_matmul():
    """f32 references multiply in f32, as the chains then do (tf32 follows torch's flag)."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def randn(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, device="cuda") * scale).to(dtype)


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def rel_err(got, want):
    want = want.double()
    return ((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


# ---- reference modules: PyTorch's, with the parameter names of the epifuse ones
class RefLinear(nn.Linear):
    def __init__(self, i, o, bias=True, activation=None):
        super().__init__(i, o, bias)
        self.act = ACT[activation]

    def forward(self, x, residual=None):
        y = self.act(super().forward(x))
        return y if residual is None else y + residual


class RefMLP(nn.Module):
    def __init__(self, hidden, ffn, activation="gelu_tanh", bias=True):
        super().__init__()
        self.fc1, self.fc2, self.act = nn.Linear(hidden, ffn, bias), nn.Linear(ffn, hidden, bias), ACT[activation]

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(x)))


class LlamaMLP(nn.Module):
    def __init__(self, hidden, ffn, activation="silu"):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)
        self.act = ACT[activation]

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class RefRMSNorm(nn.RMSNorm):
    def forward(self, x, residual=None):
        if residual is None:
            return super().forward(x)
        h = x + residual
        return super().forward(h), h


class RefLayerNorm(nn.LayerNorm):
    def forward(self, x, residual=None):
        if residual is None:
            return super().forward(x)
        h = x + residual
        return super().forward(h), h


class RefSoftmax(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, mask=None):
        z = x * self.scale
        return torch.softmax(z if mask is None else z + mask, -1)


def run(module, inputs, dys, no_grad=()):
    """Outputs and gradients (inputs, then parameters by name) of sum(<out_i, dy_i>);
    the inputs numbered in no_grad take none."""
    xs = [t if i in no_grad else leaf(t) for i, t in enumerate(inputs)]
    out = module(*xs)
    outs = out if isinstance(out, tuple) else (out,)
    sum((o.float() * d.float()).sum() for o, d in zip(outs, dys)).backward()
    grads = {f"input{i}": x.grad for i, x in enumerate(xs) if isinstance(x, torch.Tensor) and x.grad is not None}
    grads.update({n: p.grad for n, p in module.named_parameters()})
    return outs, grads


def compare(ours, ref, inputs, dtype, no_grad=()):
    """ours (loaded from ref's state_dict) against ref: f32 within 1e-4 of the largest
    value; bf16 no further from a float64 run than twice ref's own distance from it
    (or bf16's epsilon)."""
    ours.load_state_dict(ref.state_dict())
    ours.to("cuda", dtype).eval()
    ref = ref.to("cuda", dtype).eval()
    probe = ref(*inputs)
    probe = probe if isinstance(probe, tuple) else (probe,)
    dys = [randn(*o.shape, dtype=dtype) for o in probe]
    got_out, got = run(ours, inputs, dys, no_grad)
    ref_out, want = run(ref, inputs, dys, no_grad)
    assert set(got) == set(want) and all(g is not None for g in got.values()), (sorted(got), sorted(want))
    if dtype is torch.float32:
        for g, w in zip(got_out, ref_out):
            assert rel_err(g, w) <= 1e-4
        for name in want:
            assert rel_err(got[name], want[name]) <= 1e-4, name
        return
    ref64 = copy.deepcopy(ref).double()
    exact_out, exact = run(ref64, [t.double() for t in inputs], dys, no_grad)
    bound = torch.finfo(dtype).eps
    for g, w, e in zip(got_out, ref_out, exact_out):
        assert g.dtype == w.dtype
        assert rel_err(g, e) <= max(2 * rel_err(w, e), bound)
    for name in want:
        assert rel_err(got[name], exact[name]) <= max(2 * rel_err(want[name], exact[name]), bound), name


# ---- Linear
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", [None, "relu", "gelu_tanh", "gelu", "silu"])
def test_linear_matches_nn_linear(dtype, activation):
    torch.manual_seed(1)
    x = randn(4, 64, 256, dtype=dtype)
    ref = RefLinear(256, 192, activation=activation)
    if activation == "relu":
        # ReLU's gradient jumps at 0: on a grid of multiples of 2^-8 every product and
        # sum is exact in f32, so torch, epifuse and float64 agree on each sign.
        x = torch.randint(-2, 3, x.shape, device="cuda").to(dtype) / 4
        with torch.no_grad():
            ref.weight.copy_(torch.randint(-2, 3, ref.weight.shape) / 64)
            ref.bias.copy_(torch.randint(-2, 3, ref.bias.shape) / 16)
    compare(enn.Linear(256, 192, activation=activation), ref, [x], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_without_bias_and_with_a_residual(dtype):
    torch.manual_seed(2)
    x, res = randn(200, 128, dtype=dtype), randn(200, 96, dtype=dtype)
    compare(enn.Linear(128, 96, bias=False, activation="silu", residual=True),
            RefLinear(128, 96, bias=False, activation="silu"), [x, res], dtype)


def test_linear_has_nn_linears_parameters_and_init():
    torch.manual_seed(3)
    ref = nn.Linear(96, 48, device="cuda")
    torch.manual_seed(3)
    ours = enn.Linear(96, 48, device="cuda")
    assert {n: p.shape for n, p in ours.named_parameters()} == {n: p.shape for n, p in ref.named_parameters()}
    assert torch.equal(ours.weight, ref.weight) and torch.equal(ours.bias, ref.bias)


def test_linear_dropout_is_off_in_eval_mode():
    torch.manual_seed(4)
    x = randn(64, 128)
    ours = enn.Linear(128, 64, activation="relu", dropout=0.5).cuda().eval()
    want = F.relu(F.linear(x, ours.weight, ours.bias))
    assert rel_err(ours(x), want) <= 1e-4


def test_linear_dropout_rate_scale_and_the_backward_mask():
    """With weight = I and no bias, y = dropout(x) and dx = dropout(dy): the gradient
    is zero exactly where the forward dropped and dy/(1-p) where it kept."""
    torch.manual_seed(5)
    p, n = 0.25, 256
    fc = enn.Linear(n, n, bias=False, dropout=p).cuda().train()
    with torch.no_grad():
        fc.weight.copy_(torch.eye(n, device="cuda"))
    x = leaf(randn(512, n))
    y = fc(x)
    dy = randn(512, n)
    y.backward(dy)
    kept = y.detach() != 0
    assert abs((1 - kept.float().mean()).item() - p) < 0.01
    torch.testing.assert_close(y.detach()[kept], (x.detach() / (1 - p))[kept], rtol=1e-6, atol=0)
    assert (x.grad[~kept] == 0).all()
    torch.testing.assert_close(x.grad[kept], (dy / (1 - p))[kept], rtol=1e-6, atol=0)
    torch.testing.assert_close(fc.weight.grad, (dy * kept / (1 - p)).t() @ x.detach(), rtol=1e-4, atol=1e-4)


def test_linear_gelu_dropout_gradients_follow_the_forward_mask():
    torch.manual_seed(6)
    p = 0.1
    fc = enn.Linear(128, 256, activation="gelu_tanh", dropout=p).cuda().train()
    x = randn(300, 128)
    xs = leaf(x)
    y = fc(xs)
    dy = randn(*y.shape)
    y.backward(dy)
    kept = y.detach() != 0
    assert abs((1 - kept.float().mean()).item() - p) < 0.02
    ref = [leaf(t) for t in (x, fc.weight, fc.bias)]
    want = F.gelu(F.linear(*ref), approximate="tanh") * kept / (1 - p)
    assert rel_err(y, want) <= 1e-4
    want.backward(dy)
    for got, r in zip((xs.grad, fc.weight.grad, fc.bias.grad), ref):
        assert rel_err(got, r.grad) <= 1e-4


def test_linear_under_autocast_runs_in_autocasts_dtype():
    torch.manual_seed(17)
    ref = RefLinear(128, 64, activation="gelu_tanh").cuda()
    ours = enn.Linear(128, 64, activation="gelu_tanh", residual=True).cuda()
    ours.load_state_dict(ref.state_dict())
    x, res = randn(32, 128), randn(32, 64)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y, want = ours(x, res), ref(x, res.bfloat16())
    assert y.dtype == torch.bfloat16 and rel_err(y, want) <= 2 * torch.finfo(torch.bfloat16).eps
    y.float().sum().backward()
    assert ours.weight.grad.dtype == torch.float32


def test_gated_mlp_adds_a_residual_in_down_projs_epilogue():
    torch.manual_seed(18)
    ref = LlamaMLP(64, 160).cuda()
    ours = enn.GatedMLP(64, 160, residual=True).cuda()
    ours.load_state_dict(ref.state_dict())
    x = randn(40, 64)
    assert rel_err(ours(x, x), x + ref(x)) <= 1e-4


def test_dropout_seeds_follow_torch_manual_seed():
    fc = enn.Linear(64, 64, dropout=0.3).cuda().train()
    x = randn(128, 64)
    torch.manual_seed(7)
    a = fc(x)
    torch.manual_seed(7)
    b = fc(x)
    c = fc(x)
    assert torch.equal(a, b) and not torch.equal(b, c)


# ---- MLP, GatedMLP
@pytest.mark.parametrize("dtype", DTYPES)
def test_mlp_matches_its_torch_form(dtype):
    torch.manual_seed(8)
    compare(enn.MLP(128, 512), RefMLP(128, 512), [randn(3, 50, 128, dtype=dtype)], dtype)


def test_mlp_with_dropout_keeps_the_mask_between_forward_and_backward():
    torch.manual_seed(9)
    p = 0.2
    mlp = enn.MLP(64, 256, activation="gelu_tanh", dropout=p).cuda().train()
    x = leaf(randn(128, 64))
    torch.manual_seed(10)
    y = mlp(x)
    torch.manual_seed(10)
    kept = mlp.fc1(x.detach()) != 0  # the same seed draws the same mask; GELU is not 0 here
    assert abs(1 - kept.float().mean().item() - p) < 0.02
    dy = randn(*y.shape)
    y.backward(dy)
    xr = leaf(x.detach())
    w = [leaf(t) for t in (mlp.fc1.weight, mlp.fc1.bias, mlp.fc2.weight, mlp.fc2.bias)]
    want = xr + F.linear(F.gelu(F.linear(xr, w[0], w[1]), approximate="tanh") * kept / (1 - p), w[2], w[3])
    assert rel_err(y, want) <= 1e-4
    want.backward(dy)
    assert rel_err(x.grad, xr.grad) <= 1e-4
    for got, r in zip((mlp.fc1.weight, mlp.fc1.bias, mlp.fc2.weight, mlp.fc2.bias), w):
        assert rel_err(got.grad, r.grad) <= 1e-4


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_gated_mlp_matches_llama_mlp(dtype, activation):
    torch.manual_seed(11)
    compare(enn.GatedMLP(128, 352, activation), LlamaMLP(128, 352, activation), [randn(2, 64, 128, dtype=dtype)],
            dtype)


# ---- norms
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("residual", [False, True])
def test_rmsnorm_matches_torch(dtype, residual):
    torch.manual_seed(12)
    ref = RefRMSNorm(384, eps=1e-6)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
    x = randn(4, 33, 384, dtype=dtype)
    inputs = [x, randn(4, 33, 384, dtype=dtype)] if residual else [x]
    compare(enn.RMSNorm(384, eps=1e-6, residual=residual), ref, inputs, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("affine", [True, False])
def test_layernorm_matches_nn_layernorm(dtype, residual, affine):
    torch.manual_seed(13)
    ref = RefLayerNorm(320, elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            ref.weight.uniform_(0.5, 1.5)
            ref.bias.uniform_(-0.5, 0.5)
    x = randn(70, 320, dtype=dtype, scale=3.0) + 1.0
    inputs = [x, randn(70, 320, dtype=dtype)] if residual else [x]
    compare(enn.LayerNorm(320, elementwise_affine=affine, residual=residual), ref, inputs, dtype)


def test_a_residual_norm_without_a_residual_returns_x_as_the_stream():
    norm = enn.RMSNorm(64, residual=True).cuda()
    x = randn(8, 64)
    y, h = norm(x)
    assert h is x and rel_err(y, F.rms_norm(x, (64,), norm.weight, 1e-6)) <= 1e-5


# ---- attention probabilities
@pytest.mark.parametrize("dtype", DTYPES)
def test_scaled_masked_softmax_matches_torch(dtype):
    torch.manual_seed(14)
    s = 96
    x = randn(2, 4, s, s, dtype=dtype, scale=4.0)
    mask = torch.zeros(s, s, device="cuda").masked_fill(torch.ones(s, s, device="cuda").triu(1).bool(),
                                                        float("-inf")).to(dtype).expand(2, 4, s, s).contiguous()
    compare(enn.ScaledMaskedSoftmaxDropout(0.125, p=0.1), RefSoftmax(0.125), [x, mask], dtype, no_grad=(1,))


def test_softmax_dropout_rate_and_mask_in_the_backward():
    torch.manual_seed(15)
    p, scale, s = 0.15, 0.2, 128
    x = leaf(randn(8, s, s, scale=3.0))
    causal = torch.ones(s, s, device="cuda", dtype=torch.bool).tril()
    mod = enn.ScaledMaskedSoftmaxDropout(scale, p).train()
    y = mod(x, causal)  # a bool mask: True takes part
    dy = randn(*y.shape)
    y.backward(dy)
    visible = causal.expand_as(y)
    kept = (y.detach() != 0) & visible
    assert (y.detach()[~visible] == 0).all()
    assert abs(1 - kept.float().sum().item() / visible.float().sum().item() - p) < 0.01
    xr = leaf(x.detach())
    want = torch.softmax(xr * scale + torch.zeros(s, s, device="cuda").masked_fill(~causal, float("-inf")), -1)
    want = want * kept / (1 - p)
    assert rel_err(y, want) <= 1e-5
    want.backward(dy)
    assert rel_err(x.grad, xr.grad) <= 1e-4


# ---- swap
class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, h):
        dt = h.dtype
        h = h.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dt)


class LlamaBlock(nn.Module):
    def __init__(self, hidden=128, heads=4, ffn=344):
        super().__init__()
        self.heads = heads
        self.input_layernorm = LlamaRMSNorm(hidden)
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(hidden, hidden, bias=False) for _ in range(4))
        self.post_attention_layernorm = LlamaRMSNorm(hidden)
        self.mlp = LlamaMLP(hidden, ffn)

    def forward(self, x):
        b, s, d = x.shape
        h = self.input_layernorm(x)
        q, k, v = (p(h).view(b, s, self.heads, -1).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
        x = x + self.o_proj(a)
        return x + self.mlp(self.post_attention_layernorm(x))


class GPTBlock(nn.Module):
    def __init__(self, hidden=128, heads=4):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(hidden)
        self.c_attn, self.c_proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * hidden, hidden), nn.Dropout(0.1))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in self.c_attn(self.ln_1(x)).split(d, -1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
        x = x + self.c_proj(a)
        return x + self.mlp(self.ln_2(x))


def swapped_equals_original(block):
    torch.manual_seed(16)
    model = block.cuda()
    with torch.no_grad():  # norms away from their ones/zeros init
        for n, p in model.named_parameters():
            if "norm" in n or "ln_" in n:
                p.uniform_(0.5, 1.5)
    ref = copy.deepcopy(model).eval()
    before = dict(model.named_parameters())
    keys = list(model.state_dict())
    assert enn.swap(model) is model
    assert all(p is before[n] for n, p in model.named_parameters())  # the same tensors
    assert list(model.state_dict()) == keys
    model.eval()
    x = randn(2, 40, 128)
    xs, xr = leaf(x), leaf(x)
    y, want = model(xs), ref(xr)
    assert rel_err(y, want) <= 1e-4
    dy = randn(*y.shape)
    y.backward(dy)
    want.backward(dy)
    assert rel_err(xs.grad, xr.grad) <= 1e-4
    for (n, p), (_, r) in zip(model.named_parameters(), ref.named_parameters()):
        assert rel_err(p.grad, r.grad) <= 1e-4, n
    return model


def test_swap_on_a_llama_block():
    model = swapped_equals_original(LlamaBlock())
    assert isinstance(model.input_layernorm, enn.RMSNorm) and isinstance(model.post_attention_layernorm, enn.RMSNorm)
    assert all(isinstance(getattr(model, p), enn.Linear) for p in ("q_proj", "k_proj", "v_proj", "o_proj"))
    assert isinstance(model.mlp.gate_proj, enn.Linear)


def test_swap_on_a_gpt_block_fuses_the_mlp_activation_and_dropout():
    model = swapped_equals_original(GPTBlock())
    assert isinstance(model.ln_1, enn.LayerNorm) and isinstance(model.c_attn, enn.Linear)
    assert model.mlp[0].activation == "gelu_tanh" and isinstance(model.mlp[1], nn.Identity)
    assert model.mlp[2].p == 0.1 and isinstance(model.mlp[3], nn.Identity)
