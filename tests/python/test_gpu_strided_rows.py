"""GPU tier of strided [M, N] tensors of elementwise and row chains in the torch binding
(skipped without torch and a CUDA GPU; docs/strided-batched.md, "Built: strided tensors
in the elementwise and row families"): full inputs given as column blocks of a wider
buffer and outputs written with out= into column blocks of one buffer run in place;
the columns between and after the output blocks keep what they held. An elementwise
chain gives the contiguous tensors' bits at any ld. A row chain gives them where the
lds keep the dense shape's tile (rows on 16 bytes); an ld that narrows its vector
changes the order of a row's sums, so there the values are compared within tolerance."""
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
import epifuse  # noqa: E402

TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
SENTINEL = -7.25  # exact in every dtype: what the columns the kernel must not write hold


def elementwise(dtype, dropout):
    """y = (x + bias) * scale (dropped where `dropout`) + res, and the sum zs."""
    drop = ', {"name": "d", "op": "dropout", "args": ["m"], "p": 0.25}' if dropout else ""
    text = f"""{{"epifuse": 1, "name": "ew_strided", "inputs": {{"x": {{"dtype": "{dtype}"}},
      "bias": {{"dtype": "{dtype}", "broadcast": "row"}}, "res": {{"dtype": "{dtype}"}}}},
      "ops": [{{"name": "z", "op": "add", "args": ["x", "bias"]}}, {{"name": "m", "op": "scale", "args": ["z"], "alpha": 0.5}}
              {drop}, {{"name": "y", "op": "add", "args": ["{'d' if dropout else 'm'}", "res"]}}],
      "outputs": {{"y": {{"dtype": "{dtype}"}}, "zs": {{"dtype": "{dtype}", "value": "z"}}}}}}"""
    return epifuse.Chain.from_json(text).compile(tune=False)


def rows(dtype):
    """h = x + res, y = softmax(h): a row chain with two full outputs."""
    text = f"""{{"epifuse": 1, "name": "add_softmax", "inputs": {{"x": {{"dtype": "{dtype}"}}, "res": {{"dtype": "{dtype}"}}}},
      "ops": [{{"name": "h", "op": "add", "args": ["x", "res"]}}, {{"name": "y", "op": "softmax", "args": ["h"]}}],
      "outputs": {{"y": {{"dtype": "{dtype}"}}, "zs": {{"dtype": "{dtype}", "value": "h"}}}}}}"""
    return epifuse.Chain.from_json(text).compile(tune=False)


def bits(t):
    return t.view(torch.int32) if t.dtype == torch.float32 else t.view(torch.int16)


def same(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert torch.equal(bits(a), bits(b))


def column_block(m, n, ld, dt):
    """Random values in the last N columns of an [M, ld] buffer: rows ld apart."""
    return torch.randn(m, ld, device="cuda").to(dt)[:, ld - n:]


def run_in_place(fn, args, m, n, pad, dt, **kw):
    """fn's outputs written into column blocks of one buffer with `pad` columns
    between and after them; returns them and the gap columns."""
    buf = torch.full((m, 2 * (n + pad)), SENTINEL, device="cuda").to(dt)
    y, zs = buf[:, :n], buf[:, n + pad:2 * n + pad]
    assert fn(*args, out=(y, zs), **kw) == (y, zs)
    torch.cuda.synchronize()
    gaps = torch.cat([buf[:, n:n + pad], buf[:, 2 * n + pad:]], dim=1)
    return y, zs, gaps


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("dropout", [False, True])
@pytest.mark.parametrize("m, n, pad", [(65, 130, 1), (200, 136, 3), (256, 264, 8), (1, 1000, 136), (777, 3, 5)])
def test_elementwise_views_give_the_contiguous_bits(dtype, dropout, m, n, pad):
    torch.manual_seed(m + n + pad)
    dt = TORCH[dtype]
    fn = elementwise(dtype, dropout)
    x, res = column_block(m, n, n + pad, dt), column_block(m, n, n + 2 * pad, dt)
    bias = torch.randn(n, device="cuda").to(dt)
    y, zs, gaps = run_in_place(fn, (x, bias, res), m, n, pad, dt, seed=11, offset=3)
    want_y, want_zs = fn(x.contiguous(), bias, res.contiguous(), seed=11, offset=3)
    same(y, want_y)
    same(zs, want_zs)
    assert torch.equal(gaps, torch.full_like(gaps, SENTINEL))  # the kernel wrote only its outputs' columns
    same(fn(x, bias, res, seed=11, offset=3)[0], want_y)  # strided inputs, contiguous outputs


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("m, n", [(65, 1000), (33, 4096), (300, 8192)])
def test_row_views_on_16_bytes_give_the_contiguous_bits(dtype, m, n):
    torch.manual_seed(m + n)
    dt = TORCH[dtype]
    fn = rows(dtype)
    pad = 64  # 128 or 256 bytes: the dense shape's vectors and ring take these rows
    x, res = column_block(m, n, n + pad, dt), column_block(m, n, n + 2 * pad, dt)
    y, zs, gaps = run_in_place(fn, (x, res), m, n, pad, dt)
    want_y, want_zs = fn(x.contiguous(), res.contiguous())
    same(y, want_y)
    same(zs, want_zs)
    assert torch.equal(gaps, torch.full_like(gaps, SENTINEL))


@pytest.mark.parametrize("m, n, pad", [(65, 1000, 1), (33, 4096, 3), (300, 8192, 2)])
def test_row_views_off_16_bytes_run_narrower_vectors(m, n, pad):
    torch.manual_seed(m + n + pad)
    fn = rows("bf16")
    x, res = column_block(m, n, n + pad, torch.bfloat16), column_block(m, n, n + pad, torch.bfloat16)
    y, zs, gaps = run_in_place(fn, (x, res), m, n, pad, torch.bfloat16)
    want_y, want_zs = fn(x.contiguous(), res.contiguous())
    same(zs, want_zs)  # elementwise: the same bits
    torch.testing.assert_close(y.float(), want_y.float(), rtol=1e-2, atol=1e-3)  # a row's sums in another order
    assert torch.equal(gaps, torch.full_like(gaps, SENTINEL))


def test_views_the_kernel_cannot_take_are_refused_naming_the_tensor():
    fn = elementwise("f16", False)
    bias = torch.randn(32, device="cuda").half()
    res = torch.randn(64, 32, device="cuda").half()
    with pytest.raises(epifuse.UserError, match=r"input 'x' is not contiguous"):
        fn(torch.randn(64, 64, device="cuda").half()[:, ::2], bias, res)
    with pytest.raises(epifuse.UserError, match=r"out= for 'y' is not contiguous"):
        fn(res, bias, res, out=(torch.empty(32, 64, device="cuda").half().t(), torch.empty(64, 32, device="cuda").half()))
    with pytest.raises(epifuse.UserError, match=r"input 'bias' is not contiguous"):
        fn(res, torch.randn(64, device="cuda").half()[::2], res)
