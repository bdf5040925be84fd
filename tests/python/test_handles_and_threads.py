"""Native handles: copies of a chain are independent clones, handles that cannot
be cloned refuse to be copied, a compiled callable runs the chain as it was at
compile time, and one chain may be used from many threads at once."""
import copy
import ctypes
import gc
import json
import threading

import numpy as np
import pytest

import epifuse
from epifuse.compiled import Handle


def add_relu():
    c = epifuse.Chain("add_relu")
    x = c.input("x", "f32")
    c.output("y", c.relu(c.add(x, x)), "f32")
    return c


X = np.array([[-1.5, 0.5, 2.0], [3.0, -0.25, 1.0]], np.float32)


@pytest.mark.parametrize("how", [copy.copy, copy.deepcopy])
def test_a_copy_outlives_its_original(how):
    c = add_relu()
    text = c.to_json()
    d = how(c)
    del c
    gc.collect()
    assert d.to_json() == text
    np.testing.assert_array_equal(d.compile()(X), np.maximum(X + X, 0))


def test_a_copy_is_built_on_alone():
    c = add_relu()
    d = copy.copy(c)
    d.output("z", d.input("w", "f32"), "f32")
    assert list(json.loads(c.to_json())["outputs"]) == ["y"]
    assert list(json.loads(d.to_json())["outputs"]) == ["y", "z"]
    with pytest.raises(epifuse.UserError, match="not a value of this chain"):
        d.relu(c.input("v", "f32"))  # values belong to the chain that made them


def test_native_handles_refuse_to_be_copied():
    h = Handle(ctypes.c_void_p(), epifuse.chain.lib.ef_kernel_free)
    for how in (copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match="cannot be copied"):
            how(h)


def test_a_copied_callable_runs_on_its_own():
    fn = add_relu().compile()
    g = copy.deepcopy(fn)
    del fn
    gc.collect()
    np.testing.assert_array_equal(g(X), np.maximum(X + X, 0))


def test_outputs_added_after_compile_do_not_reach_the_callable():
    c = add_relu()
    fn = c.compile()
    c.output("z", c.relu(c.input("w", "f32")), "f32")  # a new output and a new input
    np.testing.assert_array_equal(fn(X), np.maximum(X + X, 0))  # still one input, one output
    with pytest.raises(epifuse.UserError, match="'w' is not an input"):
        fn(X, w=X)
    y, z = c.compile()(X, X)  # compiling again runs what was added
    np.testing.assert_array_equal(z, np.maximum(X, 0))


def test_the_callables_snapshot_takes_no_builder_calls():
    fn = add_relu().compile()
    with pytest.raises(epifuse.UserError, match="snapshot"):
        fn.chain.input("w", "f32")


def test_one_chain_from_many_threads():
    """Builders, serialisers and callers on one chain at once (the library locks
    each spec); every result is what one thread alone would get."""
    c = add_relu()
    x = c.input("x2", "f32")
    c.output("u", c.relu(x), "f32")  # a spec verifies only with every input used
    rng = np.random.default_rng(5)
    a = rng.uniform(-2, 2, (16, 64)).astype(np.float32)
    want = np.maximum(a + a, 0)
    errors = []
    start = threading.Barrier(8)

    def builder(k):
        start.wait()
        v = x
        for i in range(120):
            v = c.max(c.add(v, x), x)
            if i % 30 == 0:
                c.output(f"o{k}_{i}", v, "f32")

    def reader():
        start.wait()
        for _ in range(150):
            doc = json.loads(c.to_json())
            assert doc["outputs"]["y"]
            c.verify()
            assert c.bindings(4, 8)["inputs"][0]["shape"] == [4, 8]

    def caller():
        start.wait()
        for _ in range(80):
            outs = c.compile()(a, a)  # x and x2; y, u and however many outputs there are now
            np.testing.assert_array_equal(outs[0], want)
            np.testing.assert_array_equal(outs[1], np.maximum(a, 0))

    def guard(fn, *args):
        try:
            fn(*args)
        except BaseException as e:  # a thread's failure fails the test
            errors.append(e)

    threads = [threading.Thread(target=guard, args=(builder, k)) for k in range(2)]
    threads += [threading.Thread(target=guard, args=(reader,)) for _ in range(3)]
    threads += [threading.Thread(target=guard, args=(caller,)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(json.loads(c.to_json())["outputs"]) == 2 + 2 * 4
