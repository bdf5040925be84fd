"""The torch binding's hot path without a GPU (skipped without torch): a launch prepared
for CPU tensors, as a first call prepares one for CUDA tensors, with the C launch and the
stream query replaced by stubs that record what they were given. A repeat call with
inputs of the same dtype, shape, strides and device fills the launch record (pointers in
binding order, seed, offset, stream) without the checks; any other input, and any out=
that is not a contiguous tensor of the output's shape, dtype and device, takes the
checking path and its UserError."""
import ctypes

import pytest

torch = pytest.importorskip("torch")
import epifuse  # noqa: E402
from epifuse import _lib, torch_bind  # noqa: E402

ADD_MUL = """{"epifuse": 1, "name": "add_mul", "inputs": {"x": {"dtype": "f32"}, "y": {"dtype": "f32"}},
  "ops": [{"name": "s", "op": "add", "args": ["x", "y"]}, {"name": "out", "op": "scale", "args": ["s"], "alpha": 0.5}],
  "outputs": {"out": {"dtype": "f32"}}}"""
STREAM = 0x5000


class _NoKernel:
    h = None


ONE = """{"epifuse": 1, "name": "relu", "inputs": {"x": {"dtype": "f32"}},
  "ops": [{"name": "out", "op": "relu", "args": ["x"]}], "outputs": {"out": {"dtype": "f32"}}}"""
THREE = """{"epifuse": 1, "name": "add_mul3", "inputs": {"x": {"dtype": "f32"}, "y": {"dtype": "f32"},
  "w": {"dtype": "f32"}}, "ops": [{"name": "s", "op": "add", "args": ["x", "y"]},
  {"name": "out", "op": "mul", "args": ["s", "w"]}], "outputs": {"out": {"dtype": "f32"}}}"""


@pytest.fixture
def hot(monkeypatch):
    return on_cpu(monkeypatch, ADD_MUL)


def on_cpu(monkeypatch, chain):
    """(fn, launches, first_calls): the chain's callable whose first calls prepare on the
    CPU after the full checks, `launches` the records the stub launch saw, `first_calls`
    the inputs of each call that took the checking path."""
    fn = epifuse.Chain.from_json(chain).compile()
    names = fn.input_names
    fn.kernel = lambda mnk, device=0, lds=None: (_NoKernel(), names, [n for n, _ in fn._outputs])
    fn.jit = lambda device=0: None
    launches, first_calls = [], []

    def first_call_on_cpu(compiled, tensors):
        first_calls.append(list(tensors))
        cpu = torch.device("cpu")
        lds = torch_bind._check(compiled, tensors, cpu)  # the full checks and their UserErrors
        l = compiled._launches.get(torch_bind._key(tensors))
        if l is None:
            l = compiled._launches[torch_bind._key(tensors)] = torch_bind._prepare(compiled, tensors, cpu, lds)
            l.index = -1  # a CPU tensor's get_device()
        return l

    def launch(address):
        r = _lib.LaunchRecord.from_address(address)
        launches.append({"inputs": [r.inputs[i] for i in range(r.ninputs)],
                         "outputs": [r.outputs[i] for i in range(r.noutputs)], "seed": r.seed,
                         "offset": r.offset, "stream": r.stream, "rng_state": r.rng_state, "mnk": (r.m, r.n, r.k)})
        return 0

    monkeypatch.setattr(torch_bind, "_first_call", first_call_on_cpu)
    monkeypatch.setattr(torch_bind, "_launch", launch)
    monkeypatch.setattr(torch_bind, "_raw_stream", lambda index: STREAM)
    return fn, launches, first_calls


def tensors(*shape, dtype=torch.float32):
    return [torch.randn(*shape).to(dtype) for _ in range(3)]


def test_a_repeat_call_fills_the_record_without_the_checks(hot):
    fn, launches, first_calls = hot
    x, y, z = tensors(4, 8)
    assert fn(x, y, out=z, seed=5, offset=7) is z
    x2, y2, z2 = tensors(4, 8)
    assert fn(x2, y2, out=z2, seed=2**64 - 1, offset=0) is z2
    assert len(first_calls) == 1
    assert launches[0] == {"inputs": [x.data_ptr(), y.data_ptr()], "outputs": [z.data_ptr()], "seed": 5,
                           "offset": 7, "stream": STREAM, "rng_state": 0, "mnk": (4, 8, 0)}
    assert launches[1]["inputs"] == [x2.data_ptr(), y2.data_ptr()] and launches[1]["outputs"] == [z2.data_ptr()]
    assert launches[1]["seed"] == 2**64 - 1
    y3 = fn(x2, y2)  # torch.empty's output, its pointer in the record
    assert y3.shape == (4, 8) and y3.dtype == torch.float32 and launches[2]["outputs"] == [y3.data_ptr()]
    assert len(first_calls) == 1


