"""PyTorch integration: a chain as a torch.library custom op (docs/python.md).

    import epifuse, epifuse.torch
    op = epifuse.torch.op(epifuse.load("examples/chains/bias_gelu_dropout_add.json"))
    y = op(x, bias, residual)                # eager, inside torch.compile (no graph break),
                                             # and under CUDA graph capture
    y.sum().backward()                       # gradients of x, bias and residual

The op is `torch.ops.epifuse.<name>_<hash>`, opaque to Dynamo; its fake (meta)
implementation gives the outputs' shapes and dtypes without running anything. The
launch is asynchronous on the inputs' device (any cuda:k), on torch's current stream
there, and its outputs come from torch.empty, so a captured graph replays it.

Dropout draws from torch's generator by default: each call draws a seed and an
offset base with torch.randint on the inputs' device, which the kernel reads on the
device (Note [Seeds on the device] in templates/common/philox.cuh). So
torch.manual_seed reproduces a run, each call draws a fresh mask, and a CUDA graph
draws fresh masks at each replay. `seed=` (a Python int below 2^63, the custom op
schema's int) fixes the mask instead; `offset=` is added to either.

`block(lower, upper)` stacks two GEMM chains in one op (nn.MLP, nn.GatedMLP), so the
lower chain's backward runs in the epilogue of the upper chain's dgrad GEMM.
"""
import hashlib
import json
import os
import re

import torch

from ._lib import UserError
from .chain import Chain

_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
_ops = {}  # qualified name -> the Python callable
_lib = None


def _library():
    global _lib
    if _lib is None:
        _lib = torch.library.Library("epifuse", "FRAGMENT")
    return _lib


def kernel_call(compiled, run=None):
    """What the op of `compiled` runs on CUDA tensors, as a plain function:
    (inputs, seed, offset, rng_state) -> list of outputs. `run`: a callable taking
    what `compiled` takes and giving the same outputs, run instead."""
    run = compiled if run is None else run

    def impl(inputs, seed, offset, rng_state):
        out = run(*inputs, seed=seed, offset=offset, rng_state=rng_state)
        return list(out) if isinstance(out, tuple) else [out]
    return impl


def _register(name, compiled, out_classes, impl):
    """Defines `epifuse::<name>` running `impl` (kernel_call's function of `compiled`,
    which the eager path calls directly too); returns its OpOverload."""
    out_dtypes = [_DTYPES[d] for _, d in compiled._outputs]
    gemm = compiled._gemm
    full = compiled._full

    def fake(inputs, seed, offset, rng_state):
        if gemm:  # [M, N], or [B, M, N] for 3-D operands (Note [Batched calls from Python])
            a, b = inputs[0], inputs[1]
            shape = (a.shape[-2], b.shape[-1])
            if a.dim() == 3 or b.dim() == 3:
                shape = ((a if a.dim() == 3 else b).shape[0],) + shape
        else:
            shape = tuple(inputs[full].shape)
        shapes = {"full": shape, "row": shape[-1:], "col": shape[:-1]}
        return [inputs[0].new_empty(shapes[c], dtype=dt) for c, dt in zip(out_classes, out_dtypes)]

    # torch.library.Library rather than torch.library.custom_op: the same opaque op for
    # Dynamo, at a fraction of custom_op's per-call Python cost (docs/perf/host.md,
    # "Python call overhead").
    _library().define(f"{name}(Tensor[] inputs, int seed, int offset, Tensor? rng_state) -> Tensor[]")
    _library().impl(name, impl, "CUDA")
    torch.library.register_fake(f"epifuse::{name}")(fake)
    return getattr(torch.ops.epifuse, name).default


def _classes(chain):
    return [o.get("broadcast", "full") for o in chain.bindings(1, 1, 1)["outputs"]]


def _draws(chain):
    """Whether the chain has a dropout op (and so reads a seed)."""
    return any(o.get("op") == "dropout" for o in json.loads(chain.to_json()).get("ops", []))


def rng_state(device):
    """A fresh {seed, offset base} pair from torch's generator of `device`, as the
    int64 tensor of two a dropout kernel reads on the device: torch.randint, so it is
    traced by torch.compile and refilled at each replay of a CUDA graph."""
    return torch.randint(0, 2**62, (2,), dtype=torch.int64, device=device)  # 62 bits each: far from int64 edges


