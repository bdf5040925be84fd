"""torch CUDA tensors through the JIT: pointers, shapes and strides from the tensors,
the tensors' device (any cuda:k, whatever the current device is) and torch's current
stream there, outputs from torch.empty (so CUDA graph capture sees only torch's
allocator). A call whose inputs have a signature seen before (dtypes, shapes,
strides, device) does no compile, no parsing and no checks: its kernel, binding
order and launch record are kept per signature.
"""
import ctypes
import struct

import torch

from . import _lib, batching
from ._lib import lib, check

_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
_U64_MAX = _lib.U64_MAX


class _Launch:
    """What a call with inputs of a signature seen before needs, prepared once."""
    __slots__ = ("kernel", "order", "outputs", "one_output", "pointers", "pack_pointers", "pack_varying",
                 "varying_offset", "mnk", "lead", "signature", "record", "address", "index", "device", "lds",
                 "batch_strides", "input_lds", "shapes", "key", "batch")


def _signature(tensors):
    """What a prepared launch was checked for, per input: dtype, shape, strides and
    device (AttributeError for anything but a tensor). Inputs of one signature pass the
    checks alike, so a call whose inputs match a prepared launch's skips them."""
    return [(t.dtype, t.shape, t.stride(), t.device) for t in tensors]


def _key(tensors):
    """The signature as a key of the callable's launches."""
    return tuple(_signature(tensors))


def _contiguous_strides(shape):
    """The strides torch.empty gives `shape` (a size-0 or size-1 dimension counts as 1)."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


def _prepare(compiled, tensors, device, lds):
    mnk, lead = compiled._shape([tuple(t.shape) for t in tensors])
    b = compiled._check_shapes([tuple(t.shape) for t in tensors], mnk, lead)
    if compiled.tune and mnk[0] * mnk[1] > 0 and not torch.cuda.is_current_stream_capturing():
        _tune(compiled, tensors, mnk, lead, b, device, lds)  # under capture (it waits for the GPU): the default tile
    # Strided operands and epilogue inputs (Note [Strided operands], [Strided epilogue
    # tensors]): their kernel variant, each input's ld in binding order (the GEMM
    # operands first, then the chain's inputs), which is the chain's input order.
    input_lds = lds if any(lds) else None
    kernel, kb_inputs, kb_outputs = compiled.kernel(mnk, device.index, input_lds)
    return _make_launch(compiled, tensors, device, kernel, kb_inputs, kb_outputs, mnk, lead,
                        _output_shapes(b, lead), input_lds)


def _make_launch(compiled, tensors, device, kernel, kb_inputs, kb_outputs, mnk, lead, shapes, lds,
                 batch=0, batch_strides=None, signature=None):
    """The _Launch of a kernel: its binding order, outputs (`shapes`: {output name:
    torch shape}), signature and the launch record with everything but what varies
    per call; `lds`: None (dense), or the bindings' leading dimensions as the kernel
    was compiled with them (inputs, then outputs; shorter: the rest dense); `batch`
    above 1 with a batch stride per GEMM operand: a batched launch. `signature`:
    the inputs' (a strided out= launch takes its dense launch's), else `tensors`'."""
    names = compiled.input_names
    l = _Launch()
    l.order = [names.index(n) for n in kb_inputs]
    l.lds = None if lds is None else (ctypes.c_int64 * len(lds))(*lds)
    l.input_lds = [0] * len(names) if lds is None else (list(lds[:len(names)]) + [0] * len(names))[:len(names)]
    l.kernel, l.mnk, l.lead, l.shapes, l.batch = kernel, mnk, lead, shapes, batch
    l.index, l.device = device.index, device
    dtypes = dict(compiled._outputs)
    l.outputs = [(shapes[n], _DTYPES[dtypes[n]]) for n in kb_outputs]
    # What the hot path compares: the inputs' signature as this first call checked
    # it, and, for a chain of one output, the signature out= passes _check_out with
    # (a contiguous tensor of other strides, a size-1 dimension's, takes _check_out).
    l.signature = _signature(tensors) if signature is None else signature
    l.key = tuple(l.signature)
    l.one_output = None
    if len(l.outputs) == 1:
        shape, dt = l.outputs[0]
        l.one_output = (dt, shape, _contiguous_strides(shape), device)
    # The inputs' then the outputs' device pointers in one array, written with one
    # struct.pack_into per call, as are seed, offset, stream and rng_state, which
    # follow one another in the record (one C call each instead of a ctypes
    # assignment per field; tests/python/test_torch_hot_path_cpu.py pins the layout).
    nin, nout = len(l.order), len(l.outputs)
    l.order = None if l.order == list(range(nin)) else l.order
    l.pointers = (ctypes.c_uint64 * (nin + nout))()
    l.pack_pointers = struct.Struct(f"={nin + nout}Q").pack_into
    l.pack_varying = struct.Struct("=QQQQ").pack_into
    l.varying_offset = _lib.LaunchRecord.seed.offset
    r = l.record = _lib.LaunchRecord()
    r.jit, r.kernel, r.inputs, r.ninputs = compiled.jit(device.index), kernel.h, l.pointers, nin
    r.outputs, r.noutputs = (ctypes.c_uint64 * nout).from_buffer(l.pointers, 8 * nin), nout
    r.m, r.n, r.k = mnk
    if l.lds is not None:
        r.ld, r.nld = l.lds, len(l.lds)
    if batch > 1:  # kept with the launch: the record points at it
        l.batch_strides = (ctypes.c_int64 * len(batch_strides))(*batch_strides)
        r.batch, r.batch_stride, r.nbatch_stride = batch, l.batch_strides, len(batch_strides)
    l.address = ctypes.addressof(r)
    return l


