"""epifuse.torch.block: two stacked GEMM chains as one torch.library op, so that the
backward of the lower chain's epilogue runs in the epilogue of the upper chain's
dgrad GEMM (docs/gemm-backward.md §7; docs/python.md, "Modules").

    lower = epifuse.layers.linear_chain("bf16", True, "gelu_tanh", 0.1)   # fc1
    upper = epifuse.layers.linear_chain("bf16", True, residual=True)       # fc2, + x
    mlp = epifuse.torch.block(lower, upper, residual_is_x=True)
    y = mlp(x, w1, b1, w2, b2)        # x + fc2(dropout(gelu(fc1(x)))), nn.Linear weights

Note [The block's backward]
Autograd hands each op a materialised dy, so the dgrad GEMM of the upper layer can
carry the lower layer's backward only where one autograd node spans both. Given dy,
the op's backward launches:
1. the upper chain's backward spec, less the outputs that are dy unchanged
   (`_without_passthrough`): for acc + bias + residual, dacc2 and the residual's
   gradient are dy itself and the bias gradient is one column-sum kernel;
2. with fused_dgrad=True (off by default: Note [Fused dgrad off by default]), the
   dgrad GEMM dacc2·W2 whose epilogue is the lower chain's backward spec
   (`Chain.as_gemm_epilogue`, dy := the accumulator): it reads the lower forward's
   saved tensors, draws the forward's dropout masks again from the same seed, offset
   and rng_state, and writes dacc1 (dacc0 and dacc1 for a dual GEMM) and the lower
   bias gradients. W2, nn.Linear's [N2, N1] contiguous weight, is B row-major here:
   nothing is copied. Where that chain does not compile for the shape and target (a
   UserError from the GEMM family), the same op computes the two steps below
   instead, with the same outputs;
3. otherwise (the default) those two steps as separate ops: torch.mm(dacc2, W2),
   then the lower backward spec's kernel;
4. weight gradients daccᵀ·A in nn.Linear's [N, K] layout (torch.mm), so
   AccumulateGrad copies nothing; dx = dacc1·W1 (+ dacc1'·W1' by addmm_ into it),
   with the residual's gradient as addmm's C where the residual is x itself.
The fused dgrad reads dacc2·W2 as the fp32 accumulator, the two-step path rounded to
the chain's dtype first: the two agree within that rounding, not bit for bit.
"""
import hashlib
import json
import logging
import os
import re

import torch

from . import torch as _torch
from ._lib import UserError
from .chain import Chain

__all__ = ["Plan", "make_block", "fused_dgrad_default"]

_log = logging.getLogger("epifuse")
_OPERANDS = ("a", "b", "b0", "b1")


def _mainloop(chain):
    ml = chain.doc.get("mainloop", "elementwise")
    return ml if isinstance(ml, dict) else {"kind": ml}


def _outputs(chain):
    return chain.bindings(1, 1, 1)["outputs"]


def _io(chain):
    """(input names, output names) of a kernel chain in binding order; None for none."""
    if chain is None:
        return None
    b = chain.bindings(1, 1, 1)
    return [i["name"] for i in b["inputs"]], [o["name"] for o in b["outputs"]]


def _grad(chain, role):
    try:
        return chain.grad()
    except UserError as e:
        raise UserError(f"epifuse.torch.block: the {role} chain '{chain.name}' cannot differentiate: {e}") from None


def _listed(out):
    return list(out) if isinstance(out, tuple) else [out]


def fused_dgrad_default():
    """Whether a block op fuses the lower backward into the dgrad GEMM when its call
    does not say: no, unless the environment has EPIFUSE_FUSED_DGRAD=1 when the
    block is made (read then, so that torch.compile traces a constant). Off by
    default: in the MLP blocks' training step the two-step path was faster at every
    shape measured (Note [Fused dgrad off by default])."""
    return os.environ.get("EPIFUSE_FUSED_DGRAD", "0") == "1"


