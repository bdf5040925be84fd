"""A GEMM chain called with 3-D operands: which call runs as one batched launch and
which folds its batches into M, and every check of shapes and strides that decides
it, as pure functions of the inputs' shapes and strides (no torch, no GPU, no C
call; tests/python/test_batching_cpu.py runs them on plain tuples).

Note [Batched calls from Python] (docs/python.md, "Batched GEMM";
docs/strided-batched.md, "Built: batched GEMM")
A 2-D call is what it always was. A call with a 3-D operand means a batch of
problems, [B, M, K] x [B, K, N] -> [B, M, N] as torch.bmm computes it, and its
inputs and outputs are read in those terms whichever way it runs: full [M, N]
inputs are [B, M, N] with batches back to back, row [N], column [M] and scalar
inputs are shared by every batch, outputs are [B, M, N], and a chain with a
non-full output (a column sum, a per-row statistic) is refused, since a batched
kernel stores full outputs only. A 2-D operand beside a 3-D one, or a 3-D one with
batch stride 0 (an `expand`ed view), is one matrix shared by every batch. A batch
of different sizes is refused: pass `.expand(B, ...)` to share.

Two ways run it, chosen by the strides alone; both give the same numbers:
- **Folded into M**: every B operand 2-D, A row-major with its batches' rows evenly
  spaced ([B, M, K] contiguous or a slice x[..., :k] of one) and no column input.
  Then the batch is B*M rows of one 2-D GEMM: the ordinary kernel, tuned like any
  2-D shape, as epifuse.torch.linear runs [..., K] activations.
- **One batched launch** (ef_jit_compile_batched) otherwise: each GEMM operand's
  batch stride is its `stride(0)` (0 shared), a batch of 1 is the unbatched kernel
  on the one problem, and a batch above 65535 is refused (the grid's third
  dimension).
"""
from typing import NamedTuple, Optional, Sequence, Tuple

from ._lib import UserError

MAX_BATCH = 65535  # limits::k_max_batch: a batched launch's grid z


class GemmCall(NamedTuple):
    """How a GEMM chain runs a call with 3-D operands (plan_gemm_call)."""
    mnk: Tuple[int, int, int]  # the problem the kernel is compiled for (B*M rows when folded)
    batch: int  # problems in the launch: 0 for an unbatched launch (folded, or a batch of 1)
    batch_strides: Optional[Tuple[int, ...]]  # per GEMM operand in binding order when batch > 0, else None
    lds: Tuple[int, ...]  # per input in binding order: a GEMM operand's ld, 0 dense
    outputs: Tuple[Tuple[int, ...], ...]  # each output's torch shape, [B, M, N], in declaration order
    folded: bool  # the batches run as B*M rows of one 2-D problem


def _matrix_ld(chain, name, layout, rows_cols, strides):
    """(ld, stored rows, row length) of one [rows, cols] matrix of an operand read
    `layout`: a row-major one's rows are its logical rows, a column-major one's are
    its logical columns (the transpose of [cols, rows] rows). ld 0 is dense. UserError
    naming the operand when the innermost stored stride is not 1 or the rows overlap."""
    r, c = rows_cols
    sr, sc = strides
    if layout == "col":  # stored: c rows of r elements, strides (1, ld)
        n_rows, length, inner, ld = c, r, sr, sc
    else:
        n_rows, length, inner, ld = r, c, sc, sr
    if length > 1 and inner != 1:
        want = "the transpose of a tensor with contiguous rows (t.transpose(-1, -2) of a contiguous t), strides " \
               "(..., 1, ld)" if layout == "col" else "innermost stride 1, strides (..., ld, 1)"
        raise UserError(f"{chain}: the chain reads '{name}' {'column' if layout == 'col' else 'row'}-major: each "
                        f"batch's matrix needs {want}; got strides ({sr}, {sc}) for its {list(rows_cols)}")
    if n_rows <= 1 or ld == length:
        return 0, n_rows, length
    if ld < length:
        raise UserError(f"{chain}: operand '{name}': rows {ld} elements apart overlap its rows of {length} "
                        "elements; call .contiguous() first")
    return ld, n_rows, length


