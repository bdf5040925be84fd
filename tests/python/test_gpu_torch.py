"""GPU tier of the Python module (skipped without torch and a CUDA GPU): every
example chain on torch tensors against the CPU reference and, where the chain is
plain PyTorch, against PyTorch; a torch.compile'd module without a graph break; a
captured CUDA graph."""
import numpy as np
import pytest

import epifuse
from conftest import ROOT

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
import epifuse.torch  # noqa: E402
from epifuse import torch_bind  # noqa: E402

CHAINS = sorted((ROOT / "examples" / "chains").glob("*.json"))
TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
TOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.6e-2}


def random_inputs(fn, shape, seed):
    """Host arrays in the CPU path's form and the same values as CUDA tensors."""
    g = np.random.default_rng(seed)
    b = fn.chain.bindings(*shape)
    host, dev = [], []
    for t in b["inputs"]:
        v = torch.from_numpy(g.uniform(-2, 2, t["shape"]).astype(np.float32)).to(TORCH[t["dtype"]])
        host.append(v.view(torch.int16).numpy().view(np.uint16) if t["dtype"] == "bf16" else v.numpy())
        dev.append(v.cuda())
    return host, dev


def as_float(x, dtype):
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) if dtype == "bf16" else torch.from_numpy(x)
    return x.float().cpu()


@pytest.mark.parametrize("path", CHAINS, ids=lambda p: p.stem)
def test_every_example_on_torch_tensors_matches_the_cpu_reference(path):
    chain = epifuse.load(path)
    shape = chain.doc.get("shape", [64, 256, 128])
    shape = (shape + [0])[:3]
    fn = chain.compile()
    host, dev = random_inputs(fn, shape, 5)
    if fn._gemm:  # a column-major operand is passed as the transpose of a contiguous tensor
        for i, name in enumerate(fn.input_names):
            if torch_bind._layouts(fn).get(name) == "col":
                dev[i] = dev[i].t().contiguous().t()
    want = fn(*host, seed=3, offset=1)
    got = fn(*dev, seed=3, offset=1)
    torch.cuda.synchronize()
    want, got = (want if isinstance(want, tuple) else (want,)), (got if isinstance(got, tuple) else (got,))
    k = shape[2] if fn._gemm else 1
    for (name, dtype), w, g in zip(fn._outputs, want, got):
        w, g = as_float(w, dtype), as_float(g, dtype)
        # Dropped positions agree (masks are checked exactly in the C++ GPU suite; here a
        # ReLU input within rounding of 0 may flip one more element to 0).
        if any(op.get("op") == "dropout" for op in chain.doc["ops"]):
            assert (w.eq(0) != g.eq(0)).float().mean() < 1e-3, name
        torch.testing.assert_close(g, w, rtol=TOL[dtype] * max(1, k ** 0.5 / 8), atol=TOL[dtype] * max(1, k ** 0.5))


F = torch.nn.functional


def _gelu(x):
    return F.gelu(x, approximate="tanh")


# Each example in plain PyTorch (fp32 math on the same tensors): the function of the
# inputs before dropout, and the dropout probability (0: none). Inputs in binding order.
PYTORCH = {
    "add_mul": (lambda x, y: (x + y) * 0.5, 0),
    "add_rmsnorm": (lambda x, r, w: (F.rms_norm(x + r, (x.shape[-1],), w, 1e-6), x + r), 0),
    "bias_gelu_dropout_add": (lambda x, b, r: (_gelu(x + b), r), 0.1),
    "bias_gelu_dropout_add_chain": (lambda x, b, r: (_gelu(x + b), r), 0.1),
    "gating": (lambda a, b0, b1, c0, c1: torch.sigmoid(a @ b0 + c0) * (a @ b1 + c1), 0),
    "geglu": (lambda a, b0, b1: _gelu(a @ b0) * (a @ b1), 0),
    "gemm": (lambda a, b: a @ b, 0),
    "gemm_bias_relu": (lambda a, b, c: torch.relu(a @ b + c), 0),
    "gemm_bias_relu_dropout": (lambda a, b, c: torch.relu(a @ b + c), 0.1),
    "gemm_tf32_bias_gelu": (lambda a, b, c: (_gelu(a @ b + c), a @ b + c), 0),
    "layernorm": (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5), 0),
    "scaled_masked_softmax_dropout": (lambda x, m: torch.softmax(x * 0.08838834764831845 + m, -1), 0.1),
    "softmax": (lambda x: torch.softmax(x, -1), 0),
    "swiglu": (lambda a, b0, b1: F.silu(a @ b0) * (a @ b1), 0),
}
PYTOL = {"f32": (1e-4, 1e-4), "f16": (4e-3, 2e-2), "bf16": (2e-2, 2e-2)}