# Note [Fused dgrad off by default]
# The fused dgrad replaces a cuBLAS GEMM plus one elementwise kernel by one GEMM
# whose epilogue reads the saved tensors and writes dacc. It pays only where that
# epilogue hides under the mainloop, and on an H100 it does not yet: an extra [M,N]
# tensor in the wgmma epilogue costs 17-23% of a K = 2048 GEMM (docs/perf/backward.md,
# "GEMM backward"). A whole MLP block's step (tools/perf/mlp_block.py, both paths in
# one process; docs/perf/training.md) ran 1.139x / 1.381x its GEMMs fused against
# 1.112x / 1.330x in two steps (GPT, dropout 0.1), and 1.243x / 1.229x against
# 1.139x / 1.180x (LLaMA); with the cluster-of-two tile that the SwiGLU dgrad now
# takes by default, LLaMA's fused step came within 1% of the two-step one and
# stayed behind. On an H200 (2026-11-28) the GPT step in loops ran 1.079x / 1.181x
# fused against 1.064x / 1.159x in two steps: its dgrad carries dropout, whose staged
# epilogue does not hide either. So the default is the two-step path; fused_dgrad=True
# (or EPIFUSE_FUSED_DGRAD=1) keeps the fused one for measurement.


class Plan:
    """What a block op runs, decided once from its two chains: the compiled forwards
    with their saved tensors, the backward kernels' chains, and the dgrad chain
    (Note [The block's backward]). It registers no torch op: `forward` and
    `backward` take the kernels they launch, so the plan runs on any tensors the
    kernels take.

    The op's tensors, in order: x [M, K]; the lower chain's weights in nn.Linear's
    layout ([N1, K]; two for a dual GEMM); the lower chain's epilogue inputs; the
    upper weight [N2, N1]; the upper chain's epilogue inputs, less `residual` when
    residual_is_x. Its outputs: y, then the lower forward's outputs (h and its saved
    tensors), then the upper forward's saved tensors."""

    def __init__(self, lower, upper, residual_is_x=False, target=None, tune=None):
        lo, up = _mainloop(lower), _mainloop(upper)
        if lo["kind"] not in ("gemm", "dual_gemm") or lo.get("a_layout", "row") != "row" \
                or lo.get("b_layout", "row") != "col":
            raise UserError(f"epifuse.torch.block: the lower chain '{lower.name}' must be a gemm or dual_gemm chain "
                            "with A row-major and B column-major (nn.Linear's weight), as layers.linear_chain and "
                            "gated_chain build")
        if up["kind"] != "gemm" or up.get("a_layout", "row") != "row" or up.get("b_layout", "row") != "col":
            raise UserError(f"epifuse.torch.block: the upper chain '{upper.name}' must be a gemm chain with A "
                            "row-major and B column-major (nn.Linear's weight), as layers.linear_chain builds")
        for chain in (lower, upper):
            if len(_outputs(chain)) != 1:
                raise UserError(f"epifuse.torch.block: chain '{chain.name}' must have one output, "
                                f"it has {len(_outputs(chain))}")
        if _torch._draws(upper):
            raise UserError(f"epifuse.torch.block: the upper chain '{upper.name}' has a dropout; only the lower "
                            "chain may draw (both would read the one seed)")
        self.lower_out, self.upper_out = _outputs(lower)[0], _outputs(upper)[0]
        if self.lower_out["dtype"] != up.get("a", "f16"):
            raise UserError(f"epifuse.torch.block: the lower chain writes {self.lower_out['dtype']}, the upper chain "
                            f"reads A as {up.get('a', 'f16')}")
        self.draws = _torch._draws(lower)
        self.residual_is_x = bool(residual_is_x)
        self.weights = ["b"] if lo["kind"] == "gemm" else ["b0", "b1"]
        gl, gu = _grad(lower, "lower"), _grad(upper, "upper")
        self.lower_forward = gl.forward.compile(target, None, tune)
        self.upper_forward = gu.forward.compile(target, None, tune)
        self.lower_inputs = [n for n in self.lower_forward.input_names if n not in _OPERANDS]
        self.upper_inputs = [n for n in self.upper_forward.input_names if n not in _OPERANDS]
        if self.residual_is_x:
            decl = upper.doc.get("inputs", {}).get("residual")
            if not isinstance(decl, dict) or decl.get("broadcast", "full") != "full":
                raise UserError(f"epifuse.torch.block: residual_is_x needs a full input 'residual' in the upper "
                                f"chain '{upper.name}'")
        self.names = ([("lower", "a")] + [("lower", w) for w in self.weights]
                      + [("lower", n) for n in self.lower_inputs] + [("upper", "b")]
                      + [("upper", n) for n in self.upper_inputs if not self._is_x(("upper", n))])
        lower_outs = _outputs(gl.forward)
        upper_outs = _outputs(gu.forward)
        self.outputs = ([("upper", upper_outs[0]["name"])] + [("lower", o["name"]) for o in lower_outs]
                        + [("upper", o["name"]) for o in upper_outs[1:]])
        self._out_like = ([(upper_outs[0], "upper")] + [(o, "lower") for o in lower_outs]
                          + [(o, "upper") for o in upper_outs[1:]])

        # The backward's kernels (Note [The block's backward]).
        self.upper_kernel, up_inputs, up_aliases = _torch._without_passthrough(gu.backward)
        self.lower_kernel, lo_inputs, lo_aliases = _torch._without_passthrough(gl.backward)
        self.upper_passthrough, self.lower_passthrough = (up_inputs, up_aliases), (lo_inputs, lo_aliases)
        self.lower_backward = gl.backward
        self.dgrad, self.dgrad_refused = self._dgrad_chain(gl.backward, gu.backward, lo, up)
        # Binding orders, asked once here rather than at every backward.
        self._upper_io, self._lower_io, self._dgrad_io = _io(self.upper_kernel), _io(self.lower_kernel), _io(self.dgrad)
        self._index = {k: i for i, k in enumerate(self.names)}
        self.target, self.tune = target, tune
        # The forward outputs the backward reads: h (dW2's operand) and the saved
        # tensors; y only where the upper backward reads it.
        reads = {"lower": set(gl.backward.doc.get("inputs", {})), "upper": set(gu.backward.doc.get("inputs", {}))}
        self.kept = [i for i, (side, n) in enumerate(self.outputs)
                     if (side, n) == ("lower", self.lower_out["name"]) or n in reads[side]]
        self._compiled = {}  # kernel role -> its Compiled
        self._refused = {}  # (device, M, N, K) -> why the dgrad chain did not compile there
        self._compiles = set()  # (device, M, N, K) where it did

    # ---- what is decided once
    def _is_x(self, key):
        return self.residual_is_x and key == ("upper", "residual")

    def _dgrad_chain(self, lower_backward, upper_backward, lo, up):
        """(the dgrad chain, None) or (None, why not): lower's backward spec in the
        epilogue of dacc2·W2, where W2 [N2, N1] is B row-major."""
        if self.lower_kernel is None:
            return None, "the lower backward passes dy through unchanged: torch.mm is the whole dgrad"
        dacc = next(o for o in _outputs(upper_backward) if o["name"] == "dacc")
        ml = {"kind": "gemm", "a": dacc["dtype"], "b": up.get("b", "f16"), "a_layout": "row", "b_layout": "row"}
        if lo.get("math") == "tf32":
            ml["math"] = "tf32"
        try:
            return lower_backward.as_gemm_epilogue(f"d{self.lower_out['name']}", ml), None
        except UserError as e:
            return None, str(e)

    def compiled(self, role):
        """The Compiled of a backward kernel: "upper_backward", "lower_backward" (the
        lower backward less its pass-through outputs), "dgrad", or "lower_backward_full"
        (the whole lower backward, the dgrad op's two-step form)."""
        c = self._compiled.get(role)
        if c is None:
            chain = {"upper_backward": self.upper_kernel, "lower_backward": self.lower_kernel, "dgrad": self.dgrad,
                     "lower_backward_full": self.lower_backward}[role]
            c = self._compiled[role] = chain.compile(self.target, None, self.tune)
        return c

    @staticmethod
    def classes(chain):
        """Each output's broadcast ("full", "row", "col"), in binding order."""
        return [o.get("broadcast", "full") for o in _outputs(chain)]

    # ---- the forward
    def forward(self, tensors, seed, offset, rng_state):
        """The op's outputs: the lower forward, then the upper forward on its output h."""
        given = dict(zip(self.names, tensors))
        x = tensors[0]
        lower = _listed(self.lower_forward(x, *[given["lower", w].t() for w in self.weights],
                                           *[given["lower", n] for n in self.lower_inputs],
                                           seed=seed, offset=offset, rng_state=rng_state))
        upper = _listed(self.upper_forward(lower[0], given["upper", "b"].t(),
                                           *[x if self._is_x(("upper", n)) else given["upper", n]
                                             for n in self.upper_inputs]))  # it draws nothing
        return [upper[0]] + lower + upper[1:]

    def fake(self, tensors):
        """The outputs' shapes and dtypes without running anything (torch.empty-like)."""
        x = tensors[0]
        given = dict(zip(self.names, tensors))
        n = {"lower": given["lower", self.weights[0]].shape[0], "upper": given["upper", "b"].shape[0]}
        dtypes = _torch._DTYPES
        out = []
        for o, side in self._out_like:
            shape = {"full": (x.shape[0], n[side]), "row": (n[side],), "col": (x.shape[0],)}[o["broadcast"]]
            out.append(x.new_empty(shape, dtype=dtypes[o["dtype"]]))
        return out

    # ---- the dgrad, with its two-step form
    def run_dgrad(self, *inputs, seed=0, offset=0, rng_state=None):
        """The dgrad chain on (dacc2, W2, its epilogue inputs); where it does not compile
        for this shape and target (a UserError from the GEMM family, asked once per
        shape and device, before any launch), torch.mm then the whole lower backward,
        which give the same outputs in the same order."""
        a, b = inputs[0], inputs[1]
        fused = self.compiled("dgrad")
        key = (str(a.device), a.shape[0], b.shape[-1], a.shape[-1])
        if key not in self._refused and key not in self._compiles:
            try:
                fused.kernel(key[1:], a.device.index or 0)
                self._compiles.add(key)
            except UserError as e:
                self._refused[key] = str(e)
                _log.info("%s: the fused dgrad does not compile for M=%d N=%d K=%d on %s (%s); running torch.mm "
                          "and the backward kernel instead", self.dgrad.name, key[1], key[2], key[3], key[0], e)
        if key not in self._refused:
            return fused(*inputs, seed=seed, offset=offset, rng_state=rng_state)
        rest = dict(zip(fused.input_names[2:], inputs[2:]))
        rest[f"d{self.lower_out['name']}"] = torch.mm(a, b)
        full = self.compiled("lower_backward_full")
        return full(*[rest[n] for n in full.input_names], seed=seed, offset=offset, rng_state=rng_state)

    # ---- the backward
    def backward(self, kernels, tensors, kept, dy, seed, offset, rng_state, fused, needs):
        """The gradients of the op's tensors (None where `needs` is False) for the
        upstream gradient `dy` of y. `kernels`: {"upper_backward", "lower_backward",
        "dgrad"} -> callables (list of tensors, seed, offset, rng_state) -> list of
        tensors, as the registered ops are called; `kept`: the forward outputs numbered
        in `self.kept`, in that order."""
        given = dict(zip(self.names, tensors))
        outs = dict(zip([self.outputs[i] for i in self.kept], kept))
        x = tensors[0]
        dy = dy.contiguous()

        def value(side, name, upstream):
            out = self.lower_out if side == "lower" else self.upper_out
            if name == f"d{out['name']}":
                return upstream
            if (side, name) in outs:
                return outs[side, name]
            return x if self._is_x((side, name)) else given[side, name]

        # 1. The upper backward: dacc2, its bias's and residual's gradients.
        up = self._run(kernels.get("upper_backward"), self._upper_io, self.upper_passthrough,
                       lambda n: value("upper", n, dy), seed, offset, None)
        dacc2 = up["dacc"]
        w2 = given["upper", "b"]
        # 2. dacc1 (dacc0, dacc1) and the lower bias gradients: one dgrad GEMM, or two
        # steps; none when nothing below the upper layer takes a gradient.
        if not any(need for (side, _), need in zip(self.names, needs) if side == "lower"):
            lo = {}
        elif fused and self.dgrad is not None:
            names = self.compiled("dgrad").input_names[2:]
            lo = dict(zip(self._dgrad_io[1],
                          kernels["dgrad"]([dacc2, w2] + [value("lower", n, None) for n in names],
                                           seed, offset, rng_state)))
        else:
            dh = torch.mm(dacc2, w2)
            lo = self._run(kernels.get("lower_backward"), self._lower_io, self.lower_passthrough,
                           lambda n: value("lower", n, dh), seed, offset, rng_state)
        daccs = ["dacc"] if len(self.weights) == 1 else ["dacc0", "dacc1"]
        result = [None] * len(tensors)
        index = self._index
        # 3. Weight gradients in nn.Linear's [N, K] layout: daccᵀ·A.
        if needs[index["upper", "b"]]:
            result[index["upper", "b"]] = torch.mm(dacc2.t(), outs["lower", self.lower_out["name"]])
        for d, w in zip(daccs, self.weights):
            if needs[index["lower", w]]:
                result[index["lower", w]] = torch.mm(lo[d].t(), x)
        # 4. dx = dacc1·W1 (+ dacc1'·W1' added in place), the residual's gradient as
        # the first addmm's C where the residual is x.
        if needs[0]:
            residual = up.get("dresidual") if self.residual_is_x else None
            dx = None
            for d, w in zip(daccs, self.weights):
                if dx is not None:
                    dx.addmm_(lo[d], given["lower", w])
                elif residual is not None:
                    dx = torch.addmm(residual, lo[d], given["lower", w])
                else:
                    dx = torch.mm(lo[d], given["lower", w])
            result[0] = dx
        # The epilogue inputs' gradients (biases, a residual that is not x).
        for side, grads in (("lower", lo), ("upper", up)):
            for n in self.lower_inputs if side == "lower" else self.upper_inputs:
                if self._is_x((side, n)) or not needs[index[side, n]]:
                    continue
                if f"d{n}" not in grads:
                    raise UserError(f"epifuse.torch.block: input '{n}' of the {side} chain requires grad but is "
                                    "marked not differentiable (\"grad\": false)")
                result[index[side, n]] = grads[f"d{n}"]
        return result

    @staticmethod
    def _run(kernel_op, io, passthrough, value, seed, offset, rng_state):
        """{output: tensor} of a backward spec: its kernel's outputs (when it has one;
        `io` its (inputs, outputs) in binding order), the outputs that are one of its
        inputs unchanged and those that repeat another output (`passthrough`: the two
        maps of _without_passthrough)."""
        inputs_of, aliases = passthrough
        out = {o: value(i) for o, i in inputs_of.items()}
        if io is not None:
            inputs, outputs = io
            out.update(zip(outputs, kernel_op([value(n) for n in inputs], seed, offset, rng_state)))
        out.update({o: out[i] for o, i in aliases.items()})
        return out