def _prepare_batched(compiled, tensors, device):
    """The launch of a GEMM chain's call with 3-D operands (Note [Batched calls from
    Python] in batching.py): folded into M, or one batched launch, after the checks
    of batching.plan_gemm_call."""
    layouts = list(_layouts(compiled).items())
    p = batching.plan_gemm_call(compiled.chain.name, layouts, list(zip(compiled.input_names, compiled._broadcasts)),
                                _output_classes(compiled), [tuple(t.shape) for t in tensors],
                                [tuple(t.stride()) for t in tensors])
    nops = len(layouts)
    operand_lds = list(p.lds[:nops]) if any(p.lds[:nops]) else None
    if (p.batch == 0 and compiled.tune and p.mnk[0] * p.mnk[1] > 0
            and not torch.cuda.is_current_stream_capturing()):
        # One 2-D problem (folded, or a batch of 1): tuned as any 2-D shape, on its
        # dense [rows, cols] views. A batched launch runs the default tile, which
        # is chosen for the batches stacked in M (ef_jit_tune has no batch).
        views = [_matrix_view(t, p.folded and i == 0) if i < nops else t.reshape(-1, p.mnk[1]) if t.dim() == 3 else t
                 for i, t in enumerate(tensors)]
        _tune(compiled, views, p.mnk, None, compiled.chain.bindings(*p.mnk), device, list(p.lds))
    kernel, kb_inputs, kb_outputs = compiled.kernel(p.mnk, device.index, operand_lds, p.batch, p.batch_strides)
    shapes = {name: shape for (name, _), shape in zip(compiled._outputs, p.outputs)}
    return _make_launch(compiled, tensors, device, kernel, kb_inputs, kb_outputs, p.mnk, None, shapes,
                        operand_lds, p.batch, p.batch_strides)


def _matrix_view(t, folded):
    """A GEMM operand of a batch of 1 or a folded call as the 2-D matrix its kernel
    reads: the batch's one matrix, or a folded A's B*M rows."""
    if t.dim() == 2:
        return t
    return t.reshape(-1, t.shape[-1]) if folded else t[0]


