"""help() is documentation: every public function, class and method of epifuse,
epifuse.chain.Chain and epifuse.nn (when torch imports) has a docstring, and the
builder's ops have real signatures, not (self, *args)."""
import inspect

import pytest

import epifuse
import epifuse.layers
from epifuse.chain import Chain, _OPS


def public_members(owner):
    """(qualified name, object) of owner's public functions, classes and methods: a
    module's own attributes, or what a class defines itself."""
    if inspect.ismodule(owner):
        names = getattr(owner, "__all__", [n for n in vars(owner) if not n.startswith("_")])
        items = [(n, getattr(owner, n)) for n in names]
        items = [(n, o) for n, o in items if inspect.isfunction(o) or inspect.isclass(o)]
        prefix = owner.__name__
    else:
        items = [(n, o) for n, o in vars(owner).items() if not n.startswith("_")]
        prefix = owner.__qualname__
    out = []
    for n, o in items:
        if isinstance(o, (staticmethod, classmethod)):
            o = o.__func__
        if isinstance(o, property):
            o = o.fget
        if inspect.isfunction(o) or inspect.isclass(o):
            out.append((f"{prefix}.{n}", o))
    return out


def undocumented(owner):
    missing = []
    for name, o in public_members(owner):
        if not inspect.getdoc(o):
            missing.append(name)
        if inspect.isclass(o) and o.__module__.startswith("epifuse") and not inspect.isabstract(o):
            missing += [f"{name}.{m}" for m, f in public_members(o) if not inspect.getdoc(f)]
    return missing


def test_every_public_function_and_method_of_epifuse_has_a_docstring():
    assert undocumented(epifuse) == []
    assert undocumented(Chain) == []
    assert undocumented(epifuse.layers) == []


@pytest.mark.parametrize("name", [op for op, _, _ in _OPS] + ["scale", "add_scalar", "dropout", "cast",
                                                              "rmsnorm", "layernorm", "input", "output"])
def test_builder_ops_have_real_signatures_and_their_math(name):
    method = getattr(Chain, name)
    params = list(inspect.signature(method).parameters.values())
    assert params[0].name == "self"
    assert params[1:], f"Chain.{name} takes no operand"
    assert all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params), \
        f"Chain.{name}{inspect.signature(method)}"
    assert inspect.getdoc(method)


def test_an_op_method_builds_what_op_by_name_builds():
    a, b = Chain("a"), Chain("b")
    xa, xb = a.input("x", "f32"), b.input("x", "f32")
    a.output("y", a.mul(a.gelu_tanh(xa), xa), "f32")
    b.output("y", b.op("mul", b.op("gelu_tanh", xb), xb), "f32")
    assert a.to_json() == b.to_json().replace('"name": "b"', '"name": "a"')


def test_epifuse_nn_is_documented_when_torch_imports():
    pytest.importorskip("torch")
    import epifuse.nn as nn
    assert undocumented(nn) == []
    for name in nn.__all__:
        obj = getattr(nn, name)
        target = obj.__init__ if inspect.isclass(obj) else obj
        params = inspect.signature(target).parameters.values()
        assert not any(p.kind == p.VAR_POSITIONAL for p in params), f"epifuse.nn.{name} takes *args"


def test_epifuse_torch_and_the_compiled_callable_are_documented_when_torch_imports():
    pytest.importorskip("torch")
    import epifuse.compiled
    import epifuse.torch as et
    assert [n for n in ("op", "linear", "rng_state", "block") if not inspect.getdoc(getattr(et, n))] == []
    import epifuse.torch_block as tb
    assert undocumented(tb) == [] and undocumented(tb.Plan) == []
    assert undocumented(epifuse.compiled.Compiled) == []