# Note [Eager calls skip the dispatcher]
# An op registered with torch.library.register_autograd costs about 200 us of host
# time a call in eager mode before its kernel launches: the dispatcher, the Python
# autograd wrapper (pytree over the arguments, a Function.apply, a redispatch) and
# the Python implementation behind it. In a small model's training step the GPU waits
# for it (docs/perf/training.md, "Host time"). So an eager call of plain CUDA tensors
# runs the op's own implementation, setup_context and backward formula in a
# torch.autograd.Function (`Direct`), and that backward launches the backward
# kernels' implementations instead of their ops: the same kernels with the same
# arguments, so the same bits. Anything the dispatcher must see takes the registered
# op: torch.compile (Dynamo, AOTAutograd, compiled autograd), tensor subclasses (fake
# tensors, DTensor), torch-function and dispatch modes (opcheck's included), and
# functorch transforms. `direct = False`, or EPIFUSE_TORCH_DIRECT=0 in the
# environment at import, sends every call to the op.
direct = os.environ.get("EPIFUSE_TORCH_DIRECT", "1") != "0"
_Tensor, _Parameter = torch.Tensor, torch.nn.Parameter
try:
    _compiling = torch.compiler.is_compiling
except AttributeError:  # pragma: no cover - torch before 2.3
    def _compiling():
        return False
_function_mode = getattr(torch._C, "_is_torch_function_mode_enabled", lambda: True)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 1)
try:
    _transforms = torch._C._functorch.peek_interpreter_stack
except AttributeError:  # pragma: no cover - no functorch
    def _transforms():
        return True


def runs_direct(tensors):
    """Whether an eager call on `tensors` may skip the dispatcher (Note [Eager calls
    skip the dispatcher]): plain tensors or parameters, nothing tracing or
    intercepting."""
    if not direct or _compiling() or _function_mode() or _dispatch_modes() or _transforms() is not None:
        return False
    for t in tensors:
        if type(t) is not _Tensor and type(t) is not _Parameter:
            return False
    return True


class Formula:
    """An op's three parts as torch.library takes them, for `Direct`: `impl(*inputs)`
    (inputs = (tensors, seed, offset, ...) as the op's schema has them) gives the
    outputs, `setup_context(ctx, inputs, output)` saves what `backward(ctx, grads)`
    reads; backward returns the op's gradients, the list for `tensors` first."""
    __slots__ = ("impl", "setup_context", "backward")

    def __init__(self, impl, setup_context, backward):
        self.impl, self.setup_context, self.backward = impl, setup_context, backward


class Direct(torch.autograd.Function):
    """An eager op call without the dispatcher (Note [Eager calls skip the
    dispatcher]): `Direct.apply(formula, rest, *tensors)` runs formula.impl on
    (tensors, *rest) and its backward on the gradients. ctx.direct tells the backward
    formula that it too may launch kernels without their ops."""

    @staticmethod
    def forward(ctx, formula, rest, *tensors):
        """Runs formula.impl on (tensors, *rest) and saves what its backward reads."""
        inputs = (list(tensors), *rest)
        output = formula.impl(*inputs)
        formula.setup_context(ctx, inputs, output)
        ctx.formula, ctx.direct = formula, True
        return tuple(output)

    @staticmethod
    def backward(ctx, *grads):
        """The gradients of the tensors (none for formula and rest), from the formula's backward."""
        return (None, None, *ctx.formula.backward(ctx, grads)[0])


def direct_backward(ctx):
    """Whether a backward formula may launch its kernels without their ops: its
    forward ran as `Direct`, and nothing traces this backward."""
    return getattr(ctx, "direct", False) and not _compiling()