def _output_classes(compiled):
    """[(output name, "full" | "row" | "col")] in declaration order."""
    return [(o["name"], o.get("broadcast", "full")) for o in compiled.chain.bindings(1, 1, 1)["outputs"]]


def _output_shapes(b, lead):
    """{output name: its torch shape}: [M,N] (leading dimensions folded into M come
    back), [N] or [M]."""
    shapes = {}
    for o in b["outputs"]:
        cls = o.get("broadcast", "full")
        shapes[o["name"]] = tuple(o["shape"]) if lead is None else {"full": lead, "row": lead[-1:], "col": lead[:-1]}[cls]
    return shapes


def _tune(compiled, tensors, mnk, lead, b, device, lds):
    """compile(tune=True): the tile candidates timed on these tensors, once per shape and
    device, into scratch outputs, after the work queued on torch's stream. Strided
    operands are timed as their dense copies: the tile is the dense shape's, so a view
    and its copy run the same tile and give the same bits."""
    kernel, kb_inputs, kb_outputs = compiled.kernel(mnk, device.index)  # the binding order every tile shares
    names = compiled.input_names
    if any(lds):
        layouts = _layouts(compiled)
        tensors = [_dense_copy(t, layouts.get(n)) if ld else t for (n, _), t, ld in zip(compiled._inputs, tensors, lds)]
    shapes, dtypes = _output_shapes(b, lead), dict(compiled._outputs)
    scratch = [torch.empty(shapes[n], dtype=_DTYPES[dtypes[n]], device=device) for n in kb_outputs]
    torch.cuda.synchronize(device)
    compiled.tune_on(mnk, device.index, [tensors[names.index(n)].data_ptr() for n in kb_inputs],
                     [t.data_ptr() for t in scratch])


def _layouts(compiled):
    return compiled.layouts()


def _dense_copy(t, layout):
    """A strided operand's dense copy in its layout (a column-major one stays the transpose of a contiguous tensor)."""
    return t.transpose(-1, -2).contiguous().transpose(-1, -2) if layout == "col" else t.contiguous()


def _operand_ld(compiled, name, layout, t):
    """A GEMM operand's leading dimension as `t` stores it: 0 when dense, else the
    elements between its rows (a column-major operand's columns), which the kernel
    reads in place (Note [Strided operands]). UserError naming the operand for any
    view whose innermost stride is not 1."""
    if layout == "col":  # the transpose of [N, K] rows: strides (1, ld)
        if t.dim() == 2 and t.t().is_contiguous():
            return 0
        if t.dim() == 2 and t.stride(0) == 1 and t.stride(1) >= t.shape[0]:
            return t.stride(1)
        raise _lib.UserError(f"{compiled.chain.name}: the chain reads '{name}' column-major: pass the transpose of "
                             "a tensor with contiguous rows (e.g. weight.t() of an nn.Linear, or of a slice "
                             f"weight[:, :k]), got shape {tuple(t.shape)} with strides {tuple(t.stride())}")
    if t.is_contiguous():
        return 0
    if t.dim() == 2 and t.stride(1) == 1 and t.stride(0) >= t.shape[1]:
        return t.stride(0)
    raise _lib.UserError(f"{compiled.chain.name}: input '{name}' has shape {tuple(t.shape)} and strides "
                         f"{tuple(t.stride())}: a GEMM operand's view must be 2-D with innermost stride 1 "
                         "(e.g. x[:, :k]); call .contiguous() first")


def _row_ld(t):
    """A 2-D view's row stride where its rows are ld >= N elements apart with
    adjacent columns (x[:, :n], a column block of a wider buffer), else None."""
    if t.dim() == 2 and t.stride(1) == 1 and t.stride(0) >= t.shape[1]:
        return t.stride(0)
    return None


