"""Drop-in torch modules whose epilogues run as epifuse chains (docs/python.md, "Modules").

    import epifuse.nn
    fc = epifuse.nn.Linear(1024, 4096, activation="gelu_tanh", dropout=0.1).cuda()
    y = fc(x)                                    # x @ weight.T + bias -> GELU -> dropout, one kernel
    model = epifuse.nn.swap(model)               # nn.Linear (+ activation), LayerNorm, RMSNorm replaced

Each module keeps the parameters of its PyTorch counterpart (names, shapes, init), so
`load_state_dict` from the torch module works, and builds its chain with the builder
for the dtype it meets. The op (`epifuse.torch.op` or `epifuse.torch.linear`, which
differentiate through `Chain.grad()`) is made on the first forward of each
configuration and shared by every module of that configuration. Dropout runs only in
training mode with p > 0; otherwise the chain has no dropout op at all. Its seed comes
from torch's generator of the input's device, read on the device (epifuse.torch), so
`torch.manual_seed` makes a run repeatable, torch.compile needs no graph break and a
captured CUDA graph draws fresh masks at each replay.
"""
import threading

import torch
from torch import nn

from . import torch as _ops
from ._lib import UserError
from .layers import check_activation as _activation, check_p as _check_p
from .layers import gated_chain, linear_chain, norm_chain, softmax_chain

__all__ = ["Linear", "MLP", "GatedMLP", "RMSNorm", "LayerNorm", "ScaledMaskedSoftmaxDropout", "swap",
           "linear_chain", "gated_chain", "norm_chain", "softmax_chain"]

_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}

# One op per configuration for the whole process: (kind, dtypes, flags) -> callable.
_made = {}
_made_lock = threading.Lock()


def _op(key, build, kind="op"):
    """The op of configuration `key`, made once from what `build()` gives: a chain
    (kind "op" or "linear"), or (lower, upper, residual_is_x) for kind "block"."""
    f = _made.get(key)
    if f is None:
        with _made_lock:
            f = _made.get(key)
            if f is None:
                if not hasattr(torch.library, "register_autograd"):
                    raise RuntimeError(f"epifuse.nn needs torch.library.register_autograd (torch 2.4 or newer); "
                                       f"this is torch {torch.__version__}")
                made = build()
                f = _made[key] = (_ops.block(*made) if kind == "block" else
                                  _ops.linear(made) if kind == "linear" else _ops.op(made))
    return f


def _dtype(t, what):
    """The chain dtype of tensor `t`; UserError naming `what` for any other."""
    try:
        return _DTYPES[t.dtype]
    except KeyError:
        raise UserError(f"epifuse.nn: {what} is {t.dtype}; epifuse runs float32, float16 and bfloat16") from None


def _autocast_dtype(device):
    """The dtype autocast runs a matmul in on `device`, or None outside autocast."""
    kind = device.type
    try:
        return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None
    except (TypeError, AttributeError):  # torch before 2.4: one function per device type
        if kind == "cpu":
            return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None
        return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None


def _tf32(dtype):
    return dtype == "f32" and torch.backends.cuda.matmul.allow_tf32


