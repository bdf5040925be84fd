"""GPU tier of strided epilogue tensors in the torch binding (skipped without torch and a
CUDA GPU; docs/strided-batched.md, "Built: strided epilogue tensors"): a GEMM chain's
full [M, N] input given as a column block of a wider buffer, and its outputs written
with out= into column blocks of one buffer (a fused QKV-style output), run in place and
give the bits of contiguous tensors; the columns between the output blocks keep what
they held. Ragged shapes, the smallest ld (N + 1: no vector store takes its rows), an
ld off 16 bytes, and shapes where the default tile is wgmma on sm_90a."""
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
import epifuse  # noqa: E402

TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
SENTINEL = -7.25  # exact in every dtype: what the columns the kernel must not write hold


def chain(dtype, dropout=False):
    """y = relu(acc + bias + res) (dropped where `dropout`), and the pre-activation zs."""
    drop = ', {"name": "d", "op": "dropout", "args": ["r"], "p": 0.25}' if dropout else ""
    text = f"""{{"epifuse": 1, "name": "residual", "mainloop": {{"kind": "gemm", "a": "{dtype}", "b": "{dtype}",
      "b_layout": "col"}}, "inputs": {{"bias": {{"dtype": "{dtype}", "broadcast": "row"}}, "res": {{"dtype": "{dtype}"}}}},
      "ops": [{{"name": "z", "op": "add", "args": ["acc", "bias"]}}, {{"name": "s", "op": "add", "args": ["z", "res"]}},
              {{"name": "r", "op": "relu", "args": ["s"]}}{drop}],
      "outputs": {{"y": {{"dtype": "{dtype}", "value": "{'d' if dropout else 'r'}"}},
                  "zs": {{"dtype": "{dtype}", "value": "z"}}}}}}"""
    return epifuse.Chain.from_json(text).compile(tune=False)


def bits(t):
    return t.view(torch.int32) if t.dtype == torch.float32 else t.view(torch.int16)


def same(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert torch.equal(bits(a), bits(b))


def inputs(m, n, k, dt, res_ld):
    a = torch.randn(m, k, device="cuda").to(dt)
    b = torch.randn(n, k, device="cuda").to(dt).t()
    bias = torch.randn(n, device="cuda").to(dt)
    wide = torch.randn(m, res_ld, device="cuda").to(dt)
    return a, b, bias, wide[:, res_ld - n:]  # the last N columns: rows res_ld apart


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("dropout", [False, True])
@pytest.mark.parametrize("m, n, k, pad", [(65, 130, 33, 1), (200, 136, 96, 3), (256, 264, 512, 8),
                                          (300, 264, 128, 136), (2048, 1024, 512, 64)])
def test_strided_input_and_outputs_give_the_contiguous_bits(dtype, dropout, m, n, k, pad):
    torch.manual_seed(m + n + k + pad)
    dt = TORCH[dtype]
    fn = chain(dtype, dropout)
    a, b, bias, res = inputs(m, n, k, dt, n + pad)
    assert not res.is_contiguous()
    # y and zs as column blocks of one buffer with a gap between them (pad columns)
    # and after them: rows 2N + 2 pad apart.
    buf = torch.full((m, 2 * (n + pad)), SENTINEL, device="cuda").to(dt)
    y, zs = buf[:, :n], buf[:, n + pad:2 * n + pad]
    assert fn(a, b, bias, res, out=(y, zs), seed=11, offset=3) == (y, zs)
    want_y, want_zs = fn(a, b, bias, res.contiguous(), seed=11, offset=3)
    torch.cuda.synchronize()
    same(y, want_y)
    same(zs, want_zs)
    gaps = torch.cat([buf[:, n:n + pad], buf[:, 2 * n + pad:]], dim=1)
    assert torch.equal(gaps, torch.full_like(gaps, SENTINEL))  # the kernel wrote only its outputs' columns
    # The strided input alone, and the outputs alone, take their own variants.
    same(fn(a, b, bias, res, seed=11, offset=3)[0], want_y)
    y2 = torch.full((m, n + pad), SENTINEL, device="cuda").to(dt)[:, :n]
    fn(a, b, bias, res.contiguous(), out=(y2, torch.empty_like(want_zs)), seed=11, offset=3)
    same(y2, want_y)


def test_a_repeat_call_reuses_the_strided_launch_and_writes_in_place():
    torch.manual_seed(5)
    fn = chain("bf16")
    a, b, bias, res = inputs(128, 96, 64, torch.bfloat16, 104)
    buf = torch.zeros(128, 200, device="cuda", dtype=torch.bfloat16)
    for step in range(3):
        a.normal_()
        fn(a, b, bias, res, out=(buf[:, :96], buf[:, 100:196]))
        want_y, want_zs = fn(a, b, bias, res.contiguous())
        torch.cuda.synchronize()
        same(buf[:, :96], want_y)
        same(buf[:, 100:196], want_zs)
    assert torch.equal(buf[:, 96:100], torch.zeros_like(buf[:, 96:100]))


def test_tuning_times_dense_copies_and_the_strided_call_runs_the_tuned_tile():
    torch.manual_seed(6)
    text = """{"epifuse": 1, "name": "res_tuned", "mainloop": {"kind": "gemm", "a": "f16", "b": "f16", "b_layout": "col"},
      "inputs": {"res": {"dtype": "f16"}}, "ops": [{"name": "y", "op": "add", "args": ["acc", "res"]}],
      "outputs": {"y": {"dtype": "f16"}}}"""
    tuned = epifuse.Chain.from_json(text).compile(tune=True)
    a = torch.randn(256, 128, device="cuda").half()
    b = torch.randn(192, 128, device="cuda").half().t()
    res = torch.randn(256, 256, device="cuda").half()[:, 32:224]
    got = tuned(a, b, res)
    same(got, tuned(a, b, res.contiguous()))


def test_views_the_kernel_cannot_take_are_refused_naming_the_tensor():
    fn = chain("f16")
    a, b, bias, res = inputs(64, 32, 32, torch.float16, 40)
    with pytest.raises(epifuse.UserError, match=r"input 'res' is not contiguous"):
        fn(a, b, bias, torch.randn(64, 64, device="cuda").half()[:, ::2])
    with pytest.raises(epifuse.UserError, match=r"out= for 'y' is not contiguous"):
        fn(a, b, bias, res, out=(torch.empty(32, 64, device="cuda").half().t(), torch.empty(64, 32, device="cuda").half()))
    # A batched call (3-D operands) keeps [B, M, N] outputs contiguous.
    fb = chain("f16")
    a3 = torch.randn(2, 64, 32, device="cuda").half()
    b3 = torch.randn(2, 32, 32, device="cuda").half().transpose(-1, -2)
    res3 = torch.randn(2, 64, 32, device="cuda").half()
    out = torch.empty(2, 64, 64, device="cuda").half()[..., :32]
    with pytest.raises(epifuse.UserError, match=r"out= for 'y' is not contiguous"):
        fb(a3, b3, bias, res3, out=(out, torch.empty(2, 64, 32, device="cuda").half()))
