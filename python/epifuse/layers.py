"""The chains the epifuse.nn modules run, built with the builder for a dtype; no torch
needed, so they can be printed (`to_json()`), run on NumPy arrays by the CPU reference
and differentiated (`grad()`) anywhere (docs/python.md, "Modules")."""

from ._lib import UserError
from .chain import Chain

__all__ = ["ACTIVATIONS", "check_activation", "check_p", "linear_chain", "gated_chain", "norm_chain", "softmax_chain"]

# The modules' activation names -> the builder's ops.
ACTIVATIONS = {None: None, "relu": "relu", "gelu_tanh": "gelu_tanh", "gelu": "gelu_erf", "silu": "silu"}


def check_activation(activation):
    """`activation` if it is one of ACTIVATIONS' names; UserError otherwise."""
    if activation not in ACTIVATIONS:
        raise UserError(f"epifuse.nn: activation must be one of {', '.join(map(repr, ACTIVATIONS))}, "
                        f"got {activation!r}")
    return activation


def check_p(p):
    """A dropout probability as a float in [0, 1]; UserError otherwise."""
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise UserError(f"epifuse.nn: dropout probability must be in [0, 1], got {p}")
    return p


def linear_chain(dtype, bias=True, activation=None, p=0.0, residual=False, tf32=False):
    """The GEMM chain of `Linear`: y = (x @ weight.T + bias) → activation → dropout(p) →
    + residual, operands of `dtype` ("f32", "f16", "bf16"), weight read column-major
    (nn.Linear's [N, K]); `tf32` multiplies f32 operands on the tensor cores."""
    ml = {"kind": "gemm", "a": dtype, "b": dtype, "a_layout": "row", "b_layout": "col"}
    if tf32 and dtype == "f32":
        ml["math"] = "tf32"
    c = Chain("linear", ml)
    v = c.accumulator()
    if bias:
        v = c.add(v, c.input("bias", dtype, "row"))
    if check_activation(activation):
        v = getattr(c, ACTIVATIONS[activation])(v)
    if p > 0:
        v = c.dropout(v, p)
    if residual:
        v = c.add(v, c.input("residual", dtype))
    c.output("y", v, dtype)
    return c


def gated_chain(dtype, activation="silu", bias=False, tf32=False):
    """The dual-GEMM chain of `GatedMLP`: y = act(x @ w_gate.T [+ b_gate]) · (x @ w_up.T [+ b_up]),
    both weights read column-major (SwiGLU with "silu", GEGLU with "gelu_tanh" or "gelu")."""
    if activation is None or check_activation(activation) is None:
        raise UserError("epifuse.nn.GatedMLP: the gate needs an activation (silu, gelu_tanh, gelu, relu)")
    ml = {"kind": "dual_gemm", "a": dtype, "b": dtype, "a_layout": "row", "b_layout": "col"}
    if tf32 and dtype == "f32":
        ml["math"] = "tf32"
    c = Chain("gated", ml)
    gate, up = c.accumulator(0), c.accumulator(1)
    if bias:
        gate = c.add(gate, c.input("gate_bias", dtype, "row"))
        up = c.add(up, c.input("up_bias", dtype, "row"))
    c.output("y", c.mul(getattr(c, ACTIVATIONS[activation])(gate), up), dtype)
    return c


def norm_chain(kind, dtype, weight=None, bias=None, eps=1e-6, residual=False):
    """The row chain of `RMSNorm` (kind "rms") and `LayerNorm` (kind "layer"): y =
    norm(x [+ residual]) · weight + bias, eps inside the rsqrt; with `residual` the sum
    h = x + residual is a second output. `weight`, `bias`: their dtypes, or None when absent.
    y and h are stored in `dtype`, the input's."""
    c = Chain("rmsnorm" if kind == "rms" else "layernorm")
    h = c.input("x", dtype)
    if residual:
        h = c.add(h, c.input("residual", dtype))
    w = c.input("weight", weight, "row") if weight else None
    b = c.input("bias", bias, "row") if bias else None
    if kind == "rms" and w is not None:
        y = c.rmsnorm(h, w, eps=eps)
    elif kind == "layer" and w is not None and b is not None:
        y = c.layernorm(h, w, b, eps=eps)
    else:  # the composite's primitives, without the affine part it lacks
        centred = h if kind == "rms" else c.sub(h, c.row_mean(h))
        y = c.mul(centred, c.rsqrt(c.add_scalar(c.row_mean(c.mul(centred, centred)), eps)))
        if w is not None:
            y = c.mul(y, w)
        if b is not None:
            y = c.add(y, b)
    c.output("y", y, dtype)
    if residual:
        c.output("h", h, dtype)
    return c


def softmax_chain(dtype, scale=1.0, p=0.0, mask=True):
    """The chain of `ScaledMaskedSoftmaxDropout`: y = dropout(softmax(scale·x + mask), p), the
    additive mask an input that is never differentiated (grad=False)."""
    c = Chain("scaled_masked_softmax_dropout")
    v = c.input("x", dtype)
    if scale != 1.0:
        v = c.scale(v, float(scale))
    if mask:
        v = c.add(v, c.input("mask", dtype, grad=False))
    v = c.softmax(v)
    if p > 0:
        v = c.dropout(v, p)
    c.output("y", v, dtype)
    return c