# ---- modules
class Linear(nn.Module):
    """nn.Linear with its epilogue fused: y = (x @ weight.T + bias) → activation → dropout
    → + residual, one GEMM kernel (`epifuse.torch.linear`).

    Parameters are nn.Linear's: `weight` [out_features, in_features], `bias`
    [out_features] (or None), initialised by nn.Linear's `reset_parameters`.
    activation: None, "relu", "gelu_tanh" (GELU, approximate="tanh"), "gelu" (erf) or
    "silu". dropout: p, applied in training mode only. residual=True: forward takes
    the tensor to add ([..., out_features]). f32 multiplies on the tensor cores as tf32
    exactly when torch.backends.cuda.matmul.allow_tf32 says so, as nn.Linear does; under
    autocast, x, weight, bias and residual are cast to autocast's dtype first.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation=None,
                 dropout: float = 0.0, residual: bool = False, device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty((out_features, in_features), **factory))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features, **factory))
        else:
            self.register_parameter("bias", None)
        self.activation = _activation(activation)
        self.p = _check_p(dropout)
        self.residual = bool(residual)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """nn.Linear's init: weight Kaiming-uniform (a=√5), bias U(−1/√in, 1/√in)."""
        nn.Linear.reset_parameters(self)

    def forward(self, x: torch.Tensor, residual: torch.Tensor = None) -> torch.Tensor:
        """y = dropout(activation(x @ weight.T + bias)) + residual, of x's shape with the
        last dimension out_features."""
        if self.residual != (residual is not None):
            raise UserError("epifuse.nn.Linear: " + ("built with residual=True: pass forward(x, residual)"
                                                      if self.residual else "built without residual: "
                                                      "forward takes no residual"))
        w, b = self.weight, self.bias
        cast = _autocast_dtype(x.device)
        if cast is not None:
            x, w = x.to(cast), w.to(cast)
            b = None if b is None else b.to(cast)
            residual = None if residual is None else residual.to(cast)
        dt = _dtype(w, "weight")
        w = w.contiguous()  # read column-major: the transpose of a contiguous [out, in]
        drop = self.training and self.p > 0
        key = ("linear", dt, b is not None, self.activation, self.p if drop else 0.0, self.residual, _tf32(dt))
        f = _op(key, lambda: linear_chain(dt, b is not None, self.activation, key[4], self.residual, key[6]),
                "linear")
        args = [x.contiguous(), w] + ([b] if b is not None else [])
        if residual is not None:
            if residual.shape != x.shape[:-1] + (self.out_features,):
                raise UserError(f"epifuse.nn.Linear: residual has shape {list(residual.shape)}, the output "
                                f"{list(x.shape[:-1]) + [self.out_features]}")
            residual = residual.reshape(-1, self.out_features).contiguous()
            args.append(residual)
        return f(*args)  # dropout's seed: torch's generator, read on the device

    def extra_repr(self) -> str:
        """in_features, out_features, bias, and the epilogue's activation, dropout and residual."""
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"activation={self.activation!r}, dropout={self.p}, residual={self.residual}")


def _cast(cast, *tensors):
    """The tensors in autocast's dtype `cast` (None stays None); as they are outside autocast."""
    if cast is None:
        return tensors
    return tuple(None if t is None else t.to(cast) for t in tensors)


class MLP(nn.Module):
    """The transformer MLP with its residual: y = residual + fc2(dropout(act(fc1(x)))),
    the residual x itself unless forward is given another (a pre-norm block's stream:
    forward(norm(x), x)).

    One `epifuse.torch.block` op: fc1 (hidden → ffn) runs bias, activation and
    dropout in its GEMM's epilogue, fc2 (ffn → hidden) bias and the residual add in
    its own. Parameters fc1.weight, fc1.bias,
    fc2.weight, fc2.bias as two nn.Linear. fused_dgrad=True runs fc1's epilogue
    backward (dropout, act', the bias gradient) in the epilogue of fc2's dgrad GEMM;
    False (the default, None: EPIFUSE_FUSED_DGRAD=1 turns it on) runs that dgrad as
    torch.mm and then one kernel, which measured faster (docs/perf/training.md).
    """

    def __init__(self, hidden: int, ffn: int, activation="gelu_tanh", dropout: float = 0.0, bias: bool = True,
                 device=None, dtype=None, fused_dgrad=None):
        super().__init__()
        self.fc1 = Linear(hidden, ffn, bias, activation, dropout, device=device, dtype=dtype)
        self.fc2 = Linear(ffn, hidden, bias, residual=True, device=device, dtype=dtype)
        self.fused_dgrad = fused_dgrad

    def forward(self, x: torch.Tensor, residual: torch.Tensor = None) -> torch.Tensor:
        """residual + fc2(dropout(act(fc1(x)))), residual x when not given: two GEMM
        kernels forward, one op."""
        fc1, fc2 = self.fc1, self.fc2
        residual_is_x = residual is None or residual is x
        cast = _autocast_dtype(x.device)
        x, w1, b1, w2, b2 = _cast(cast, x, fc1.weight, fc1.bias, fc2.weight, fc2.bias)
        if residual_is_x:
            residual = x
        else:
            if residual.shape != x.shape[:-1] + (fc2.out_features,):
                raise UserError(f"epifuse.nn.MLP: residual has shape {list(residual.shape)}, the output "
                                f"{list(x.shape[:-1]) + [fc2.out_features]}")
            (residual,) = _cast(cast, residual)
        dt = _dtype(w1, "fc1.weight")
        if _dtype(w2, "fc2.weight") != dt or (self.training and fc2.p > 0):
            return fc2(fc1(x), residual)  # what one block cannot run: a Linear each
        p = fc1.p if self.training and fc1.p > 0 else 0.0
        key = ("mlp", dt, b1 is not None, b2 is not None, fc1.activation, p, fc2.activation, _tf32(dt), residual_is_x)
        f = _op(key, lambda: (linear_chain(dt, b1 is not None, fc1.activation, p, False, key[7]),
                              linear_chain(dt, b2 is not None, fc2.activation, 0.0, True, key[7]), residual_is_x),
                "block")
        args = [x.contiguous(), w1.contiguous()] + ([b1] if b1 is not None else []) + [w2.contiguous()]
        args += ([b2] if b2 is not None else []) + ([] if residual_is_x else [residual.contiguous()])
        return f(*args, fused_dgrad=self.fused_dgrad)


