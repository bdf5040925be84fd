"""Other frameworks' GPU arrays through DLPack (skipped without CuPy and a GPU):
no copy, outputs through out=, dtype/stride/shape checks as for torch tensors."""
import pytest

import epifuse
from conftest import ROOT

cp = pytest.importorskip("cupy")
try:
    cp.cuda.runtime.getDeviceCount()
except Exception:  # noqa: BLE001 - any CUDA failure means no GPU here
    pytest.skip("no CUDA GPU", allow_module_level=True)


def test_cupy_arrays_run_through_dlpack_into_out():
    fn = epifuse.load(ROOT / "examples/chains/add_mul.json").compile()
    x, y = cp.random.standard_normal((300, 1000), dtype=cp.float32), cp.random.standard_normal((300, 1000), dtype=cp.float32)
    z = cp.empty_like(x)
    assert fn(x, y, out=z) is z
    cp.cuda.runtime.deviceSynchronize()
    cp.testing.assert_allclose(z, (x + y) * 0.5, rtol=1e-6)


def test_a_cupy_gemm_with_a_column_major_operand():
    fn = epifuse.load(ROOT / "examples/chains/geglu.json").compile()  # bf16: CuPy has no bf16, so a dtype error
    a = cp.zeros((64, 32), cp.float16)
    with pytest.raises(epifuse.UserError, match="the chain reads bf16"):
        fn(a, a.T, a.T, out=cp.empty((64, 64), cp.float16))
    fn = epifuse.load(ROOT / "examples/chains/gemm_bias_relu.json").compile()
    a = cp.random.standard_normal((128, 256), dtype=cp.float32).astype(cp.float16)
    b = cp.random.standard_normal((256, 64), dtype=cp.float32).astype(cp.float16)
    bias = cp.random.standard_normal(64, dtype=cp.float32).astype(cp.float16)
    y = cp.empty((128, 64), cp.float16)
    fn(a, b, bias, out=y)
    cp.cuda.runtime.deviceSynchronize()
    want = cp.maximum(a.astype(cp.float32) @ b.astype(cp.float32) + bias.astype(cp.float32), 0)
    cp.testing.assert_allclose(y.astype(cp.float32), want, rtol=2e-3, atol=3e-2)


def test_dlpack_errors_are_user_errors():
    fn = epifuse.load(ROOT / "examples/chains/add_mul.json").compile()
    x = cp.ones((64, 128), cp.float32)
    with pytest.raises(epifuse.UserError, match="need out="):
        fn(x, x)
    with pytest.raises(epifuse.UserError, match="strides"):
        fn(x.T, x.T, out=cp.empty((128, 64), cp.float32))
    with pytest.raises(epifuse.UserError, match="out= for 'out'"):
        fn(x, x, out=cp.empty((64, 128), cp.float16))
