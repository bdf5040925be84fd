"""Batched GEMM calls from Python without a GPU (Note [Batched calls from Python] in
python/epifuse/batching.py): which call folds into M and which runs one batched
launch, each operand's ld and batch stride, and every refusal, from shapes and
strides alone. The last tests (skipped without torch) prepare a launch for CPU tensors
with the compile and the C launch stubbed, and read the launch record's batch fields."""
import pytest

import epifuse
from epifuse import batching
from epifuse.batching import GemmCall, plan_gemm_call

ROW = [("a", "row"), ("b", "row")]
COL = [("a", "row"), ("b", "col")]
DUAL = [("a", "row"), ("b0", "row"), ("b1", "row")]
Y = [("y", "full")]


def dense(shape):
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def plan(shapes, strides=None, layouts=ROW, extra=(), outputs=Y):
    """plan_gemm_call for operands (and `extra` inputs [(name, broadcast)]) of these
    shapes, dense unless `strides` says otherwise (None entries dense)."""
    strides = list(strides or [None] * len(shapes))
    strides = [dense(s) if st is None else st for s, st in zip(shapes, strides)]
    inputs = [(n, "full") for n, _ in layouts] + list(extra)
    return plan_gemm_call("c", layouts, inputs, outputs, shapes, strides)


def refuses(match, *args, **kwargs):
    with pytest.raises(epifuse.UserError, match=match):
        plan(*args, **kwargs)


# ---- which call runs how

def test_two_3d_operands_run_one_batched_launch_with_their_batch_strides():
    p = plan([(6, 33, 40), (6, 40, 70)])
    assert p == GemmCall((33, 70, 40), 6, (33 * 40, 40 * 70), (0, 0), ((6, 33, 70),), False)


def test_a_2d_b_beside_a_3d_a_folds_into_m():
    p = plan([(6, 33, 40), (40, 70)])
    assert p == GemmCall((6 * 33, 70, 40), 0, None, (0, 0), ((6, 33, 70),), True)


def test_a_sliced_3d_a_folds_with_its_row_stride():
    # x[..., :40] of a [6, 33, 64] buffer: B*M rows 64 apart
    p = plan([(6, 33, 40), (40, 70)], [(33 * 64, 64, 1), None])
    assert p.folded and p.mnk == (198, 70, 40) and p.lds == (64, 0)


def test_an_a_whose_batches_are_not_evenly_spaced_rows_runs_batched_with_b_shared():
    # a[:, :33] of a [6, 48, 40] buffer: each batch's rows dense, batches 48 rows apart
    p = plan([(6, 33, 40), (40, 70)], [(48 * 40, 40, 1), None])
    assert not p.folded and p.batch == 6 and p.batch_strides == (48 * 40, 0) and p.mnk == (33, 70, 40)


def test_a_column_input_keeps_a_2d_b_call_batched():
    # a column input [M] is shared by every batch: folded, the kernel would read [B*M]
    p = plan([(6, 33, 40), (40, 70), (33,)], extra=[("s", "col")])
    assert not p.folded and p.batch == 6 and p.batch_strides == (33 * 40, 0)


def test_a_column_major_a_runs_batched():
    p = plan([(6, 33, 40), (40, 70)], [(33 * 40, 1, 33), None], layouts=[("a", "col"), ("b", "row")])
    assert not p.folded and p.batch_strides == (33 * 40, 0) and p.lds == (0, 0)


def test_an_expanded_b_is_shared():
    p = plan([(6, 33, 40), (6, 40, 70)], [None, (0, 70, 1)])
    assert p.batch == 6 and p.batch_strides == (33 * 40, 0)


def test_a_2d_a_beside_a_3d_b_is_shared():
    p = plan([(33, 40), (6, 40, 70)])
    assert p.batch == 6 and p.batch_strides == (0, 40 * 70) and p.outputs == ((6, 33, 70),)