def _check(compiled, tensors, device):
    """Checks every input (UserError naming the first bad one); returns each one's
    leading dimension in input order, 0 for dense: a GEMM operand, or any chain's
    full [M, N] input (Note [Strided epilogue tensors], [Strided rows]), may be a
    strided 2-D view."""
    layouts = _layouts(compiled)
    lds = []
    for (name, dtype), broadcast, t in zip(compiled._inputs, compiled._broadcasts, tensors):
        _check_tensor(compiled, name, dtype, t, device)
        if name in layouts:
            lds.append(_operand_ld(compiled, name, layouts[name], t))
            continue
        if t.is_contiguous():
            lds.append(0)
            continue
        ld = _row_ld(t) if broadcast == "full" else None
        if ld is None:
            raise _lib.UserError(f"{compiled.chain.name}: input '{name}' is not contiguous (strides "
                                 f"{tuple(t.stride())}){_STRIDED_HINT if broadcast == 'full' else ''}"
                                 "; call .contiguous() first")
        lds.append(ld)
    return lds


_STRIDED_HINT = (": a full [M, N] tensor may be a 2-D view with innermost stride 1 and rows at least N apart "
                 "(e.g. buf[:, :n])")


def _check_tensor(compiled, name, dtype, t, device):
    """UserError unless input `name` is a torch tensor of the chain's dtype on `device`."""
    if not isinstance(t, torch.Tensor):
        raise _lib.UserError(f"{compiled.chain.name}: input '{name}' is a {type(t).__name__}; mix no "
                             "NumPy arrays with torch tensors")
    if t.device != device:
        raise _lib.UserError(f"{compiled.chain.name}: input '{name}' is on {t.device}, the others on {device}")
    if t.dtype != _DTYPES[dtype]:
        raise _lib.UserError(f"{compiled.chain.name}: input '{name}' is {t.dtype}, the chain reads {dtype}")


def _is_batched(compiled, tensors):
    """Whether a call of a GEMM chain has a 3-D operand (batching.is_batched_call)."""
    if not compiled._gemm:
        return False
    operands = tensors[:len(_layouts(compiled))]
    return batching.is_batched_call([t.dim() if isinstance(t, torch.Tensor) else 0 for t in operands])


def _first_batched_call(compiled, tensors, device):
    """_first_call for a GEMM chain's call with 3-D operands: every input checked
    (types, device, dtypes, then batching.plan_gemm_call), the launch prepared once
    per signature."""
    for (name, dtype), t in zip(compiled._inputs, tensors):
        _check_tensor(compiled, name, dtype, t, device)
    key = _key(tensors)
    l = compiled._launches.get(key)
    if l is None:
        l = compiled._launches[key] = _prepare_batched(compiled, tensors, device)
    return l


try:
    _raw_stream = torch._C._cuda_getCurrentRawStream  # what Triton launches on; no Stream object
except AttributeError:  # pragma: no cover - older torch
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream

_launch = lib.ef_launch_record
_Tensor = torch.Tensor
_data_ptr = torch.Tensor.data_ptr


def _state_pointer(compiled, l, state):
    """The device address of an rng_state tensor: int64, two elements, contiguous, on
    the inputs' device (Note [Seeds on the device])."""
    if (not isinstance(state, torch.Tensor) or state.dtype is not torch.int64 or tuple(state.shape) != (2,)
            or not state.is_contiguous() or state.get_device() != l.index):
        raise _lib.UserError(f"{compiled.chain.name}: rng_state must be a contiguous int64 tensor of shape [2] on "
                             f"{l.device}, got {getattr(state, 'dtype', type(state).__name__)} "
                             f"{list(getattr(state, 'shape', []))} on {getattr(state, 'device', None)}")
    return state.data_ptr()