class GatedMLP(nn.Module):
    """The gated MLP of LLaMA-style models (SwiGLU with "silu", GEGLU with "gelu_tanh"):
    y = down_proj(act(gate_proj(x)) · up_proj(x)) [+ residual].

    One `epifuse.torch.block` op: gate_proj and up_proj run as one dual GEMM (A read
    once, both products in one epilogue), down_proj as a GEMM whose epilogue adds the
    bias and residual; with fused_dgrad=True the backward runs the gate's backward in
    the epilogue of down_proj's dgrad GEMM. Parameters gate_proj.weight, up_proj.weight [ffn, hidden]
    and down_proj.weight [hidden, ffn] as LLaMA's MLP names them (and their biases
    with bias=True). residual=True adds forward's residual in down_proj's epilogue
    (forward(x, x), the residual being x itself, adds its gradient into dx's GEMM).
    fused_dgrad as `MLP`'s.
    """

    def __init__(self, hidden: int, ffn: int, activation="silu", bias: bool = False, residual: bool = False,
                 device=None, dtype=None, fused_dgrad=None):
        super().__init__()
        self.activation = _activation(activation)
        self.gate_proj = Linear(hidden, ffn, bias, device=device, dtype=dtype)
        self.up_proj = Linear(hidden, ffn, bias, device=device, dtype=dtype)
        self.down_proj = Linear(ffn, hidden, bias, residual=residual, device=device, dtype=dtype)
        self.fused_dgrad = fused_dgrad

    def forward(self, x: torch.Tensor, residual: torch.Tensor = None) -> torch.Tensor:
        """down_proj(act(x @ gate_proj.weight.T) · (x @ up_proj.weight.T)) [+ residual]: two GEMM
        kernels forward, one op."""
        down = self.down_proj
        if down.residual != (residual is not None):
            raise UserError("epifuse.nn.GatedMLP: " + ("built with residual=True: pass forward(x, residual)"
                                                       if down.residual else "built without residual: "
                                                       "forward takes no residual"))
        residual_is_x = residual is x
        bias = self.gate_proj.bias is not None
        cast = _autocast_dtype(x.device)
        x, wg, wu, bg, bu, wd, bd = _cast(cast, x, self.gate_proj.weight, self.up_proj.weight, self.gate_proj.bias,
                                          self.up_proj.bias, down.weight, down.bias)
        if not residual_is_x:
            (residual,) = _cast(cast, residual)
        dt = _dtype(wg, "gate_proj.weight")
        if (_dtype(wu, "up_proj.weight"), _dtype(wd, "down_proj.weight")) != (dt, dt) \
                or (bias and bu is None) or (self.training and down.p > 0):
            return self._per_layer(x, residual)  # what one block cannot run
        if residual is not None and not residual_is_x:
            if residual.shape != x.shape[:-1] + (down.out_features,):
                raise UserError(f"epifuse.nn.GatedMLP: residual has shape {list(residual.shape)}, the output "
                                f"{list(x.shape[:-1]) + [down.out_features]}")
            residual = residual.contiguous()
        key = ("gated_mlp", dt, self.activation, bias, bd is not None, down.activation, residual is not None,
               residual_is_x, _tf32(dt))
        f = _op(key, lambda: (gated_chain(dt, self.activation, bias, key[8]),
                              linear_chain(dt, bd is not None, down.activation, 0.0, residual is not None, key[8]),
                              residual_is_x), "block")
        args = [x.contiguous(), wg.contiguous(), wu.contiguous()] + ([bg, bu] if bias else []) + [wd.contiguous()]
        args += ([bd] if bd is not None else []) + ([residual] if residual is not None and not residual_is_x else [])
        return f(*args, fused_dgrad=self.fused_dgrad)

    def _per_layer(self, x, residual):
        """The dual GEMM and down_proj as two ops (weights of other dtypes, down_proj's dropout)."""
        wg, wu = self.gate_proj.weight, self.up_proj.weight
        bg, bu = self.gate_proj.bias, self.up_proj.bias
        cast = _autocast_dtype(x.device)
        if cast is not None:
            x, wg, wu = x.to(cast), wg.to(cast), wu.to(cast)
            bg, bu = (None, None) if bg is None else (bg.to(cast), bu.to(cast))
        dt = _dtype(wg, "gate_proj.weight")
        wg, wu = wg.contiguous(), wu.contiguous()
        bias = bg is not None
        key = ("gated", dt, self.activation, bias, _tf32(dt))
        f = _op(key, lambda: gated_chain(dt, self.activation, bias, key[4]), "linear")
        h = f(x.contiguous(), wg, wu, *([bg, bu] if bias else []))
        return self.down_proj(h, residual)