def test_inputs_of_another_signature_take_the_checks(hot):
    fn, launches, first_calls = hot
    x, y, z = tensors(8, 8)
    fn(x, y, out=z)
    with pytest.raises(epifuse.UserError, match="'y' is torch.float64, the chain reads f32"):
        fn(x, y.double(), out=z)
    with pytest.raises(epifuse.UserError, match="'x' is not contiguous"):
        fn(x.t(), y, out=z)  # the same shape, other strides
    with pytest.raises(epifuse.UserError, match="'y' has shape"):
        fn(x, y[:4], out=z)
    with pytest.raises(epifuse.UserError, match="mix no NumPy arrays"):
        fn(x, y.numpy(), out=z)
    assert len(first_calls) == 5 and len(launches) == 1
    x2, y2, z2 = tensors(2, 8)  # another shape: prepared once, then the hot path
    fn(x2, y2, out=z2)
    fn(x2, y2, out=z2)
    fn(x, y, out=z)  # back to the first shape: its launch, no checks
    assert len(first_calls) == 6 and len(launches) == 4
    assert launches[-1]["inputs"] == [x.data_ptr(), y.data_ptr()] and launches[-1]["mnk"] == (8, 8, 0)


@pytest.mark.parametrize("bad", ["shape", "dtype", "strides", "two", "numpy"])
def test_an_out_that_is_not_the_outputs_takes_the_checks(hot, bad):
    fn, launches, _ = hot
    x, y, z = tensors(8, 8)
    fn(x, y, out=z)
    out = {"shape": torch.empty(8, 4), "dtype": torch.empty(8, 8, dtype=torch.float16), "strides": z.t(),
           "two": (z, z), "numpy": z.numpy()}[bad]
    with pytest.raises(epifuse.UserError, match="out="):
        fn(x, y, out=out)
    assert len(launches) == 1


def test_a_contiguous_out_of_other_strides_passes_the_full_check(hot):
    fn, launches, _ = hot
    x, y = torch.randn(1, 8), torch.randn(1, 8)
    z = torch.empty(8, 1).t()  # [1, 8], strides (1, 1): contiguous, not torch.empty's strides
    assert z.is_contiguous() and z.stride() != (8, 1)
    assert fn(x, y, out=z) is z and fn(x, y, out=[z]) is z
    assert [l["outputs"] for l in launches] == [[z.data_ptr()]] * 2


def test_a_seed_outside_uint64_is_refused_before_the_launch(hot):
    fn, launches, _ = hot
    x, y, z = tensors(4, 8)
    for seed in (-1, 2**64, True, 1.0):
        with pytest.raises(epifuse.UserError, match="seed must be an integer"):
            fn(x, y, out=z, seed=seed)
    assert launches == []


def test_the_record_s_varying_fields_follow_one_another():
    """The hot path writes seed, offset, stream and rng_state with one pack_into."""
    r = _lib.LaunchRecord
    assert [getattr(r, f).offset - r.seed.offset for f in ("seed", "offset", "stream", "rng_state")] == [0, 8, 16, 24]
    assert ctypes.sizeof(ctypes.c_void_p) == 8


@pytest.mark.parametrize("chain, n", [(ONE, 1), (THREE, 3)])
def test_the_hot_path_of_one_and_of_three_inputs(monkeypatch, chain, n):
    fn, launches, first_calls = on_cpu(monkeypatch, chain)
    ins, z = [torch.randn(4, 8) for _ in range(n)], torch.empty(4, 8)
    assert fn(*ins, out=z, seed=3) is z
    ins2, z2 = [torch.randn(4, 8) for _ in range(n)], torch.empty(4, 8)
    assert fn(*ins2, out=z2, seed=4) is z2
    assert fn._run_torch is torch_bind.hot_path(n) and len(first_calls) == 1
    assert launches[1]["inputs"] == [t.data_ptr() for t in ins2] and launches[1]["outputs"] == [z2.data_ptr()]
    assert launches[1]["seed"] == 4 and launches[1]["stream"] == STREAM
    with pytest.raises(epifuse.UserError, match="is torch.float16"):
        fn(*ins2[:-1], ins2[-1].half(), out=z2)


def test_the_hot_path_source_is_straight_line_code():
    """Note [Hot path per arity]: each input's signature and pointer spelled out."""
    src = torch_bind.hot_path_source(2)
    assert "def run_2(compiled, tensors, seed, offset, out=None, rng_state=None):" in src
    assert "    t0, t1, = tensors" in src
    assert "hit = [(t0.dtype, t0.shape, t0.stride(), t0.device), (t1.dtype, t1.shape, t1.stride(), t1.device)]" in src
    assert "l.pack_pointers(l.pointers, 0, t0.data_ptr(), t1.data_ptr(), out.data_ptr())" in src
    assert " for " not in src and "map(" not in src