def test_b_column_major_is_the_transpose_of_a_b_n_k_tensor():
    # w [6, 70, 40] contiguous, passed as w.transpose(-1, -2): [6, 40, 70], strides (2800, 1, 40)
    p = plan([(6, 33, 40), (6, 40, 70)], [None, (2800, 1, 40)], layouts=COL)
    assert p.batch_strides == (33 * 40, 2800) and p.lds == (0, 0)
    # a slice w[:, :, :40] of a [6, 70, 48] buffer: ld 48, batches 70*48 apart
    p = plan([(6, 33, 40), (6, 40, 70)], [None, (70 * 48, 1, 48)], layouts=COL)
    assert p.batch_strides == (33 * 40, 70 * 48) and p.lds == (0, 48)


def test_spaced_batches_keep_their_stride():
    p = plan([(6, 33, 40), (6, 40, 70)], [(33 * 40 + 8, 40, 1), None])
    assert p.batch_strides == (33 * 40 + 8, 2800)


def test_a_batch_of_1_is_the_unbatched_kernel_on_the_one_problem():
    p = plan([(1, 33, 40), (1, 40, 70)])
    assert p == GemmCall((33, 70, 40), 0, None, (0, 0), ((1, 33, 70),), False)
    p = plan([(1, 33, 40), (1, 40, 70)], [None, (2800, 1, 40)], layouts=COL)
    assert p.batch == 0 and p.lds == (0, 0)


def test_row_col_scalar_and_full_inputs_in_a_batched_call():
    p = plan([(6, 33, 40), (6, 40, 70), (70,), (33,), (), (6, 33, 70)],
             extra=[("bias", "row"), ("s", "col"), ("alpha", "scalar"), ("res", "full")])
    assert p.batch == 6 and p.lds == (0,) * 6


def test_a_dual_gemm_batches_b0_and_b1():
    p = plan([(6, 33, 40), (6, 40, 70), (40, 70)], layouts=DUAL)
    assert p.batch == 6 and p.batch_strides == (33 * 40, 40 * 70, 0)
    p = plan([(6, 33, 40), (40, 70), (40, 70)], layouts=DUAL)
    assert p.folded and p.mnk == (198, 70, 40) and p.lds == (0, 0, 0)


def test_a_batch_above_65535_folds_when_it_can():
    assert plan([(70000, 2, 8), (8, 4)]).folded


def test_is_batched_call():
    assert batching.is_batched_call([3, 2]) and batching.is_batched_call([2, 3, 2])
    assert not batching.is_batched_call([2, 2]) and not batching.is_batched_call([2, 2, 2])


# ---- refusals

def test_mismatched_batch_sizes():
    refuses(r"batch sizes differ \('a' 6, 'b' 5\).*\.expand", [(6, 33, 40), (5, 40, 70)])
    refuses(r"batch sizes differ \('a' 6, 'b0' 6, 'b1' 4\)", [(6, 33, 40), (6, 40, 70), (4, 40, 70)],
            layouts=DUAL)


def test_a_batch_above_65535_in_one_launch():
    refuses(r"a batch of 65536 problems; a batched launch takes at most 65535",
            [(65536, 2, 8), (65536, 8, 4)])


def test_a_batch_of_0():
    refuses("a batch of 0 problems", [(0, 33, 40), (0, 40, 70)])


@pytest.mark.parametrize("cls, what", [("row", r"a column sum \[N\]"), ("col", r"a per-row \[M\] output")])
def test_a_chain_with_a_non_full_output(cls, what):
    refuses(f"output 'db' is {what}; a batched GEMM call .* stores full", [(6, 33, 40), (6, 40, 70)],
            outputs=[("y", "full"), ("db", cls)])
    refuses(f"output 'db' is {what}", [(6, 33, 40), (40, 70)], outputs=[("y", "full"), ("db", cls)])


def test_operands_of_other_inner_dimensions():
    refuses(r"operand 'b' is \[41, 70\] per batch, expected \[K, N\] = \[40, 70\]", [(6, 33, 40), (6, 41, 70)])
    refuses(r"operand 'b1' is \[40, 71\] per batch, expected \[K, N\] = \[40, 70\] .*b0 \[40, 70\]",
            [(6, 33, 40), (6, 40, 70), (6, 40, 71)], layouts=DUAL)


