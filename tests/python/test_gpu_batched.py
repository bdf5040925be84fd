"""GPU tier of batched GEMM calls from Python (skipped without torch and a CUDA GPU;
Note [Batched calls from Python] in python/epifuse/batching.py): a GEMM chain called
with 3-D operands against torch.bmm / torch.matmul of the same chain in float, on
random non-zero data, ragged shapes and every dtype: B row- and column-major ([B, K, N]
and the transpose of [B, N, K]), a 2-D B folded into M and shared by a batched launch,
an expanded B, a shared 2-D A, a batch of 1, a residual [B, M, N], a dual GEMM, the
prepared launch reused, the custom op's shapes and gradients, and every refusal."""
import pytest

import epifuse

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
import epifuse.torch  # noqa: E402

TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
PYTOL = {"f32": (1e-4, 1e-4), "f16": (4e-3, 2e-2), "bf16": (2e-2, 2e-2)}

# y = relu(acc + bias) + res: a row input, a full [B, M, N] input, one full output.
BMM = """{"epifuse": 1, "name": "bmm_%(dtype)s_%(layout)s",
  "mainloop": {"kind": "gemm", "a": "%(dtype)s", "b": "%(dtype)s", "b_layout": "%(layout)s"},
  "inputs": {"bias": {"dtype": "%(dtype)s", "broadcast": "row"}, "res": {"dtype": "%(dtype)s"}},
  "ops": [{"name": "s", "op": "add", "args": ["acc", "bias"]}, {"name": "r", "op": "relu", "args": ["s"]},
          {"name": "y", "op": "add", "args": ["r", "res"]}],
  "outputs": {"y": {"dtype": "%(dtype)s"}}}"""
PLAIN = """{"epifuse": 1, "name": "bmm_plain_%(layout)s",
  "mainloop": {"kind": "gemm", "a": "f16", "b": "f16", "b_layout": "%(layout)s"},
  "ops": [{"name": "y", "op": "scale", "args": ["acc"], "alpha": 0.5}], "outputs": {"y": {"dtype": "f16"}}}"""
# A column input [M] and a scalar: shared by every batch.
COLS = """{"epifuse": 1, "name": "bmm_cols", "mainloop": {"kind": "gemm", "a": "f16", "b": "f16"},
  "inputs": {"s": {"dtype": "f32", "broadcast": "col"}, "al": {"dtype": "f32", "broadcast": "scalar"}},
  "ops": [{"name": "y", "op": "mul", "args": ["acc", "s"]}, {"name": "z", "op": "mul", "args": ["y", "al"]}],
  "outputs": {"z": {"dtype": "f16"}}}"""
COL_SUM = """{"epifuse": 1, "name": "bmm_db", "mainloop": {"kind": "gemm", "a": "f16", "b": "f16"},
  "ops": [{"name": "y", "op": "relu", "args": ["acc"]}, {"name": "db", "op": "col_sum", "args": ["y"]}],
  "outputs": {"y": {"dtype": "f16"}, "db": {"dtype": "f32"}}}"""
GLU = """{"epifuse": 1, "name": "bmm_glu", "mainloop": {"kind": "dual_gemm", "a": "bf16", "b": "bf16"},
  "ops": [{"name": "s", "op": "silu", "args": ["acc0"]}, {"name": "y", "op": "mul", "args": ["s", "acc1"]}],
  "outputs": {"y": {"dtype": "bf16"}}}"""


def rand(*shape, dtype=torch.float16):
    """Random non-zero values in [-2, -0.25] and [0.25, 2] on the GPU."""
    x = torch.empty(*shape, device="cuda").uniform_(0.25, 2.0)
    sign = torch.randint(0, 2, shape, device="cuda") * 2 - 1
    return (x * sign).to(dtype)


def close(got, want, dtype, k):
    rtol, atol = (t * max(1.0, k ** 0.5 / 4) for t in PYTOL[dtype])
    torch.testing.assert_close(got.float(), want, rtol=rtol, atol=atol)


def b_operand(b_kn, layout):
    """A [B, K, N] (or [K, N]) B in the chain's layout: row-major as it is, column-major
    as the transpose of a contiguous [B, N, K]."""
    if layout == "row":
        return b_kn.contiguous()
    return b_kn.transpose(-1, -2).contiguous().transpose(-1, -2)


def reference(a, b, bias, res):
    return torch.relu(torch.matmul(a.float(), b.float()) + bias.float()) + res.float()


def chain(text, **kw):
    return epifuse.Chain.from_json(text % kw if kw else text).compile(tune=False)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("bmnk", [(4, 128, 256, 64), (3, 65, 130, 33), (7, 1, 72, 24), (1, 77, 96, 40),
                                  (2, 256, 128, 520)])