class _Norm(nn.Module):
    """What RMSNorm and LayerNorm share: the residual contract and the op per dtype."""
    _kind = None

    def forward(self, x: torch.Tensor, residual: torch.Tensor = None):
        """norm(x) · weight + bias; with residual=True, (norm(x + residual) · weight + bias, x + residual)."""
        if residual is not None and not self.residual:
            raise UserError(f"epifuse.nn.{type(self).__name__}: built without residual: forward takes no residual")
        if x.shape[-1:] != self.normalized_shape:
            raise UserError(f"epifuse.nn.{type(self).__name__}: x has shape {list(x.shape)}, the norm is over "
                            f"the last dimension of {self.normalized_shape[0]}")
        w, b = self.weight, getattr(self, "bias", None)
        dt = _dtype(x, "x")
        wd = None if w is None else _dtype(w, "weight")
        bd = None if b is None else _dtype(b, "bias")
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        with_res = residual is not None
        key = (self._kind, dt, wd, bd, float(eps), with_res)
        f = _op(key, lambda: norm_chain(self._kind, dt, wd, bd, eps, with_res))
        args = [x.contiguous()]
        if with_res:
            if residual.shape != x.shape:
                raise UserError(f"epifuse.nn.{type(self).__name__}: residual has shape {list(residual.shape)}, "
                                f"x {list(x.shape)}")
            args.append(residual.to(x.dtype).contiguous())
        args += [t for t in (w, b) if t is not None]
        out = f(*args)
        return (out, x) if self.residual and not with_res else out