def run(compiled, tensors, seed, offset, out=None, rng_state=None, l=None):
    """Every torch call: the inputs' signature against the last launch's, then the launch
    record filled with two pack_into. `l`: the launch the caller found the inputs to
    match (hot_path's functions), whose signature is not compared again."""
    if l is None:
        try:
            signature = [(t.dtype, t.shape, t.stride(), t.device) for t in tensors]  # _signature, inlined
        except AttributeError:  # not a tensor: _first_call says which
            signature = None
        l = compiled._last_launch
        if l is None or signature != l.signature:
            l = None if signature is None else compiled._launches.get(tuple(signature))
            if l is None:
                l = _first_call(compiled, tensors)
            compiled._last_launch = l
    if type(out) is _Tensor and (out.dtype, out.shape, out.stride(), out.device) == l.one_output:
        outs = (out,)
    elif out is None:
        outs = [torch.empty(shape, dtype=dt, device=l.device) for shape, dt in l.outputs]
    else:
        outs, out_lds = _check_out(compiled, l, out)
        if out_lds is not None:
            l = _strided_out_launch(compiled, l, out_lds)
    # ctypes would wrap a seed outside uint64 silently (and struct would raise its
    # own error): the plain in-range int costs two comparisons, anything else goes
    # through the full check.
    if type(seed) is not int or type(offset) is not int or not (0 <= seed <= _U64_MAX and 0 <= offset <= _U64_MAX):
        seed, offset = _lib.u64(seed, "seed"), _lib.u64(offset, "offset")
    l.pack_varying(l.record, l.varying_offset, seed, offset, _raw_stream(l.index),
                   0 if rng_state is None else _state_pointer(compiled, l, rng_state))
    order = l.order
    l.pack_pointers(l.pointers, 0, *map(_data_ptr, tensors if order is None else [tensors[j] for j in order]),
                    *map(_data_ptr, outs))
    status = _launch(l.address)
    if status:
        check(status)
    return outs[0] if len(outs) == 1 else tuple(outs)


# Note [Hot path per arity]
# The call the overhead bar measures, fn(x, y, out=z) with inputs and output of the
# last launch's signatures, as straight-line code for the chain's number of inputs:
# no comprehension, no map, no star-unpacking (CPU-side with two inputs, 1.95 us
# where run takes 2.45; docs/perf/host.md). It checks exactly what run's fast path checks,
# and hands anything else to run: another signature, an input that is not a tensor,
# outputs from torch.empty or a sequence, rng_state, a seed outside uint64, a
# kernel binding its inputs in another order. Compiled in this module's globals, so
# that what it calls (_launch, _raw_stream) is looked up here at each call.
_HOT_PATH = """\
def run_{n}(compiled, tensors, seed, offset, out=None, rng_state=None):
    {names}, = tensors
    l = compiled._last_launch
    try:
        hit = [{signature}] == l.signature
    except AttributeError:  # no launch yet, or an input that is not a tensor
        hit = False
    if (hit and l.order is None and type(out) is _Tensor
            and (out.dtype, out.shape, out.stride(), out.device) == l.one_output and rng_state is None
            and type(seed) is int and type(offset) is int and 0 <= seed <= _U64_MAX and 0 <= offset <= _U64_MAX):
        l.pack_varying(l.record, l.varying_offset, seed, offset, _raw_stream(l.index), 0)
        l.pack_pointers(l.pointers, 0, {pointers}, out.data_ptr())
        status = _launch(l.address)
        if status:
            check(status)
        return out
    return run(compiled, tensors, seed, offset, out, rng_state, l if hit else None)
"""
_hot_paths = {}


def hot_path_source(n):
    """The source of hot_path(n) (Note [Hot path per arity])."""
    names = [f"t{i}" for i in range(n)]
    return _HOT_PATH.format(n=n, names=", ".join(names),
                            signature=", ".join(f"({t}.dtype, {t}.shape, {t}.stride(), {t}.device)" for t in names),
                            pointers=", ".join(f"{t}.data_ptr()" for t in names))


def hot_path(n):
    """run for a chain of `n` inputs, all positional, with its hot path unrolled."""
    f = _hot_paths.get(n)
    if f is None:
        scope = {}
        exec(compile(hot_path_source(n), f"<epifuse hot path, {n} inputs>", "exec"), globals(), scope)
        f = _hot_paths[n] = scope[f"run_{n}"]
    return f