def test_a_3d_a_and_b_run_one_batched_launch(dtype, layout, bmnk):
    bsz, m, n, k = bmnk
    torch.manual_seed(sum(bmnk))
    dt = TORCH[dtype]
    fn = chain(BMM, dtype=dtype, layout=layout)
    a, b = rand(bsz, m, k, dtype=dt), b_operand(rand(bsz, k, n, dtype=dt), layout)
    bias, res = rand(n, dtype=dt), rand(bsz, m, n, dtype=dt)
    got = fn(a, b, bias, res)
    assert got.shape == (bsz, m, n) and got.dtype == dt
    close(got, reference(a, b, bias, res), dtype, k)
    # The prepared launch again (the hot path), into out=.
    out = torch.empty_like(got)
    assert fn(a, b, bias, res, out=out) is out
    assert len(fn._launches) == 1
    torch.cuda.synchronize()
    assert torch.equal(out, got)


@pytest.mark.parametrize("layout", ["row", "col"])
def test_b_n_k_storage_is_the_transpose_of_a_contiguous_tensor(layout):
    torch.manual_seed(3)
    fn = chain(PLAIN, layout=layout)
    a, w = rand(5, 96, 64), rand(5, 80, 64)  # w [B, N, K], as attention's keys
    b = w.transpose(-1, -2) if layout == "col" else w.transpose(-1, -2).contiguous()
    got = fn(a, b)
    close(got, 0.5 * torch.bmm(a.float(), w.float().transpose(-1, -2)), "f16", 64)


def test_a_shared_2d_b_folds_into_m_and_a_non_foldable_a_runs_batched():
    torch.manual_seed(4)
    fn = chain(BMM, dtype="f16", layout="col")
    w = rand(130, 72)  # nn.Linear's [N, K]
    b = w.t()
    bias = rand(130)
    a = rand(6, 50, 72)
    res = rand(6, 50, 130)
    close(fn(a, b, bias, res), reference(a, b, bias, res), "f16", 72)
    # x[..., :k]: rows evenly spaced (folded, ld 80); x[:, :m]: batches 64 rows apart (batched, B shared)
    for view in (rand(6, 50, 80)[..., :72], rand(6, 64, 72)[:, :50]):
        assert not view.is_contiguous()
        close(fn(view, b, bias, res), reference(view, b, bias, res), "f16", 72)


def test_an_expanded_b_and_a_shared_2d_a():
    torch.manual_seed(5)
    fn = chain(BMM, dtype="bf16", layout="row")
    b2 = rand(48, 96, dtype=torch.bfloat16)
    b = b2.expand(4, 48, 96)
    assert b.stride(0) == 0
    a, bias, res = rand(4, 33, 48, dtype=torch.bfloat16), rand(96, dtype=torch.bfloat16), rand(4, 33, 96,
                                                                                                  dtype=torch.bfloat16)
    close(fn(a, b, bias, res), reference(a, b2, bias, res), "bf16", 48)
    a2 = rand(33, 48, dtype=torch.bfloat16)
    b3 = rand(4, 48, 96, dtype=torch.bfloat16)
    got = fn(a2, b3, bias, res)
    assert got.shape == (4, 33, 96)
    close(got, reference(a2, b3, bias, res), "bf16", 48)


def test_spaced_batches_run_in_place():
    torch.manual_seed(6)
    fn = chain(PLAIN, layout="row")
    abuf, bbuf = rand(5, 40, 64), rand(5, 64 + 3, 88)
    a, b = abuf[:, :33], bbuf[:, :64, :80]  # batches apart by more than their size; B rows 88 apart
    close(fn(a, b), 0.5 * torch.bmm(a.float(), b.float()), "f16", 64)


def test_column_and_scalar_inputs_are_shared_by_every_batch():
    torch.manual_seed(7)
    fn = chain(COLS)
    a, b = rand(3, 40, 32), rand(3, 32, 64)
    s, al = rand(40, dtype=torch.float32), torch.tensor(1.5, device="cuda")
    close(fn(a, b, s, al), torch.bmm(a.float(), b.float()) * s[:, None] * 1.5, "f16", 32)
    b2 = rand(32, 64)  # 2-D B with a column input: batched, B shared
    close(fn(a, b2, s, al), torch.matmul(a.float(), b2.float()) * s[:, None] * 1.5, "f16", 32)


