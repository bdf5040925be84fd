"""What crosses into the library is checked first: seeds and offsets are
uint64s, input shapes are exactly what the chain's broadcasts name (not only
the same element count), op attributes are numbers NumPy's scalars included,
and no string reaches the C ABI with a NUL that would cut it short."""
import json

import numpy as np
import pytest

import epifuse


def dropout_chain():
    c = epifuse.Chain("d")
    c.output("y", c.dropout(c.input("x", "f32"), 0.5), "f32")
    return c.compile()


ONES = np.ones((8, 64), np.float32)


# ---- seeds and offsets
@pytest.mark.parametrize("key", ["seed", "offset"])
@pytest.mark.parametrize("bad", [2**64, -1, 2**70, 1.0, 0.5, None, True, "7", np.float32(3)])
def test_seeds_and_offsets_outside_uint64_are_user_errors(key, bad):
    with pytest.raises(epifuse.UserError, match=key):
        dropout_chain()(ONES, **{key: bad})


def test_numpy_integers_are_seeds_and_the_largest_seed_is_its_own():
    fn = dropout_chain()
    np.testing.assert_array_equal(fn(ONES, seed=np.uint64(2**64 - 1), offset=np.int32(3)),
                                  fn(ONES, seed=2**64 - 1, offset=3))
    assert (fn(ONES, seed=2**64 - 1) != fn(ONES, seed=0)).any()  # no wrap to 0


# ---- input shapes
def chain_with_every_broadcast():
    c = epifuse.Chain("shapes")
    x = c.input("x", "f32")
    v = c.add(x, c.input("y", "f32"))
    v = c.add(v, c.input("row", "f32", broadcast="row"))
    v = c.add(v, c.input("col", "f32", broadcast="col"))
    c.output("out", c.add(v, c.input("s", "f32", broadcast="scalar")), "f32")
    return c.compile()


def arrays(x_shape, **shapes):
    x_shape = tuple(x_shape)
    default = {"y": x_shape, "row": x_shape[-1:], "col": x_shape[:-1], "s": ()}
    default.update(shapes)
    rng = np.random.default_rng(len(x_shape))
    return {"x": rng.uniform(-1, 1, x_shape).astype(np.float32),
            **{k: rng.uniform(-1, 1, v).astype(np.float32) for k, v in default.items()}}


def expect(a):
    return (a["x"] + a["y"] + a["row"] + a["col"][..., None] + np.float32(a["s"].reshape(()))).astype(np.float32)


@pytest.mark.parametrize("x_shape", [(8,), (3, 8), (2, 3, 8)])
def test_each_broadcast_takes_its_shape_in_xs_terms(x_shape):
    fn = chain_with_every_broadcast()
    a = arrays(x_shape)
    out = fn(**a)
    assert out.shape == tuple(x_shape)
    np.testing.assert_allclose(out, expect(a), rtol=1e-6)
    out = fn(**{**a, "s": a["s"].reshape(1)})  # a scalar as (1,) too
    np.testing.assert_allclose(out, expect(a), rtol=1e-6)


@pytest.mark.parametrize("x_shape, name, shape", [
    ((2, 3, 8), "y", (3, 2, 8)),   # the same element count, other dims
    ((2, 3, 8), "y", (6, 8)),      # folded by hand
    ((6, 8), "y", (2, 3, 8)),
    ((2, 3, 4), "col", (3, 2)),
    ((2, 3, 4), "col", (6,)),
    ((3, 8), "row", (1, 8)),
    ((3, 8), "row", (3, 8)),
    ((3, 8), "s", (2,)),
    ((8,), "y", (1, 8)),
])
def test_an_input_of_another_shape_is_named(x_shape, name, shape):
    fn = chain_with_every_broadcast()
    with pytest.raises(epifuse.UserError, match=rf"input '{name}' has shape \[{', '.join(map(str, shape))}\]"):
        fn(**arrays(x_shape, **{name: shape}))


# ---- op attributes
def test_numpy_scalars_are_attributes():
    x = np.arange(1, 9, dtype=np.float32).reshape(2, 4)
    for alpha in (np.float32(0.5), np.float64(0.5), np.int64(2), np.int8(2)):
        c = epifuse.Chain("s")
        c.output("y", c.scale(c.input("x", "f32"), alpha), "f32")
        np.testing.assert_array_equal(c.compile()(x), x * np.float32(alpha))
    c = epifuse.Chain("d")
    c.output("y", c.dropout(c.input("x", "f32"), np.float32(0.25)), "f32")
    assert json.loads(c.to_json())["ops"][0]["p"] == 0.25


@pytest.mark.parametrize("p", [10**400, -10**400, float("inf"), np.float64("nan")])
def test_attributes_beyond_a_double_are_user_errors(p):
    c = epifuse.Chain("d")
    x = c.input("x", "f32")
    with pytest.raises(epifuse.UserError, match=r"dropout\.p"):
        c.dropout(x, p)


def test_attributes_that_are_no_numbers_are_user_errors():
    c = epifuse.Chain("d")
    with pytest.raises(epifuse.UserError, match=r"scale\.alpha"):
        c.scale(c.input("x", "f32"), [1.0])


# ---- strings with NUL
def test_strings_with_a_nul_are_refused_not_cut():
    c = epifuse.Chain("n")
    with pytest.raises(epifuse.UserError, match="NUL"):
        c.input("x", "f32\0junk")        # would read as "f32"
    with pytest.raises(epifuse.UserError, match="NUL"):
        c.input("x\0y", "f32")           # would declare "x"
    x = c.input("x", "f32")
    with pytest.raises(epifuse.UserError, match="NUL"):
        c.op("relu\0", x)
    with pytest.raises(epifuse.UserError, match="NUL"):
        c.output("y\0z", c.relu(x), "f32")
    with pytest.raises(epifuse.UserError, match="NUL"):
        epifuse.Chain("a\0b")
    with pytest.raises(epifuse.UserError, match="NUL"):
        epifuse.Chain("p", precision="fast\0")
    assert json.loads(c.to_json())["inputs"] == {"x": {"dtype": "f32"}}