def _name(lower, upper, residual_is_x):
    text = lower.to_json() + upper.to_json() + json.dumps(bool(residual_is_x))
    return (re.sub(r"[^0-9A-Za-z_]", "_", f"block_{lower.name}_{upper.name}") + "_"
            + hashlib.sha1(text.encode()).hexdigest()[:12])


def make_block(lower: Chain, upper: Chain, residual_is_x=False, target=None, tune=None):
    """epifuse.torch.block's body (its docstring says what it does)."""
    name = _name(lower, upper, residual_is_x)
    qualified = f"epifuse::{name}"
    if qualified in _torch._ops:
        return _torch._ops[qualified]
    plan = Plan(lower, upper, residual_is_x, target, tune)
    kernels, direct = {}, {}  # the backward's kernels as ops, and as plain functions
    for role, suffix, chain, run in (("upper_backward", "upper", plan.upper_kernel, None),
                                     ("lower_backward", "lower", plan.lower_kernel, None),
                                     ("dgrad", "dgrad", plan.dgrad, plan.run_dgrad)):
        if chain is None:
            continue
        compiled = plan.compiled(role)
        direct[role] = _torch.kernel_call(compiled, run)
        kernels[role] = _torch._register(f"{name}_{suffix}", compiled, plan.classes(chain), direct[role])
    custom, formula = _register_block(name, plan, kernels, direct)
    chains = {"lower": lower, "upper": upper}
    # Full [..., N] epilogue inputs (a residual) fold into [M, N] as x does.
    full = [i for i, (side, n) in enumerate(plan.names) if n not in _OPERANDS and _full(chains[side], n)]
    expected = ", ".join(f"{side} {n}" for side, n in plan.names[1:])
    fused_default = fused_dgrad_default()

    def call(x, *rest, seed=None, offset=0, fused_dgrad=None):
        """Runs the block on x [..., K] (leading dimensions folded into M and given
        back) and the tensors in the op's order (Plan's docstring)."""
        if len(rest) != len(plan.names) - 1:
            raise UserError(f"epifuse.torch.block: x and {len(plan.names) - 1} tensors ({expected}), "
                            f"got {len(rest)}")
        lead = x.shape[:-1]
        tensors = [x.reshape(-1, x.shape[-1])] + list(rest)
        for i in full:
            tensors[i] = tensors[i].reshape(-1, tensors[i].shape[-1])
        state = None
        if seed is None:
            seed = 0
            if plan.draws:
                state = _torch.rng_state(x.device)
        fused = fused_default if fused_dgrad is None else bool(fused_dgrad)
        if _torch.runs_direct(tensors):
            y = _torch.Direct.apply(formula, (seed, offset, state, fused), *tensors)[0]
        else:
            y = custom(tensors, seed, offset, state, fused)[0]
        return y.reshape(*lead, y.shape[-1])

    call.op = custom
    call.plan = plan
    call.kernels = kernels  # the backward's ops: "upper_backward", "lower_backward", "dgrad"
    _torch._ops[qualified] = call
    return call