def test_a_dual_gemm_with_b0_batched_and_b1_shared():
    torch.manual_seed(8)
    fn = chain(GLU)
    a, b0, b1 = rand(4, 70, 64, dtype=torch.bfloat16), rand(4, 64, 96, dtype=torch.bfloat16), rand(
        64, 96, dtype=torch.bfloat16)
    want = torch.nn.functional.silu(torch.matmul(a.float(), b0.float())) * torch.matmul(a.float(), b1.float())
    close(fn(a, b0, b1), want, "bf16", 64)


def test_the_custom_op_gives_batched_shapes_and_gradients():
    torch.manual_seed(9)
    op = epifuse.torch.op(epifuse.Chain.from_json(BMM % {"dtype": "f32", "layout": "row"}), tune=False)
    for b_shape in ((3, 24, 40), (24, 40)):
        a = rand(3, 16, 24, dtype=torch.float32).requires_grad_()
        b = rand(*b_shape, dtype=torch.float32).requires_grad_()
        bias = rand(40, dtype=torch.float32).requires_grad_()
        res = rand(3, 16, 40, dtype=torch.float32).requires_grad_()
        y = op(a, b, bias, res)
        assert y.shape == (3, 16, 40)
        dy = rand(3, 16, 40, dtype=torch.float32)
        (y * dy).sum().backward()
        ref = [t.detach().clone().requires_grad_() for t in (a, b, bias, res)]
        (reference(*ref) * dy).sum().backward()
        close(y, reference(*ref).detach(), "f32", 24)
        for got, want in zip((a, b, bias, res), ref):
            assert got.grad.shape == want.grad.shape
            torch.testing.assert_close(got.grad, want.grad, rtol=1e-3, atol=1e-3)


# ---- refusals: UserError, never a crash or a wrong answer

def refuses(match, fn, *args):
    with pytest.raises(epifuse.UserError, match=match):
        fn(*args)


def test_mismatched_batch_sizes():
    fn = chain(PLAIN, layout="row")
    refuses(r"batch sizes differ \('a' 4, 'b' 3\)", fn, rand(4, 16, 32), rand(3, 32, 16))


def test_a_batch_above_65535():
    fn = chain(PLAIN, layout="row")
    refuses("a batch of 65536 problems; a batched launch takes at most 65535", fn, rand(65536, 1, 8),
            rand(65536, 8, 8))


def test_a_chain_with_a_column_sum_output():
    fn = chain(COL_SUM)
    refuses(r"output 'db' is a column sum \[N\]", fn, rand(4, 16, 32), rand(4, 32, 16))
    refuses(r"output 'db' is a column sum \[N\]", fn, rand(4, 16, 32), rand(32, 16))


def test_bad_strides():
    fn = chain(PLAIN, layout="row")
    a, b = rand(4, 16, 64), rand(4, 32, 16)
    refuses(r"reads 'a' row-major: each batch's matrix needs innermost stride 1", fn, a[..., ::2], b)
    refuses(r"reads 'b' row-major", fn, a[..., :32], rand(4, 16, 32).transpose(-1, -2))
    refuses(r"reads 'b' column-major: each batch's matrix needs the transpose", chain(PLAIN, layout="col"),
            a[..., :32], b)
    bias_chain = chain(BMM, dtype="f16", layout="row")
    res = rand(4, 16, 32).transpose(-1, -2).contiguous().transpose(-1, -2)
    refuses(r"input 'res' has shape \[4, 16, 16\] and strides .*contiguous", bias_chain, a[..., :32], b,
            rand(16), res[:, :, :16])
    refuses(r"input 'res' has shape \[16, 16\].*\[B, M, N\] = \[4, 16, 16\]", bias_chain, a[..., :32], b,
            rand(16), rand(16, 16))
    refuses(r"operand 'b' is \[33, 16\] per batch, expected \[K, N\] = \[32, 16\]", fn, a[..., :32],
            rand(4, 33, 16))


def test_dtype_and_device_mismatches():
    fn = chain(PLAIN, layout="row")
    a, b = rand(4, 16, 32), rand(4, 32, 16)
    refuses("input 'b' is torch.float32, the chain reads f16", fn, a, b.float())
    refuses("input 'b' is on cpu, the others on cuda", fn, a, b.cpu())
    if torch.cuda.device_count() > 1:
        refuses("input 'b' is on cuda:1, the others on cuda:0", fn, a, b.to("cuda:1"))


def test_dual_gemm_operand_counts_and_batches():
    fn = chain(GLU)
    a, b = rand(4, 16, 32, dtype=torch.bfloat16), rand(4, 32, 16, dtype=torch.bfloat16)
    refuses("missing input", fn, a, b)
    refuses(r"batch sizes differ \('a' 4, 'b0' 4, 'b1' 2\)", fn, a, b, b[:2])
    refuses(r"operand 'b1' is \[32, 8\] per batch", fn, a, b, b[..., :8])
