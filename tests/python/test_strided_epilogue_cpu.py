"""Strided epilogue tensors in the torch binding without a GPU (skipped without torch;
docs/strided-batched.md, "Built: strided epilogue tensors"): a GEMM chain's full [M, N]
input or out= output may be a 2-D view with innermost stride 1 and rows ld >= N apart,
passed with its ld in the launch record (inputs then outputs, binding order); any other
view, and a strided row input or column-sum output, is refused naming the tensor.
Elementwise and row chains take the same views (Note [Strided rows]). The launch is prepared on CPU tensors with the C launch replaced by a
stub that records the record's fields (tests/python/test_torch_hot_path_cpu.py's way)."""
import pytest

torch = pytest.importorskip("torch")
import epifuse  # noqa: E402
from epifuse import _lib, torch_bind  # noqa: E402

CHAIN = """{"epifuse": 1, "name": "res", "mainloop": {"kind": "gemm", "a": "f16", "b": "f16", "b_layout": "col"},
  "inputs": {"bias": {"dtype": "f16", "broadcast": "row"}, "res": {"dtype": "f16"}},
  "ops": [{"name": "z", "op": "add", "args": ["acc", "bias"]}, {"name": "y", "op": "add", "args": ["z", "res"]}],
  "outputs": {"y": {"dtype": "f16"}, "zs": {"dtype": "f16", "value": "z"}}}"""
DGRAD = """{"epifuse": 1, "name": "dgrad", "mainloop": {"kind": "gemm", "a": "f16", "b": "f16", "b_layout": "col"},
  "inputs": {"saved": {"dtype": "f16"}},
  "ops": [{"name": "d", "op": "mul", "args": ["acc", "saved"]}, {"name": "db", "op": "col_sum", "args": ["d"]}],
  "outputs": {"d": {"dtype": "f16"}, "db": {"dtype": "f32"}}}"""
ELEMENTWISE = """{"epifuse": 1, "name": "relu", "inputs": {"x": {"dtype": "f16"}},
  "ops": [{"name": "y", "op": "relu", "args": ["x"]}], "outputs": {"y": {"dtype": "f16"}}}"""
CPU = torch.device("cpu")
M, N, K = 16, 24, 32


class _NoKernel:
    h = None


def on_cpu(monkeypatch, chain):
    """(fn, kernels, launches): the chain's callable preparing its launches on the CPU,
    `kernels` the lds each kernel was asked for, `launches` each launch record's fields."""
    fn = epifuse.Chain.from_json(chain).compile()
    kernels, launches = [], []

    def kernel(mnk, device=0, lds=None):
        kernels.append(None if lds is None else list(lds))
        return _NoKernel(), fn.input_names, [n for n, _ in fn._outputs]

    def first_call_on_cpu(compiled, tensors):
        lds = torch_bind._check(compiled, tensors, CPU)
        l = compiled._launches.get(torch_bind._key(tensors))
        if l is None:
            l = compiled._launches[torch_bind._key(tensors)] = torch_bind._prepare(compiled, tensors, CPU, lds)
            l.index = -1  # a CPU tensor's get_device()
        return l

    def launch(address):
        r = _lib.LaunchRecord.from_address(address)
        launches.append({"outputs": [r.outputs[i] for i in range(r.noutputs)],
                         "ld": [r.ld[i] for i in range(r.nld)], "mnk": (r.m, r.n, r.k)})
        return 0

    fn.kernel = kernel
    fn.jit = lambda device=0: None
    monkeypatch.setattr(torch_bind, "_first_call", first_call_on_cpu)
    monkeypatch.setattr(torch_bind, "_launch", launch)
    monkeypatch.setattr(torch_bind, "_raw_stream", lambda index: 0)
    return fn, kernels, launches


def operands():
    return (torch.zeros(M, K, dtype=torch.float16), torch.zeros(N, K, dtype=torch.float16).t(),
            torch.zeros(N, dtype=torch.float16))


def test_a_full_input_view_passes_its_row_stride():
    c = epifuse.Chain.from_json(CHAIN).compile()
    a, b, bias = operands()
    wide = torch.zeros(M, 3 * N, dtype=torch.float16)
    assert torch_bind._check(c, [a, b, bias, wide[:, N:2 * N]], CPU) == [0, 0, 0, 3 * N]
    assert torch_bind._check(c, [a, b, bias, wide[:, :N].contiguous()], CPU) == [0, 0, 0, 0]
    rows = torch.zeros(2 * M, N, dtype=torch.float16)[:M]  # a chunk of rows: dense
    assert torch_bind._check(c, [a, b, bias, rows], CPU) == [0, 0, 0, 0]


