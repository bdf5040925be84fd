"""GPU tier of strided GEMM operands in the torch binding (skipped without torch and a
CUDA GPU; docs/strided-batched.md step 1): epifuse.torch.linear on a sliced input
(x[:, :k] of a wider buffer, a 3-D one folded into M), a sliced weight (w[:, :k], a
chunk of a packed weight) and a dual GEMM's B0 and B1 from one packed buffer runs in
place and gives the bits of the contiguous copies."""
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
import epifuse  # noqa: E402
import epifuse.torch  # noqa: E402
from epifuse.layers import linear_chain  # noqa: E402

TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def same(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert torch.equal(a.view(torch.int16) if a.dtype != torch.float32 else a.view(torch.int32),
                       b.view(torch.int16) if b.dtype != torch.float32 else b.view(torch.int32))


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("m, n, k, wide", [(65, 130, 33, 40), (256, 512, 1000, 1024), (2048, 1024, 512, 600)])
def test_linear_on_sliced_input_and_weight_gives_the_contiguous_copys_bits(dtype, m, n, k, wide):
    torch.manual_seed(m + n + k)
    dt = TORCH[dtype]
    f = epifuse.torch.linear(linear_chain(dtype, bias=True, activation="gelu_tanh"), tune=False)
    xs = torch.randn(m, wide, device="cuda").to(dt)
    ws = torch.randn(n + 8, wide + 8, device="cuda").to(dt)
    bias = torch.randn(n, device="cuda").to(dt)
    x, w = xs[:, :k], ws[:n, 8:8 + k]
    assert not x.is_contiguous() and not w.is_contiguous()
    got = f(x, w, bias)
    want = f(x.contiguous(), w.contiguous(), bias)
    torch.cuda.synchronize()
    same(got, want)
    ref = torch.nn.functional.gelu(x.float() @ w.float().t() + bias.float(), approximate="tanh")
    torch.testing.assert_close(got.float(), ref, rtol=2e-2, atol=2e-2 if dtype != "f32" else 1e-3)


def test_a_3d_input_slice_and_a_weight_chunk_run_in_place():
    torch.manual_seed(7)
    f = epifuse.torch.linear(linear_chain("f16", bias=False), tune=False)
    xs = torch.randn(4, 33, 160, device="cuda").half()
    w = torch.randn(2 * 96, 128, device="cuda").half().chunk(2)[1]  # rows of a packed weight: dense
    x = xs[..., :128]
    same(f(x, w), f(x.contiguous(), w.contiguous()))


def test_a_dual_gemms_b0_and_b1_from_one_packed_buffer():
    torch.manual_seed(8)
    text = """{"epifuse": 1, "name": "glu", "mainloop": {"kind": "dual_gemm", "a": "bf16", "b": "bf16"},
      "ops": [{"name": "s", "op": "silu", "args": ["acc0"]}, {"name": "y", "op": "mul", "args": ["s", "acc1"]}],
      "outputs": {"y": {"dtype": "bf16"}}}"""
    fn = epifuse.Chain.from_json(text).compile(tune=False)
    a = torch.randn(300, 256, device="cuda").bfloat16()
    packed = torch.randn(256, 2 * 264, device="cuda").bfloat16()
    b0, b1 = packed[:, :264], packed[:, 264:]
    same(fn(a, b0, b1), fn(a, b0.contiguous(), b1.contiguous()))


def test_a_non_unit_innermost_stride_is_refused_naming_the_tensor():
    f = epifuse.torch.linear(linear_chain("f16", bias=False), tune=False)
    x = torch.randn(16, 128, device="cuda").half()[:, ::2]
    with pytest.raises(epifuse.UserError, match="'a'"):
        f(x, torch.randn(32, 64, device="cuda").half())