def test_operands_of_other_ranks():
    refuses(r"GEMM operand 'a' has shape \[2, 6, 33, 40\]", [(2, 6, 33, 40), (6, 40, 70)])
    refuses(r"GEMM operand 'b' has shape \[70\]", [(6, 33, 40), (70,)])


def test_an_operand_whose_innermost_stride_is_not_1():
    refuses(r"reads 'a' row-major: each batch's matrix needs innermost stride 1", [(6, 33, 40), (6, 40, 70)],
            [(33 * 80, 80, 2), None])
    # a row-major [B, K, N] passed to a chain that reads B column-major
    refuses(r"reads 'b' column-major: each batch's matrix needs the transpose", [(6, 33, 40), (6, 40, 70)],
            layouts=COL)


def test_overlapping_rows_and_batches():
    refuses(r"operand 'a': rows 20 elements apart overlap its rows of 40", [(6, 33, 40), (6, 40, 70)],
            [(33 * 40, 20, 1), None])
    refuses(r"operand 'b': batches 100 elements apart overlap its 2800 elements", [(6, 33, 40), (6, 40, 70)],
            [None, (100, 70, 1)])


def test_a_full_input_must_be_b_m_n_contiguous():
    shapes = [(6, 33, 40), (6, 40, 70)]
    extra = [("res", "full")]
    refuses(r"input 'res' has shape \[33, 70\].*must be \[B, M, N\] = \[6, 33, 70\], contiguous.*expand",
            shapes + [(33, 70)], extra=extra)
    refuses(r"input 'res' has shape \[6, 33, 70\] and strides \(0, 70, 1\)", shapes + [(6, 33, 70)],
            [None, None, (0, 70, 1)], extra=extra)
    refuses(r"input 'res' has shape \[6, 33, 70\] and strides \(2310, 1, 33\)", shapes + [(6, 33, 70)],
            [None, None, (2310, 1, 33)], extra=extra)
    refuses(r"input 'res' has shape \[6, 33, 70\]", [(6, 33, 40), (40, 70), (6, 33, 70)],
            [None, None, (0, 70, 1)], extra=extra)  # the folded way checks it as well


def test_row_col_and_scalar_inputs_of_other_shapes():
    shapes = [(6, 33, 40), (6, 40, 70)]
    refuses(r"input 'bias' has shape \[6, 70\], expected a contiguous row input \[N\] = \[70\]",
            shapes + [(6, 70)], extra=[("bias", "row")])
    refuses(r"input 's' has shape \[6, 33\], expected a contiguous column input \[M\] = \[33\]",
            shapes + [(6, 33)], extra=[("s", "col")])
    refuses(r"input 'bias' has shape \[70\]", shapes + [(70,)], [None, None, (2,)], extra=[("bias", "row")])
    refuses(r"input 'alpha' has shape \[2\], expected \[\] or \[1\]", shapes + [(2,)], extra=[("alpha", "scalar")])


def test_a_2d_call_is_not_a_batched_one():
    refuses("no 3-D GEMM operand", [(33, 40), (40, 70)])


def test_the_dual_gemms_operand_count():
    with pytest.raises(epifuse.UserError, match="2 inputs for 3"):
        plan_gemm_call("c", DUAL, [("a", "full"), ("b0", "full"), ("b1", "full")], Y,
                       [(6, 33, 40), (6, 40, 70)], [dense((6, 33, 40)), dense((6, 40, 70))])


# ---- the launch record, with torch's CPU tensors and a stubbed compile and launch

BMM = """{"epifuse": 1, "name": "bmm", "mainloop": {"kind": "gemm", "a": "f16", "b": "f16", "b_layout": "%s"},
  "inputs": {"bias": {"dtype": "f16", "broadcast": "row"}},
  "ops": [{"name": "y", "op": "add", "args": ["acc", "bias"]}], "outputs": {"y": {"dtype": "f16"}}}"""


class _NoKernel:
    h = None


