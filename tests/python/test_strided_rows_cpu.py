"""Strided [M, N] views of elementwise and row chains on the Python module's CPU path
(NumPy arrays on the reference; docs/strided-batched.md, "Built: strided tensors in the
elementwise and row families"): a column block of a wider array gives exactly what its
contiguous copy gives, so a caller can hand the same views to the CPU path and to the
torch binding (which passes their lds to the strided kernels:
test_strided_epilogue_cpu.py, test_gpu_strided_rows.py)."""
import numpy as np

import epifuse

ELEMENTWISE = """{"epifuse": 1, "name": "ew", "inputs": {"x": {"dtype": "f32"}, "bias": {"dtype": "f32", "broadcast": "row"},
  "res": {"dtype": "f32"}},
  "ops": [{"name": "z", "op": "add", "args": ["x", "bias"]}, {"name": "g", "op": "gelu_tanh", "args": ["z"]},
          {"name": "y", "op": "add", "args": ["g", "res"]}],
  "outputs": {"y": {"dtype": "f32"}, "zs": {"dtype": "f32", "value": "z"}}}"""
ROWS = """{"epifuse": 1, "name": "add_softmax", "inputs": {"x": {"dtype": "f32"}, "res": {"dtype": "f32"}},
  "ops": [{"name": "h", "op": "add", "args": ["x", "res"]}, {"name": "y", "op": "softmax", "args": ["h"]}],
  "outputs": {"y": {"dtype": "f32"}, "h": {"dtype": "f32"}}}"""


def column_block(rng, m, n, ld, first):
    block = rng.standard_normal((m, ld)).astype(np.float32)[:, first:first + n]
    assert not block.flags.c_contiguous and block.strides == (4 * ld, 4)
    return block


def test_elementwise_column_blocks_give_their_copies_results():
    rng = np.random.default_rng(3)
    fn = epifuse.Chain.from_json(ELEMENTWISE).compile()
    x, res = column_block(rng, 17, 24, 25, 1), column_block(rng, 17, 24, 40, 16)
    bias = rng.standard_normal(24).astype(np.float32)
    got = fn(x, bias, res)
    want = fn(np.ascontiguousarray(x), bias, np.ascontiguousarray(res))
    for g, w in zip(got, want):
        assert g.shape == (17, 24) and g.tobytes() == w.tobytes()


def test_row_column_blocks_give_their_copies_results():
    rng = np.random.default_rng(4)
    fn = epifuse.Chain.from_json(ROWS).compile()
    x, res = column_block(rng, 9, 64, 65, 0), column_block(rng, 9, 64, 128, 64)
    got = fn(x, res)
    want = fn(np.ascontiguousarray(x), np.ascontiguousarray(res))
    for g, w in zip(got, want):
        assert g.shape == (9, 64) and g.tobytes() == w.tobytes()
    assert np.allclose(got[0].sum(axis=1), 1.0, atol=1e-5)