class RMSNorm(_Norm):
    """RMSNorm over the last dimension: y = x · rsqrt(mean(x²) + eps) · weight, in fp32,
    stored in x's dtype (one row kernel, `weight` ones-initialised as torch.nn.RMSNorm's).

    eps=None takes torch.finfo(x.dtype).eps as torch.nn.RMSNorm does. residual=True
    fuses the residual add of a pre-norm block: forward(x, residual) returns
    (norm(x + residual), x + residual), the second being the new residual stream
    (forward(x) alone returns (norm(x), x)).
    """
    _kind = "rms"

    def __init__(self, dim: int, eps: float = 1e-6, residual: bool = False, elementwise_affine: bool = True,
                 device=None, dtype=None):
        super().__init__()
        self.normalized_shape = (dim,) if isinstance(dim, int) else tuple(dim)
        if len(self.normalized_shape) != 1:
            raise UserError(f"epifuse.nn.RMSNorm: normalises the last dimension only, got {self.normalized_shape}")
        self.eps, self.residual, self.elementwise_affine = eps, bool(residual), elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """weight = 1."""
        if self.weight is not None:
            nn.init.ones_(self.weight)

    def extra_repr(self) -> str:
        """dim, eps, elementwise_affine, residual."""
        return (f"{self.normalized_shape[0]}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"residual={self.residual}")


class LayerNorm(_Norm):
    """LayerNorm over the last dimension: y = (x − mean) · rsqrt(var + eps) · weight + bias
    (biased variance), in fp32, stored in x's dtype; `weight` ones and `bias` zeros as
    nn.LayerNorm's (bias=False or elementwise_affine=False leave them out).

    residual=True: forward(x, residual) returns (norm(x + residual), x + residual), as
    `RMSNorm` does.
    """
    _kind = "layer"

    def __init__(self, dim: int, eps: float = 1e-5, elementwise_affine: bool = True, residual: bool = False,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = (dim,) if isinstance(dim, int) else tuple(dim)
        if len(self.normalized_shape) != 1:
            raise UserError(f"epifuse.nn.LayerNorm: normalises the last dimension only, got {self.normalized_shape}")
        self.eps, self.residual, self.elementwise_affine = eps, bool(residual), elementwise_affine
        factory = {"device": device, "dtype": dtype}
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(self.normalized_shape, **factory))
        else:
            self.register_parameter("weight", None)
        if elementwise_affine and bias:
            self.bias = nn.Parameter(torch.empty(self.normalized_shape, **factory))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """weight = 1, bias = 0."""
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def extra_repr(self) -> str:
        """dim, eps, elementwise_affine, residual."""
        return (f"{self.normalized_shape[0]}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"residual={self.residual}")


class ScaledMaskedSoftmaxDropout(nn.Module):
    """Attention probabilities in one row kernel: y = dropout(softmax(scale·x + mask), p)
    over the last dimension of the scores x. The mask is additive (0 to keep, −inf to
    hide) and not differentiated; a bool mask (True = take part, as
    scaled_dot_product_attention's) becomes 0/−inf. A mask that broadcasts to x is
    expanded to x's shape. Dropout runs in training mode only.
    """

    def __init__(self, scale: float, p: float = 0.0):
        super().__init__()
        self.scale, self.p = float(scale), _check_p(p)

    def forward(self, x: torch.Tensor, mask: torch.Tensor = None) -> torch.Tensor:
        """dropout(softmax(scale·x + mask)), of x's shape and dtype."""
        dt = _dtype(x, "x")
        drop = self.training and self.p > 0
        key = ("softmax", dt, self.scale, self.p if drop else 0.0, mask is not None)
        f = _op(key, lambda: softmax_chain(dt, self.scale, key[3], mask is not None))
        args = [x.contiguous()]
        if mask is not None:
            if mask.dtype == torch.bool:
                mask = torch.zeros((), dtype=x.dtype, device=x.device).masked_fill(~mask, float("-inf"))
            args.append(mask.to(x.dtype).expand_as(x).contiguous())
        return f(*args)  # dropout's seed: torch's generator, read on the device

    def extra_repr(self) -> str:
        """scale and p."""
        return f"scale={self.scale}, p={self.p}"


# ---- swap
_FUSABLE = {nn.ReLU: lambda m: "relu", nn.SiLU: lambda m: "silu",
            nn.GELU: lambda m: "gelu_tanh" if m.approximate == "tanh" else "gelu"}


def _is_rmsnorm(m):
    """An RMSNorm computing x·rsqrt(mean(x²) + eps)·weight: named *RMSNorm, a 1-D weight (or
    none) and an eps. Gemma's, which scales by (1 + weight), is not one."""
    name = type(m).__name__
    if not name.endswith("RMSNorm") or name.startswith("Gemma") or isinstance(m, RMSNorm):
        return False
    w = getattr(m, "weight", None)
    if w is not None and (not isinstance(w, torch.Tensor) or w.dim() != 1):
        return False
    return hasattr(m, "eps") or hasattr(m, "variance_epsilon")


def _replacement(m, linear, layernorm, rmsnorm):
    """The epifuse module for torch module `m` sharing its parameters, or None."""
    if linear and type(m) is nn.Linear:
        new = Linear(m.in_features, m.out_features, m.bias is not None, device="meta")
        new.weight, new.bias = m.weight, m.bias
        return new
    if layernorm and type(m) is nn.LayerNorm and len(m.normalized_shape) == 1:
        new = LayerNorm(m.normalized_shape[0], m.eps, m.elementwise_affine, bias=m.bias is not None,
                        device="meta")
        new.weight, new.bias = m.weight, m.bias
        return new
    if rmsnorm and _is_rmsnorm(m):
        w = getattr(m, "weight", None)
        eps = getattr(m, "eps", None) if hasattr(m, "eps") else getattr(m, "variance_epsilon")
        dim = w.shape[0] if w is not None else tuple(getattr(m, "normalized_shape", (0,)))[-1]
        new = RMSNorm(dim, eps, elementwise_affine=w is not None, device="meta")
        new.weight = w
        return new
    return None


def swap(model: nn.Module, *, linear: bool = True, layernorm: bool = True, rmsnorm: bool = True,
         fuse_activation: bool = True) -> nn.Module:
    """Replaces, in place, the torch modules of `model` with epifuse ones sharing their
    parameters (the same tensors: nothing is copied or re-initialised) and returns the model.

    - nn.Linear (not a subclass, whose forward may differ) → `Linear`; inside an
      nn.Sequential, with fuse_activation, a following nn.ReLU, nn.GELU or nn.SiLU and
      then an nn.Dropout move into its epilogue and are replaced by nn.Identity (so the
      Sequential's indices and state_dict keys stay).
    - nn.LayerNorm over one dimension → `LayerNorm`.
    - a module named *RMSNorm with a 1-D `weight` and `eps` or `variance_epsilon`
      (torch.nn.RMSNorm, LLaMA's) → `RMSNorm`.

    Modules that are none of these are walked into; the model's own forward is unchanged.
    """
    new = _replacement(model, linear, layernorm, rmsnorm)
    if new is not None:
        return new.train(model.training)
    _swap_children(model, linear, layernorm, rmsnorm, fuse_activation)
    return model


def _swap_children(parent, linear, layernorm, rmsnorm, fuse):
    children = list(parent.named_children())
    fused = set()
    for i, (name, child) in enumerate(children):
        if name in fused:
            continue
        new = _replacement(child, linear, layernorm, rmsnorm)
        if new is None:
            _swap_children(child, linear, layernorm, rmsnorm, fuse)
            continue
        new.train(child.training)
        if fuse and isinstance(parent, nn.Sequential) and isinstance(new, Linear):
            j, into = i + 1, []
            if j < len(children) and type(children[j][1]) in _FUSABLE:
                new.activation = _FUSABLE[type(children[j][1])](children[j][1])
                into.append(children[j][0])
                j += 1
            if j < len(children) and type(children[j][1]) is nn.Dropout:
                new.p = _check_p(children[j][1].p)
                into.append(children[j][0])
            for k in into:  # an Identity keeps the Sequential's indices
                setattr(parent, k, nn.Identity())
            fused.update(into)
        setattr(parent, name, new)