def _full(chain, name):
    decl = chain.doc.get("inputs", {}).get(name)
    return isinstance(decl, dict) and decl.get("broadcast", "full") == "full"


def _register_block(name, plan, kernels, direct):
    """Defines `epifuse::<name>` (the forward) with its fake and its autograd formula
    (Note [The block's backward]); returns its OpOverload and its torch.Formula.
    `kernels`, `direct`: the backward's kernels as ops, and as plain functions for a
    backward whose forward ran without the dispatcher."""
    lib = _torch._library()
    lib.define(f"{name}(Tensor[] inputs, int seed, int offset, Tensor? rng_state, bool fused_dgrad) -> Tensor[]")

    def impl(inputs, seed, offset, rng_state, fused_dgrad):
        return plan.forward(inputs, seed, offset, rng_state)

    def fake(inputs, seed, offset, rng_state, fused_dgrad):
        return plan.fake(inputs)

    lib.impl(name, impl, "CUDA")
    torch.library.register_fake(f"epifuse::{name}")(fake)

    def setup_context(ctx, inputs, output):
        tensors, seed, offset, state, fused = inputs
        ctx.has_state = state is not None
        ctx.n_inputs = len(tensors)
        ctx.save_for_backward(*tensors, *[output[i] for i in plan.kept], *([state] if ctx.has_state else []))
        ctx.seed, ctx.offset, ctx.fused = seed, offset, fused
        ctx.needs = [t.requires_grad for t in tensors]
        # Only y's gradient is read: autograd would fill zeros for h and the saved tensors.
        ctx.set_materialize_grads(False)

    def backward(ctx, grads):
        saved = list(ctx.saved_tensors)
        state = saved.pop() if ctx.has_state else None
        tensors, kept = saved[:ctx.n_inputs], saved[ctx.n_inputs:]
        if grads[0] is None:
            result = [None] * ctx.n_inputs
        else:
            result = plan.backward(direct if _torch.direct_backward(ctx) else kernels, tensors, kept, grads[0],
                                   ctx.seed, ctx.offset, state, ctx.fused, ctx.needs)
        # One entry per argument of the op: the list for `inputs`, None for the rest.
        return (result,) + (None,) * (len(ctx.needs_input_grad) - 1)

    torch.library.register_autograd(f"epifuse::{name}", backward, setup_context=setup_context)
    return getattr(torch.ops.epifuse, name).default, _torch.Formula(impl, setup_context, backward)
