"""epifuse: fused GPU epilogues compiled at run time (docs/python.md).

    import epifuse
    chain = epifuse.load("examples/chains/bias_gelu_dropout_add.json")
    fn = chain.compile()
    y = fn(x, bias, residual, seed=7)   # torch CUDA tensors, or NumPy arrays (CPU reference)
"""
from ._lib import Error, UserError, CompileError, DeviceError, lib as _c_api
from .chain import Chain, Value, load

__version__ = _c_api.ef_version().decode()
__all__ = ["Chain", "Value", "load", "Error", "UserError", "CompileError", "DeviceError", "__version__"]