def test_other_views_are_refused_naming_the_input():
    c = epifuse.Chain.from_json(CHAIN).compile()
    a, b, bias = operands()
    res = torch.zeros(M, N, dtype=torch.float16)
    with pytest.raises(epifuse.UserError, match=r"input 'res' is not contiguous \(strides \(96, 2\)\): a full "
                                                r"\[M, N\] tensor may be a 2-D view"):
        torch_bind._check(c, [a, b, bias, torch.zeros(M, 2 * 2 * N, dtype=torch.float16)[:, ::2][:, :N]], CPU)
    with pytest.raises(epifuse.UserError, match=r"input 'bias' is not contiguous \(strides \(2,\)\); call"):
        torch_bind._check(c, [a, b, torch.zeros(2 * N, dtype=torch.float16)[::2], res], CPU)
    e = epifuse.Chain.from_json(ELEMENTWISE).compile()
    with pytest.raises(epifuse.UserError, match=r"input 'x' is not contiguous \(strides \(96, 2\)\): a full"):
        torch_bind._check(e, [torch.zeros(M, 2 * 2 * N, dtype=torch.float16)[:, ::2][:, :N]], CPU)
    with pytest.raises(epifuse.UserError, match=r"input 'x' is not contiguous \(strides \(768, 48, 1\)\): a full"):
        torch_bind._check(e, [torch.zeros(2, M, 2 * N, dtype=torch.float16)[:, :, :N]], CPU)  # 3-D: folded, dense only


def test_a_strided_input_is_compiled_and_launched_with_its_ld(monkeypatch):
    fn, kernels, launches = on_cpu(monkeypatch, CHAIN)
    a, b, bias = operands()
    res = torch.zeros(M, 40, dtype=torch.float16)[:, 8:8 + N]
    y, zs = fn(a, b, bias, res)
    assert y.shape == (M, N) and zs.shape == (M, N) and y.is_contiguous()
    assert kernels == [[0, 0, 0, 40]]
    assert launches[-1]["ld"] == [0, 0, 0, 40]


def test_strided_outputs_are_written_in_place_by_their_own_variant(monkeypatch):
    fn, kernels, launches = on_cpu(monkeypatch, CHAIN)
    a, b, bias = operands()
    res = torch.zeros(M, N, dtype=torch.float16)
    qkv = torch.zeros(M, 3 * N, dtype=torch.float16)  # the outputs as column blocks of one buffer
    y, zs = qkv[:, :N], qkv[:, 2 * N:]
    assert fn(a, b, bias, res, out=(y, zs)) == (y, zs)
    assert kernels == [None, [0, 0, 0, 0, 3 * N, 3 * N]]  # the dense launch, then the strided variant
    assert launches[-1]["outputs"] == [y.data_ptr(), zs.data_ptr()]
    assert launches[-1]["ld"] == [0, 0, 0, 0, 3 * N, 3 * N]
    fn(a, b, bias, res, out=(y, zs))  # prepared once
    assert len(kernels) == 2 and len(launches) == 2
    dense = (torch.empty(M, N, dtype=torch.float16), torch.empty(M, N, dtype=torch.float16))
    fn(a, b, bias, res, out=dense)  # the dense launch again
    assert len(kernels) == 2 and launches[-1]["ld"] == [] and launches[-1]["outputs"] == [t.data_ptr() for t in dense]
    only_zs = (dense[0], zs)
    fn(a, b, bias, res, out=only_zs)
    assert kernels[-1] == [0, 0, 0, 0, 0, 3 * N]


def test_a_strided_input_and_output_together(monkeypatch):
    fn, kernels, launches = on_cpu(monkeypatch, CHAIN)
    a, b, bias = operands()
    buf = torch.zeros(M, 64, dtype=torch.float16)
    res, y = buf[:, :N], buf[:, 32:32 + N]  # y written beside res in one buffer
    zs = torch.empty(M, N, dtype=torch.float16)
    fn(a, b, bias, res, out=(y, zs))
    assert kernels == [[0, 0, 0, 64], [0, 0, 0, 64, 64, 0]]
    assert launches[-1]["ld"] == [0, 0, 0, 64, 64, 0]