def _check_out(compiled, l, out):
    """`out=`: the outputs, one tensor or a sequence in declaration order, each of the
    output's shape and dtype, contiguous, on the inputs' device. They are written, not
    returned anew. A chain's full [M, N] output may be a 2-D view with innermost
    stride 1 (Note [Strided epilogue tensors]): written in place, the columns between
    its rows untouched. Returns (outs, lds): lds None where every output is dense, else
    each output's ld in declaration order (0 dense)."""
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    if len(outs) != len(l.outputs):
        raise _lib.UserError(f"{compiled.chain.name}: out= has {len(outs)} tensors for {len(l.outputs)} outputs")
    lds = None
    for j, (o, (shape, dt), (name, _)) in enumerate(zip(outs, l.outputs, compiled._outputs)):
        if (not isinstance(o, torch.Tensor) or tuple(o.shape) != tuple(shape) or o.dtype is not dt
                or o.get_device() != l.index):
            raise _lib.UserError(f"{compiled.chain.name}: out= for '{name}' must be a contiguous {dt} tensor of "
                                 f"shape {list(shape)} on {l.device}, got {getattr(o, 'dtype', type(o).__name__)} "
                                 f"{list(getattr(o, 'shape', []))} on {getattr(o, 'device', None)}")
        if o.is_contiguous():
            continue
        full = dict(_output_classes(compiled))[name] == "full"
        # An elementwise call's lead is its first full input's shape: 2-D, or
        # leading dimensions folded into M, whose outputs stay contiguous.
        two_d = l.lead is None or len(l.lead) == 2
        ld = _row_ld(o) if full and two_d and l.batch <= 1 else None
        if ld is None:
            raise _lib.UserError(f"{compiled.chain.name}: out= for '{name}' is not contiguous (strides "
                                 f"{tuple(o.stride())}){_STRIDED_HINT if full else ''}"
                                 f"{'; a batched call writes contiguous outputs' if l.batch > 1 else ''}")
        lds = lds or [0] * len(outs)
        lds[j] = ld
    return outs, lds


def _strided_out_launch(compiled, l, out_lds):
    """The launch of `l`'s inputs writing outputs with these leading dimensions (Note
    [Strided epilogue tensors]): the strided variant of its kernel, prepared once per
    inputs' signature and output lds. The tile is `l`'s shape's (tuned on dense
    tensors, if at all), so the bits are those of dense outputs."""
    key = (l.key, tuple(out_lds))
    v = compiled._launches.get(key)
    if v is None:
        lds = list(l.input_lds) + list(out_lds)
        kernel, kb_inputs, kb_outputs = compiled.kernel(l.mnk, l.index, lds)
        v = compiled._launches[key] = _make_launch(compiled, None, l.device, kernel, kb_inputs, kb_outputs, l.mnk,
                                                   l.lead, l.shapes, lds, signature=l.signature)
    return v


def _first_call(compiled, tensors):
    """Checks every input in full (UserError naming the first bad one), then
    compiles and prepares the launch for these shapes, or finds it prepared."""
    device = getattr(tensors[0], "device", None)
    if not isinstance(tensors[0], torch.Tensor) or device.type != "cuda":
        raise _lib.UserError(f"{compiled.chain.name}: torch tensors on {device}: epifuse runs torch tensors on "
                             "CUDA devices (NumPy arrays run on the CPU reference)")
    if device.index is None:  # a tensor's device always has its index; a bare "cuda" is the current one
        device = torch.device("cuda", torch.cuda.current_device())
    if _is_batched(compiled, tensors):
        return _first_batched_call(compiled, tensors, device)
    lds = _check(compiled, tensors, device)
    key = _key(tensors)
    l = compiled._launches.get(key)
    if l is None:
        l = compiled._launches[key] = _prepare(compiled, tensors, device, lds)
    return l