def op(chain: Chain, target=None, tile=None, tune=None):
    """Registers `chain` once per process as a custom op; returns a callable taking the
    chain's inputs (positional, in binding order) and `seed`, `offset` keywords.

    The op is differentiable (docs/autodiff.md): it runs the forward of Chain.grad,
    which also writes what the backward needs, and its registered autograd formula
    runs the backward spec with the same seed and offset (the same dropout masks).
    A GEMM chain's operand gradients are dacc·Bᵀ and Aᵀ·dacc through torch.matmul.
    An input marked "grad": false that requires grad raises in backward rather than
    being cut from the graph. `tune`: as Chain.compile's (default EPIFUSE_AUTOTUNE=1),
    for the forward and the backward kernels; the first registration of a chain in
    the process decides."""
    text = chain.to_json()
    name = re.sub(r"[^0-9A-Za-z_]", "_", chain.name) + "_" + hashlib.sha1(text.encode()).hexdigest()[:12]
    qualified = f"epifuse::{name}"
    if qualified in _ops:
        return _ops[qualified]
    try:
        g = chain.grad()
        why = None
    except UserError as e:
        g, why = None, str(e)  # nothing differentiable: backward raises if asked
    fwd_chain = g.forward if g is not None else chain
    compiled = fwd_chain.compile(target, tile, tune)
    n_out = len(chain.bindings(1, 1, 1)["outputs"])
    forward = kernel_call(compiled)
    custom = _register(name, compiled, _classes(fwd_chain), forward)
    if g is not None:
        setup_context, backward = _register_autograd(qualified, name, chain, g, compiled, target, tile, tune, n_out)
    else:
        setup_context, backward = _register_no_grad(qualified, chain.name, why)
    formula = Formula(forward, setup_context, backward)

    draws = _draws(chain)

    def call(*inputs, seed=None, offset=0):
        """Runs the chain on torch CUDA tensors (positional, in binding order). With
        dropout and no `seed`, the seed comes from torch's generator (module docstring)."""
        state = None
        if seed is None:
            seed = 0
            if draws and inputs and isinstance(inputs[0], torch.Tensor):
                state = rng_state(inputs[0].device)
        if runs_direct(inputs):
            outs = Direct.apply(formula, (seed, offset, state), *inputs)[:n_out]
        else:
            outs = custom(list(inputs), seed, offset, state)[:n_out]
        return outs[0] if n_out == 1 else tuple(outs)

    call.op = custom
    call.compiled = compiled
    _ops[qualified] = call
    return call


def _without_passthrough(backward):
    """(kernel chain or None, {output: input}, {output: output}) for a backward spec:
    outputs that are one of its inputs unchanged (a bias-free Linear's dacc = dy, a
    residual's gradient) are handed back as that tensor instead of being copied by a
    kernel, and an output of the same value and dtype as an earlier one (add+RMSNorm's
    dx and dresidual) as that output's tensor instead of being stored twice; the
    kernel runs what is left, and none runs when nothing is."""
    doc = json.loads(backward.to_json())
    passthrough = {name: o["value"] for name, o in doc["outputs"].items()
                   if o.get("value", name) in doc["inputs"]
                   and doc["inputs"][o["value"]]["dtype"] == o["dtype"]}
    first = {}  # (value, dtype) -> the first output storing it
    aliases = {}
    for name, o in doc["outputs"].items():
        if name in passthrough:
            continue
        key = (o.get("value", name), o["dtype"])
        if key in first:
            aliases[name] = first[key]
        else:
            first[key] = name
    if not passthrough and not aliases:
        return backward, {}, {}
    for name in [*passthrough, *aliases]:
        del doc["outputs"][name]
    if not doc["outputs"]:
        return None, passthrough, aliases
    read = {a for op in doc.get("ops", []) for a in op.get("args", [])}
    read |= {o.get("value", name) for name, o in doc["outputs"].items()}
    doc["inputs"] = {n: i for n, i in doc["inputs"].items() if n in read}
    return Chain.from_json(json.dumps(doc)), passthrough, aliases


def _register_no_grad(qualified, chain_name, why):
    """A chain Chain.grad refuses: a backward through it raises, saying why, where
    PyTorch's fallback would only warn and leave the gradients None."""
    def setup_context(ctx, inputs, output):
        pass

    def backward(ctx, grads):
        raise UserError(f"{chain_name}: a gradient flows into this op, which cannot differentiate: {why}")

    torch.library.register_autograd(qualified, backward, setup_context=setup_context)
    return setup_context, backward