def test_out_views_that_cannot_be_written_in_place_are_refused(monkeypatch):
    fn, _, launches = on_cpu(monkeypatch, CHAIN)
    a, b, bias = operands()
    res = torch.zeros(M, N, dtype=torch.float16)
    zs = torch.empty(M, N, dtype=torch.float16)
    with pytest.raises(epifuse.UserError, match=r"out= for 'y' is not contiguous \(strides \(1, 16\)\): a full"):
        fn(a, b, bias, res, out=(torch.empty(N, M, dtype=torch.float16).t(), zs))
    with pytest.raises(epifuse.UserError, match=r"out= for 'y' must be a contiguous"):
        fn(a, b, bias, res, out=(torch.empty(M, 2 * N, dtype=torch.float16)[:, :N - 1], zs))
    d, kernels, _ = on_cpu(monkeypatch, DGRAD)
    saved = torch.zeros(M, N, dtype=torch.float16)
    db = torch.empty(2 * N, dtype=torch.float32)[::2]
    with pytest.raises(epifuse.UserError, match=r"out= for 'db' is not contiguous \(strides \(2,\)\)$"):
        d(a, b, saved, out=(torch.empty(M, N, dtype=torch.float16), db))
    dacc = torch.empty(M, 2 * N, dtype=torch.float16)[:, :N]  # the [M, N] output strided, db dense
    d(a, b, saved, out=(dacc, torch.empty(N, dtype=torch.float32)))
    assert kernels[-1] == [0, 0, 0, 2 * N, 0]


ROWS = """{"epifuse": 1, "name": "add_softmax", "inputs": {"x": {"dtype": "f16"}, "res": {"dtype": "f16"},
  "bias": {"dtype": "f16", "broadcast": "row"}},
  "ops": [{"name": "h", "op": "add", "args": ["x", "res"]}, {"name": "z", "op": "add", "args": ["h", "bias"]},
          {"name": "y", "op": "softmax", "args": ["z"]}],
  "outputs": {"y": {"dtype": "f16"}, "h": {"dtype": "f16"}}}"""


def test_elementwise_views_are_compiled_and_launched_with_their_lds(monkeypatch):
    fn, kernels, launches = on_cpu(monkeypatch, ELEMENTWISE)
    buf = torch.zeros(M, 3 * N, dtype=torch.float16)
    x = buf[:, N:2 * N]
    y = fn(x)
    assert y.shape == (M, N) and y.is_contiguous()
    assert kernels == [[3 * N]]
    assert launches[-1]["ld"] == [3 * N] and launches[-1]["mnk"] == (M, N, 0)
    out = buf[:, 2 * N:]  # written beside its input in the same buffer
    assert fn(x, out=out) is out
    assert kernels[-1] == [3 * N, 3 * N]
    assert launches[-1]["ld"] == [3 * N, 3 * N] and launches[-1]["outputs"] == [out.data_ptr()]
    fn(torch.zeros(M, N, dtype=torch.float16))  # dense: the dense kernel
    assert kernels[-1] is None and launches[-1]["ld"] == []


def test_row_chain_views_are_compiled_and_launched_with_their_lds(monkeypatch):
    fn, kernels, launches = on_cpu(monkeypatch, ROWS)
    x = torch.zeros(M, 2 * N, dtype=torch.float16)[:, :N]
    res = torch.zeros(M, N, dtype=torch.float16)
    bias = torch.zeros(N, dtype=torch.float16)
    y, h = fn(x, res, bias)
    assert kernels == [[2 * N, 0, 0]]
    assert launches[-1]["ld"] == [2 * N, 0, 0]
    wide = torch.zeros(M, 64, dtype=torch.float16)
    fn(x, res, bias, out=(torch.empty(M, N, dtype=torch.float16), wide[:, 32:32 + N]))
    assert kernels[-1] == [2 * N, 0, 0, 0, 64]
    with pytest.raises(epifuse.UserError, match=r"input 'bias' is not contiguous \(strides \(2,\)\); call"):
        fn(x, res, torch.zeros(2 * N, dtype=torch.float16)[::2])
