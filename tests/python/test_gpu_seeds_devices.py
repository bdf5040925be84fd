"""GPU tier: dropout seeds from torch's generator (eager, torch.compile, CUDA graph
replay), tensors on any CUDA device, and torch.library.opcheck of the ops (skipped
without torch >= 2.4 and a CUDA GPU; the second-device cases without two GPUs)."""
import pytest

import epifuse
from conftest import ROOT

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
if not hasattr(torch.library, "register_autograd"):
    pytest.skip(f"torch {torch.__version__} has no torch.library.register_autograd (2.4+)", allow_module_level=True)
import epifuse.torch  # noqa: E402

CHAINS = ROOT / "examples" / "chains"
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")


def bias_gelu_dropout_add():
    return epifuse.torch.op(epifuse.load(CHAINS / "bias_gelu_dropout_add.json"))


def inputs(device="cuda", m=256, n=1024, seed=3):
    g = torch.Generator(device=device).manual_seed(seed)
    x, res = (torch.randn(m, n, device=device, generator=g) for _ in range(2))
    return x, torch.randn(n, device=device, generator=g), res


def kept(y, res):
    return y != res  # dropout(gelu(x + b)) is 0 exactly where dropped


def test_torch_seeds_reproduce_with_manual_seed_and_differ_call_to_call():
    f = bias_gelu_dropout_add()
    x, b, r = inputs()
    torch.manual_seed(5)
    y1, y2 = f(x, b, r), f(x, b, r)
    torch.manual_seed(5)
    z1 = f(x, b, r)
    assert torch.equal(y1, z1)
    assert not torch.equal(kept(y1, r), kept(y2, r))
    drop = 1 - kept(y1, r).float().mean().item()
    assert 0.08 < drop < 0.12  # p = 0.1
    # The kept values are gelu(x + b) / 0.9 + r.
    want = torch.nn.functional.gelu(x + b, approximate="tanh") / 0.9 + r
    k = kept(y1, r)
    torch.testing.assert_close(y1[k], want[k], rtol=1e-5, atol=1e-5)


def test_an_explicit_seed_still_fixes_the_mask():
    f = bias_gelu_dropout_add()
    x, b, r = inputs()
    torch.manual_seed(1)
    y1 = f(x, b, r, seed=11, offset=2)
    torch.manual_seed(2)
    assert torch.equal(y1, f(x, b, r, seed=11, offset=2))


def test_backward_with_torch_seeds_uses_the_forward_mask():
    f = bias_gelu_dropout_add()
    x, b, r = inputs()
    xs = x.clone().requires_grad_(True)
    y = f(xs, b, r)
    dy = torch.randn_like(y)
    y.backward(dy)
    k = kept(y.detach(), r)
    z = (x + b).requires_grad_(True)
    torch.nn.functional.gelu(z, approximate="tanh").backward(dy * k / 0.9)
    torch.testing.assert_close(xs.grad, z.grad, rtol=1e-5, atol=1e-5)
    # Where gelu(x + b) is below half an ulp of the residual, y == r although
    # kept: the zeros of the gradient are compared where the mask is certain.
    sure = torch.nn.functional.gelu(x + b, approximate="tanh").abs() > 1e-3
    assert torch.equal((xs.grad == 0)[sure], (~k | (z.grad == 0))[sure])


def test_a_captured_training_step_draws_fresh_masks_at_each_replay():
    f = bias_gelu_dropout_add()
    x, b, r = inputs()
    xs = x.clone().requires_grad_(True)
    dy = torch.randn_like(x)
    # Warm up on the stream the graph captures on: the kernels compile, and the
    # column sums' workspace (kept per stream) is allocated, outside the capture.
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            xs.grad = None
            f(xs, b, r).backward(dy)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    xs.grad = None
    with torch.cuda.graph(graph, stream=stream):
        y = f(xs, b, r)
        y.backward(dy)
    masks, grads = [], []
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        masks.append(kept(y, r).clone())
        grads.append(xs.grad.clone())
    assert not torch.equal(masks[0], masks[1])
    for k, gx in zip(masks, grads):
        z = (x + b).requires_grad_(True)
        torch.nn.functional.gelu(z, approximate="tanh").backward(dy * k / 0.9)
        torch.testing.assert_close(gx, z.grad, rtol=1e-5, atol=1e-5)