def _register_autograd(qualified, name, chain, g, compiled, target, tile, tune, n_out):
    fwd_names = compiled.input_names  # GEMM operands first, then the chain's inputs
    kernel, passthrough, aliases = _without_passthrough(g.backward)
    if kernel is not None:
        back = kernel.compile(target, tile, tune)
        back_direct = kernel_call(back)
        back_op = _register(f"{name}_backward", back, _classes(kernel), back_direct)
        kernel_names = back.input_names
        grads_out = [o["name"] for o in kernel.bindings(1, 1, 1)["outputs"]]
    else:
        back_op, back_direct, kernel_names, grads_out = None, None, [], []
    back_names = kernel_names + [n for n in passthrough.values() if n not in kernel_names]
    fwd_out_names = [o["name"] for o in g.forward.bindings(1, 1, 1)["outputs"]]
    # The forward's outputs the backward reads: saved tensors and its own outputs.
    keep_outputs = [i for i, o in enumerate(fwd_out_names) if o in back_names]
    out_names = [o["name"] for o in chain.bindings(1, 1, 1)["outputs"]]
    out_index = {f"d{o}": j for j, o in enumerate(out_names)}
    ml = chain.doc.get("mainloop")
    kind = ml.get("kind") if isinstance(ml, dict) else "elementwise"
    # What backward reads: forward inputs by name, then the saved outputs.
    keep_inputs = [n for n in fwd_names if n in back_names or (kind != "elementwise" and n in ("a", "b", "b0", "b1"))]

    def setup_context(ctx, inputs, output):
        tensors, seed, offset, state = inputs
        by_name = dict(zip(fwd_names, tensors))
        ctx.has_state = state is not None
        ctx.save_for_backward(*[by_name[n] for n in keep_inputs], *[output[i] for i in keep_outputs],
                              *([state] if ctx.has_state else []))
        ctx.seed, ctx.offset = seed, offset
        ctx.out_like = [(o.shape, o.dtype, o.device) for o in output[:n_out]]
        ctx.needs = [t.requires_grad for t in tensors]
        # The saved outputs get no gradient: autograd would fill zeros for them.
        ctx.set_materialize_grads(False)

    def backward(ctx, grads):
        saved = ctx.saved_tensors
        # The forward's seed state: the backward regenerates the same masks from it.
        state = saved[-1] if ctx.has_state else None
        if ctx.has_state:
            saved = saved[:-1]
        given = dict(zip(keep_inputs, saved[:len(keep_inputs)]))
        given.update(zip([fwd_out_names[i] for i in keep_outputs], saved[len(keep_inputs):]))
        args = {}
        for n in back_names:
            if n in out_index:
                j = out_index[n]
                gr = grads[j]
                if gr is None:
                    shape, dt, dev = ctx.out_like[j]
                    gr = torch.zeros(shape, dtype=dt, device=dev)
                args[n] = gr.contiguous()
            else:
                args[n] = given[n]
        outs = {o: args[i] for o, i in passthrough.items()}
        if back_op is not None:
            run = back_direct if direct_backward(ctx) else back_op
            outs.update(zip(grads_out, run([args[n] for n in kernel_names], ctx.seed, ctx.offset, state)))
        outs.update({o: outs[i] for o, i in aliases.items()})
        result = []
        for n, need in zip(fwd_names, ctx.needs):
            d = outs.get(f"d{n}")
            if d is None and need and n not in ("a", "b", "b0", "b1"):
                raise UserError(f"{chain.name}: input '{n}' requires grad but is marked not differentiable "
                                "(\"grad\": false)")
            result.append(d)
        if kind != "elementwise":
            a = given["a"]
            accs = [outs.get("dacc")] if kind == "gemm" else [outs.get("dacc0"), outs.get("dacc1")]
            bs = ["b"] if kind == "gemm" else ["b0", "b1"]
            da = None
            for acc, bn in zip(accs, bs):
                if acc is None:
                    continue
                acc = acc.to(a.dtype)
                i = fwd_names.index(bn)
                if ctx.needs[i]:
                    b = given[bn]
                    # In B's own layout: nn.Linear's weight is B column-major, and a
                    # row-major Aᵀ·dacc would be transposed by a strided copy when
                    # autograd hands it to the weight.
                    db = (acc.transpose(-1, -2) @ a).transpose(-1, -2) if b.stride(-2) == 1 and b.stride(-1) != 1 \
                        else a.transpose(-1, -2) @ acc
                    result[i] = _unbatched(db, b).to(b.dtype)
                part = acc @ given[bn].transpose(-1, -2)
                da = part if da is None else da + part
            if ctx.needs[0] and da is not None:
                result[0] = _unbatched(da, a).to(a.dtype)
        # One entry per argument of the op: the list for `inputs`, None for seed, offset and rng_state.
        return (result,) + (None,) * (len(ctx.needs_input_grad) - 1)

    torch.library.register_autograd(qualified, backward, setup_context=setup_context)
    return setup_context, backward