def plan_gemm_call(chain, layouts, inputs, outputs, shapes, strides):
    """How a GEMM chain runs a call where some operand is 3-D (Note [Batched calls
    from Python]), or UserError naming what is wrong.

    chain: the chain's name, for messages. layouts: [(operand, "row" | "col")] of the
    GEMM operands in binding order (a, b or a, b0, b1). inputs: [(name, broadcast)]
    of every input in binding order, operands first (broadcast "full", "row", "col"
    or "scalar"). outputs: [(name, broadcast)] in declaration order. shapes, strides:
    each input's, as torch gives them (in elements)."""
    nops = len(layouts)
    if len(inputs) < nops or len(shapes) != len(inputs) or len(strides) != len(inputs):
        raise UserError(f"{chain}: {len(shapes)} inputs for {len(inputs)} ({', '.join(n for n, _ in inputs)})")
    shapes = [tuple(s) for s in shapes]
    strides = [tuple(s) for s in strides]
    for (name, _), s in zip(layouts, shapes):
        if len(s) not in (2, 3):
            raise UserError(f"{chain}: GEMM operand '{name}' has shape {list(s)}: a matrix [rows, cols] or a "
                            "batch of them [B, rows, cols]")
    batched = [(name, s[0]) for (name, _), s in zip(layouts, shapes) if len(s) == 3]
    if not batched:
        raise UserError(f"{chain}: no 3-D GEMM operand: a 2-D call is not a batched one")
    batch = batched[0][1]
    if any(b != batch for _, b in batched):
        raise UserError(f"{chain}: the GEMM operands' batch sizes differ ("
                        + ", ".join(f"'{n}' {b}" for n, b in batched)
                        + "); to share one matrix across the batches pass it 2-D or .expand(B, ...) it")
    if batch == 0:
        raise UserError(f"{chain}: a batch of 0 problems: nothing to run")
    # The logical [rows, cols] of each operand, and K agreeing between them.
    mats = [s[-2:] for s in shapes[:nops]]
    m, k = mats[0]
    n = mats[1][1]
    for (name, _), (r, c) in zip(layouts[1:], mats[1:]):
        if (r, c) != (k, n):
            raise UserError(f"{chain}: operand '{name}' is [{r}, {c}] per batch, expected [K, N] = [{k}, {n}] "
                            f"(a is [M, K] = [{m}, {k}]"
                            + (f", {layouts[1][0]} [{k}, {n}]" if name != layouts[1][0] else "") + ")")
    for (name, layout), s, st in zip(layouts, shapes, strides):
        if len(s) == 3 and st[0] < 0:
            raise UserError(f"{chain}: operand '{name}' has a negative batch stride {st[0]}")
    # Outputs: a batched kernel stores full [M, N] outputs only.
    for name, cls in outputs:
        if cls != "full":
            what = "a column sum [N]" if cls == "row" else "a per-row [M] output"
            raise UserError(f"{chain}: output '{name}' is {what}; a batched GEMM call (3-D operands) stores full "
                            "[B, M, N] outputs only (a sum would run over every batch). To sum over every "
                            "batch's rows, fold them into M: pass a.reshape(-1, K) with a 2-D b")
    # The chain's own inputs, in a batched call's terms.
    has_col = False
    for (name, cls), s, st in zip(inputs[nops:], shapes[nops:], strides[nops:]):
        if cls == "full":
            if s != (batch, m, n) or not _dense(s, st):
                raise UserError(f"{chain}: input '{name}' has shape {list(s)} and strides {st}: a full input of "
                                f"a batched GEMM call must be [B, M, N] = [{batch}, {m}, {n}], contiguous (batches "
                                "back to back); one shared by every batch: .expand(B, M, N).contiguous()")
        elif cls == "row":
            if s != (n,) or not _dense(s, st):
                raise UserError(f"{chain}: input '{name}' has shape {list(s)}, expected a contiguous row input [N] "
                                f"= [{n}], shared by every batch")
        elif cls == "col":
            has_col = True
            if s != (m,) or not _dense(s, st):
                raise UserError(f"{chain}: input '{name}' has shape {list(s)}, expected a contiguous column input "
                                f"[M] = [{m}], shared by every batch (a batched GEMM reads one per launch)")
        elif s not in ((), (1,)):
            raise UserError(f"{chain}: input '{name}' has shape {list(s)}, expected [] or [1] (a scalar input)")
    out_shapes = tuple((batch, m, n) for _ in outputs)
    # Each operand's ld per batch matrix.
    op_lds, sizes = [], []
    for (name, layout), (r, c), st in zip(layouts, mats, strides):
        ld, n_rows, length = _matrix_ld(chain, name, layout, (r, c), st[-2:])
        op_lds.append(ld)
        sizes.append(n_rows * (ld or length))
    rest = (0,) * (len(inputs) - nops)
    a_stride = strides[0][0] if len(shapes[0]) == 3 else 0
    if batch == 1:
        fold_ld = op_lds[0]
    elif m == 1:  # one row a batch: the batches are the rows
        fold_ld = a_stride if a_stride >= max(k, 1) else None
    else:
        fold_ld = op_lds[0] if a_stride == m * (op_lds[0] or k) else None
    if (fold_ld is not None and layouts[0][1] == "row" and all(len(s) == 2 for s in shapes[1:nops])
            and not has_col):
        # Folded: B*M rows of K, each row ld apart.
        a_ld = 0 if fold_ld == k else fold_ld
        return GemmCall((batch * m, n, k), 0, None, (a_ld,) + tuple(op_lds[1:]) + rest, out_shapes, True)
    if batch == 1:  # the one problem, unbatched
        return GemmCall((m, n, k), 0, None, tuple(op_lds) + rest, out_shapes, False)
    if batch > MAX_BATCH:
        raise UserError(f"{chain}: a batch of {batch} problems; a batched launch takes at most {MAX_BATCH} "
                        "(split the batch, or fold it into M with a 2-D b)")
    batch_strides = []
    for (name, _), s, st, size in zip(layouts, shapes, strides, sizes):
        bs = 0 if len(s) == 2 else st[0]
        if bs != 0 and bs < size:
            raise UserError(f"{chain}: operand '{name}': batches {bs} elements apart overlap its {size} elements "
                            "per batch; call .contiguous() first")
        batch_strides.append(bs)
    return GemmCall((m, n, k), batch, tuple(batch_strides), tuple(op_lds) + rest, out_shapes, False)


def _dense(shape, strides):
    """Whether `strides` are the contiguous ones of `shape` (a size-1 dimension's stride
    does not matter, as for torch's is_contiguous)."""
    step = 1
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1 and s != step:
            return d == 0
        step *= d
    return True


def is_batched_call(operand_dims: Sequence[int]) -> bool:
    """Whether a GEMM chain's call with operands of these dimension counts is a batched
    one (some operand 3-D); a 2-D call takes the unbatched path unchanged."""
    return 3 in operand_dims