@pytest.fixture
def stubbed(monkeypatch):
    """(fn, compiles, launches) for a chain's callable whose first calls prepare on the
    CPU after the full checks; `compiles` the arguments of each compile, `launches`
    the batch fields of each launch record."""
    torch = pytest.importorskip("torch")
    from epifuse import _lib, torch_bind

    def make(layout="row"):
        fn = epifuse.Chain.from_json(BMM % layout).compile(tune=False)
        names = fn.input_names
        compiles, launches = [], []

        def kernel(mnk, device=0, lds=None, batch=0, batch_strides=None):
            compiles.append((tuple(mnk), lds, batch, batch_strides))
            return _NoKernel(), names, ["y"]

        fn.kernel, fn.jit = kernel, (lambda device=0: None)

        def first_call_on_cpu(compiled, tensors):
            cpu = torch.device("cpu")
            assert torch_bind._is_batched(compiled, tensors)
            l = torch_bind._first_batched_call(compiled, tensors, cpu)
            l.index = -1
            return l

        def launch(address):
            r = _lib.LaunchRecord.from_address(address)
            launches.append({"mnk": (r.m, r.n, r.k), "batch": r.batch, "nld": r.nld,
                             "batch_stride": [r.batch_stride[i] for i in range(r.nbatch_stride)],
                             "inputs": [r.inputs[i] for i in range(r.ninputs)]})
            return 0

        monkeypatch.setattr(torch_bind, "_first_call", first_call_on_cpu)
        monkeypatch.setattr(torch_bind, "_launch", launch)
        monkeypatch.setattr(torch_bind, "_raw_stream", lambda index: 0)
        return fn, compiles, launches
    return torch, make


def test_a_batched_call_fills_the_records_batch_fields(stubbed):
    torch, make = stubbed
    fn, compiles, launches = make("col")
    a = torch.randn(5, 12, 16).half()
    w = torch.randn(5, 24, 16).half()  # [B, N, K]: B column-major
    bias = torch.randn(24).half()
    y = fn(a, w.transpose(-1, -2), bias)
    assert y.shape == (5, 12, 24) and y.dtype == torch.float16
    assert compiles == [((12, 24, 16), None, 5, (12 * 16, 24 * 16))]
    assert launches[0] == {"mnk": (12, 24, 16), "batch": 5, "nld": 0, "batch_stride": [192, 384],
                           "inputs": [a.data_ptr(), w.data_ptr(), bias.data_ptr()]}
    fn(a, w.transpose(-1, -2), bias)  # the same signature: the prepared launch
    assert len(compiles) == 1 and launches[1]["batch"] == 5


def test_a_folded_call_is_an_unbatched_record_and_out_is_b_m_n(stubbed):
    torch, make = stubbed
    fn, compiles, launches = make("row")
    a = torch.randn(5, 12, 16).half()
    b = torch.randn(16, 24).half()
    bias = torch.randn(24).half()
    out = torch.empty(5, 12, 24).half()
    assert fn(a, b, bias, out=out) is out
    assert compiles == [((60, 24, 16), None, 0, None)]
    assert launches[0]["batch"] == 0 and launches[0]["batch_stride"] == [] and launches[0]["mnk"] == (60, 24, 16)
    with pytest.raises(epifuse.UserError, match=r"out= for 'y' must be .* shape \[5, 12, 24\]"):
        fn(a, b, bias, out=torch.empty(60, 24).half())


def test_a_batched_calls_dtype_and_device_are_checked(stubbed):
    torch, make = stubbed
    fn, _, _ = make("row")
    a, b, bias = torch.randn(5, 12, 16).half(), torch.randn(5, 16, 24).half(), torch.randn(24).half()
    with pytest.raises(epifuse.UserError, match="input 'b' is torch.float32, the chain reads f16"):
        fn(a, b.float(), bias)
    with pytest.raises(epifuse.UserError, match="input 'bias' is on meta, the others on cpu"):
        fn(a, b, bias.to("meta"))
    with pytest.raises(epifuse.UserError, match="batch sizes differ"):
        fn(a, b[:4], bias)
