"""Strided GEMM operands in the torch binding without a GPU (skipped without torch;
docs/strided-batched.md step 1): a view whose innermost stride is 1 (x[:, :k], the
transpose of a weight slice) is accepted with its row stride as the operand's ld, a
dense one is ld 0, and a view with another innermost stride is refused naming the
tensor. The checks run on CPU tensors: they read strides, never data."""
import pytest

torch = pytest.importorskip("torch")
import epifuse  # noqa: E402
from epifuse import torch_bind  # noqa: E402

GEMM = """{"epifuse": 1, "name": "lin", "mainloop": {"kind": "gemm", "a": "f16", "b": "f16", "b_layout": "col"},
  "inputs": {"bias": {"dtype": "f16", "broadcast": "row"}},
  "ops": [{"name": "y", "op": "add", "args": ["acc", "bias"]}], "outputs": {"y": {"dtype": "f16"}}}"""
DUAL = """{"epifuse": 1, "name": "glu", "mainloop": {"kind": "dual_gemm", "a": "f16", "b": "f16"},
  "ops": [{"name": "y", "op": "mul", "args": ["acc0", "acc1"]}], "outputs": {"y": {"dtype": "f16"}}}"""
CPU = torch.device("cpu")


def compiled(text):
    return epifuse.Chain.from_json(text).compile()


def test_a_row_slice_and_a_weight_slice_pass_their_row_strides():
    c = compiled(GEMM)
    x = torch.zeros(16, 96, dtype=torch.float16)[:, :64]      # A [16, 64], rows 96 apart
    w = torch.zeros(40, 80, dtype=torch.float16)[:32, :64]    # nn.Linear weight [N, K] slice
    bias = torch.zeros(32, dtype=torch.float16)
    assert torch_bind._check(c, [x, w.t(), bias], CPU) == [96, 80, 0]


def test_dense_operands_are_ld_0_and_a_chunk_of_rows_is_dense():
    c = compiled(GEMM)
    x = torch.zeros(16, 64, dtype=torch.float16)
    w = torch.zeros(64, 64, dtype=torch.float16).chunk(2)[0]  # rows 0..31: contiguous
    bias = torch.zeros(32, dtype=torch.float16)
    assert torch_bind._check(c, [x, w.t(), bias], CPU) == [0, 0, 0]


def test_a_dual_gemms_b0_and_b1_from_one_packed_buffer():
    c = compiled(DUAL)
    a = torch.zeros(8, 64, dtype=torch.float16)
    packed = torch.zeros(64, 2 * 48, dtype=torch.float16)     # [K, 2N]: B0 and B1 side by side
    b0, b1 = packed[:, :48], packed[:, 48:]
    assert torch_bind._check(c, [a, b0, b1], CPU) == [0, 96, 96]


def test_a_non_unit_innermost_stride_is_refused_naming_the_tensor():
    c = compiled(GEMM)
    bias = torch.zeros(32, dtype=torch.float16)
    w = torch.zeros(32, 64, dtype=torch.float16)
    x = torch.zeros(16, 128, dtype=torch.float16)[:, ::2]     # innermost stride 2
    with pytest.raises(epifuse.UserError, match=r"input 'a' has shape \(16, 64\) and strides \(128, 2\)"):
        torch_bind._check(c, [x, w.t(), bias], CPU)
    with pytest.raises(epifuse.UserError, match=r"reads 'b' column-major.*strides \(32, 1\)"):
        torch_bind._check(c, [torch.zeros(16, 64, dtype=torch.float16), w.t().contiguous(), bias], CPU)
    with pytest.raises(epifuse.UserError, match=r"input 'bias' is not contiguous"):
        torch_bind._check(c, [torch.zeros(16, 64, dtype=torch.float16), w.t(), torch.zeros(64, dtype=torch.float16)[::2]], CPU)


def test_the_launch_record_carries_the_appended_ld_fields():
    from epifuse import _lib
    names = [f[0] for f in _lib.LaunchRecord._fields_]
    # ld and nld after rng_state, then the batched GEMM's fields (c_api.h's order)
    assert names[-6:] == ["rng_state", "ld", "nld", "batch", "batch_stride", "nbatch_stride"]
    r = _lib.LaunchRecord()
    assert not r.ld and r.nld == 0  # zeroed: dense, as before the fields were appended
    assert r.batch == 0 and not r.batch_stride and r.nbatch_stride == 0  # zeroed: unbatched