# A backward spec's PyTorch counterpart is autograd itself: test_gpu_autograd.py.
@pytest.mark.parametrize("path", [p for p in CHAINS if not p.stem.endswith("_backward")], ids=lambda p: p.stem)
def test_every_example_on_torch_tensors_matches_pytorch(path):
    """Dropout chains: kept elements equal PyTorch's value / (1 - p) and about p of them drop."""
    fn = epifuse.load(path).compile()
    formula, p = PYTORCH[path.stem]
    shape = (fn.chain.doc.get("shape", [64, 256, 128]) + [0])[:3]
    _, dev = random_inputs(fn, shape, 8)
    for i, name in enumerate(fn.input_names):
        if torch_bind._layouts(fn).get(name) == "col":
            dev[i] = dev[i].t().contiguous().t()
    tf32 = fn.chain.doc.get("mainloop", {}).get("math") == "tf32" if isinstance(fn.chain.doc.get("mainloop"), dict) else False
    torch.backends.cuda.matmul.allow_tf32 = tf32
    want = formula(*[t.float() for t in dev])
    torch.backends.cuda.matmul.allow_tf32 = False
    got = fn(*dev, seed=21)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    k = shape[2] if fn._gemm else 1
    scale = max(1.0, k ** 0.5 / 4)
    for (name, dtype), g, w in zip(fn._outputs, got, want):
        g = g.float()
        # tf32: epifuse rounds operands to nearest (cvt.rna), cuBLAS may not.
        rtol, atol = (t * scale for t in ((5e-3, 5e-3) if tf32 else PYTOL[dtype]))
        if p and name == fn._outputs[0][0]:
            residual = want[1] if len(want) > 1 else torch.zeros_like(w)  # bias_gelu_dropout_add adds one
            # Where dropping shows: not ReLU's zeros, nor (beside a residual) values too
            # small to move a 16-bit y off the residual.
            live = w.abs() > (0.02 * (1 + residual.abs()) if len(want) > 1 else w.abs().max() * 1e-6)
            dropped = live & (g == residual.to(g.dtype if dtype == "f32" else dev[0].dtype).float())
            assert abs(dropped.sum().item() / live.sum().item() - p) < 0.02
            kept = live & ~dropped
            torch.testing.assert_close(g[kept], (w / (1 - p) + residual)[kept], rtol=rtol, atol=atol)
        else:
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol)


def test_a_torch_compiled_module_has_no_graph_break_and_a_cuda_graph_replays_it():
    op = epifuse.torch.op(epifuse.load(ROOT / "examples/chains/bias_gelu_dropout_add.json"))

    def block(x, bias, residual):
        return op(torch.sin(x), bias, residual, seed=7) * 2

    x, bias, residual = (torch.randn(s, device="cuda") for s in ((256, 1024), (1024,), (256, 1024)))
    eager = block(x, bias, residual)
    explained = torch._dynamo.explain(block)(x, bias, residual)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    torch.testing.assert_close(torch.compile(block)(x, bias, residual), eager)
    g = torch.cuda.CUDAGraph()
    static = [t.clone() for t in (x, bias, residual)]
    block(*static)  # warm: compile and load outside the capture
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        captured = block(*static)
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, eager)


def test_bad_tensors_are_user_errors():
    fn = epifuse.load(ROOT / "examples/chains/add_mul.json").compile()
    x = torch.randn(64, 128, device="cuda")
    with pytest.raises(epifuse.UserError, match="not contiguous"):
        fn(x.t(), x.t())
    with pytest.raises(epifuse.UserError, match="float16, the chain reads f32"):
        fn(x, x.half())


def test_linear_takes_nn_linear_weights_and_leading_dimensions():
    chain = epifuse.load(ROOT / "examples/chains/geglu.json")  # dual GEMM, B column-major
    f = epifuse.torch.linear(chain)
    x = torch.randn(2, 24, 256, device="cuda", dtype=torch.bfloat16)
    gate, up = (torch.nn.Linear(256, 512, bias=False, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    want = (F.gelu(x.float() @ gate.weight.float().t(), approximate="tanh") * (x.float() @ up.weight.float().t()))
    got = f(x, gate.weight, up.weight)
    assert got.shape == (2, 24, 512)
    torch.testing.assert_close(got.float(), want, rtol=4e-2, atol=8e-2)
    with pytest.raises(epifuse.UserError, match="b_layout"):
        epifuse.torch.linear(epifuse.load(ROOT / "examples/chains/gemm_bias_relu.json"))


def test_out_writes_the_given_tensors():
    fn = epifuse.load(ROOT / "examples/chains/add_mul.json").compile()
    x, y = torch.randn(64, 128, device="cuda"), torch.randn(64, 128, device="cuda")
    z = torch.empty_like(x)
    assert fn(x, y, out=z) is z
    torch.testing.assert_close(z, (x + y) * 0.5)
    with pytest.raises(epifuse.UserError, match="out= for 'out'"):
        fn(x, y, out=z.half())