def test_torch_compile_fullgraph_runs_forward_and_backward_with_dropout(monkeypatch):
    f = bias_gelu_dropout_add()
    x, b, r = inputs()

    @torch.compile(fullgraph=True)
    def step(x, b, r):
        y = f(x, b, r)
        return y, (y * y).sum()

    # The compiled backward regenerates the compiled forward's mask.
    xs = x.clone().requires_grad_(True)
    y, loss = step(xs, b, r)
    loss.backward()
    k = kept(y.detach(), r)
    z = (x + b).requires_grad_(True)
    torch.nn.functional.gelu(z, approximate="tanh").backward(2 * y.detach() * k / 0.9)
    torch.testing.assert_close(xs.grad, z.grad, rtol=1e-4, atol=1e-4)
    # Inductor draws its own random numbers unless told to fall back to eager's:
    # then a compiled step and an eager one under one manual_seed draw one mask.
    torch._dynamo.reset()
    monkeypatch.setattr(torch._inductor.config, "fallback_random", True)
    xs.grad = None
    torch.manual_seed(3)
    step(xs, b, r)[1].backward()
    torch.manual_seed(3)
    xe = x.clone().requires_grad_(True)
    (lambda y: (y * y).sum())(f(xe, b, r)).backward()
    torch.testing.assert_close(xs.grad, xe.grad)


@two_gpus
def test_tensors_on_the_second_gpu_run_there_while_the_first_is_current():
    f = bias_gelu_dropout_add()
    x, b, r = inputs("cuda:0")
    x1, b1, r1 = (t.to("cuda:1") for t in (x, b, r))
    assert torch.cuda.current_device() == 0
    y0 = f(x, b, r, seed=4)
    y1 = f(x1, b1, r1, seed=4)
    assert y1.device == torch.device("cuda:1")
    assert torch.cuda.current_device() == 0
    assert torch.equal(y1.cpu(), y0.cpu())
    # Gradients too, and torch seeds drawn on the second GPU's generator.
    xs = x1.clone().requires_grad_(True)
    f(xs, b1, r1).sum().backward()
    assert xs.grad.device == torch.device("cuda:1")
    with torch.cuda.device(1):  # and with the second GPU current
        torch.testing.assert_close(f(x1, b1, r1, seed=4), y1, rtol=0, atol=0)


@two_gpus
def test_mixed_devices_are_refused():
    f = bias_gelu_dropout_add()
    x, b, r = inputs("cuda:0")
    with pytest.raises(epifuse.UserError, match="cuda:1"):
        f(x, b.to("cuda:1"), r, seed=1)


@pytest.mark.parametrize("name", ["bias_gelu_dropout_add", "softmax", "layernorm", "add_mul"])
def test_opcheck_passes_for_example_chains(name):
    chain = epifuse.load(CHAINS / f"{name}.json")
    f = epifuse.torch.op(chain)
    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    b = chain.bindings(64, 256, 0)
    g = torch.Generator(device="cuda").manual_seed(7)
    args = []
    for t in b["inputs"]:
        args.append(torch.randn(t["shape"], device="cuda", generator=g).to(dtypes[t["dtype"]]).requires_grad_(
            dtypes[t["dtype"]] is torch.float32))
    torch.library.opcheck(f.op, (args, 5, 0, None))


def test_a_chain_that_cannot_differentiate_raises_in_backward_instead_of_dropping_the_gradient():
    c = epifuse.Chain("no_grad_softmax")
    c.output("y", c.softmax(c.input("x", "f32", grad=False)), "f32")
    f = epifuse.torch.op(c)
    x = torch.randn(8, 64, device="cuda", requires_grad=True)
    y = f(x)
    with pytest.raises(epifuse.UserError, match="cannot differentiate"):
        y.sum().backward()