def _unbatched(grad, operand):
    """A batched call's gradient of a GEMM operand: a 2-D operand, shared by every
    batch, gets the sum over the batches; a 3-D one (an expanded one's sum is
    autograd's) its [B, ...] as it is."""
    return grad.sum(0) if grad.dim() == 3 and operand.dim() == 2 else grad


def linear(chain: Chain, target=None, tile=None, tune=None):
    """A GEMM chain as nn.Linear plus its epilogue: `f(x, weight, *inputs)` computes the
    chain on acc = x @ weight.T, with x [..., K] (leading dimensions folded into M and
    given back) and weight in nn.Linear's [N, K] layout. The chain must read B
    column-major ("b_layout": "col"), which is that weight's layout, so nothing is
    copied; a dual GEMM takes two weights (`f(x, w0, w1, *inputs)`)."""
    ml = chain.doc.get("mainloop")
    if not isinstance(ml, dict) or ml.get("kind") not in ("gemm", "dual_gemm"):
        raise UserError(f"{chain.name}: epifuse.torch.linear takes a GEMM chain")
    if ml.get("b_layout", "row") != "col":
        raise UserError(f"{chain.name}: epifuse.torch.linear needs \"b_layout\": \"col\" (nn.Linear's weight is "
                        "[N, K] row-major, which is B column-major)")
    run = op(chain, target, tile, tune)
    weights = 2 if ml["kind"] == "dual_gemm" else 1

    def f(x, *rest, seed=None, offset=0):
        lead = x.shape[:-1]
        a = x.reshape(-1, x.shape[-1])
        ws = [w.t() for w in rest[:weights]]
        out = run(a, *ws, *rest[weights:], seed=seed, offset=offset)
        if isinstance(out, tuple):
            return tuple(o.reshape(*lead, o.shape[-1]) for o in out)
        return out.reshape(*lead, out.shape[-1])

    f.op = run
    return f


def block(lower: Chain, upper: Chain, residual_is_x=False, target=None, tune=None):
    """Two stacked GEMM chains as one differentiable op, y = upper(lower(x)), whose
    backward runs the lower chain's backward in the epilogue of the upper chain's
    dgrad GEMM (Note [The block's backward] in python/epifuse/torch_block.py).

    `lower`: a gemm or dual_gemm chain with B column-major, as layers.linear_chain or
    gated_chain builds (fc1; gate_proj and up_proj); `upper`: a gemm chain with B
    column-major reading lower's output as A (fc2, down_proj), with no dropout.
    `residual_is_x`: upper's full input `residual` is the block's x (nn.MLP's
    x + fc2(...)): it is not passed, and its gradient is added into dx.

    Returns `f(x, *tensors, seed=None, offset=0, fused_dgrad=None)`: x [..., K]
    (leading dimensions folded into M and given back), then the lower weights in
    nn.Linear's layout, lower's epilogue inputs in binding order, the upper weight
    and upper's epilogue inputs (`f.plan.names` lists them). Seeds as `op`'s.
    `fused_dgrad=True` runs the lower backward in the dgrad GEMM's epilogue; False,
    the default (unless EPIFUSE_FUSED_DGRAD=1 when the block is made), runs the dgrad
    as torch.mm and then the lower backward's own kernel, which measured faster (Note
    [Fused dgrad off by default] in torch_block.py); a fused dgrad chain that does not
    compile for a shape and target does the same by itself, in the same op. `f.op` is the registered torch.library
    op (its tensors, seed, offset, rng_state and fused_dgrad; outputs y, h and the
    saved tensors), `f.plan` what it runs; `tune` as Chain.compile's."""
    from .torch_block import make_block
    return make_block(lower, upper, residual_is_x, target, tune)
