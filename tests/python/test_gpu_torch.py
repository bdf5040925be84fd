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
        assert (w.eq(0) != g.eq(0)).float().mean() < 1e-3, name
        torch.testing.assert_close(g, w, rtol=TOL[dtype] * max(1, k ** 0.5 / 8), atol=TOL[dtype] * max(1, k ** 0.5))


def test_plain_pytorch_chains_match_pytorch():
    x, y = torch.randn(300, 1000, device="cuda"), torch.randn(300, 1000, device="cuda")
    torch.testing.assert_close(epifuse.load(ROOT / "examples/chains/add_mul.json").compile()(x, y), (x + y) * 0.5)
    a = torch.randn(128, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    bias = torch.randn(512, device="cuda", dtype=torch.float16)
    got = epifuse.load(ROOT / "examples/chains/gemm_bias_relu.json").compile()(a, b, bias)
    torch.testing.assert_close(got, torch.relu(a.float() @ b.float() + bias.float()).half(), rtol=2e-3, atol=2e-2)


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
