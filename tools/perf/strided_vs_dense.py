#!/usr/bin/env python3
"""Strided views against their contiguous copies through the Python module, in one
process: the speed bar of docs/strided-batched.md (a view within 3% of its dense copy)
and its bit-identity, for every operand position a strided view can take.

Each position runs one chain twice on the default path (compile(tune=False): the
default tile, or one `epifuse tune` left in the disk cache): once with that position's
tensor a 2-D view whose rows are ld = cols + --pad elements apart (the column block
buf[:, :cols] of a wider buffer whose other columns hold NaN, so a kernel reading
them would show it), once with its contiguous copy; the other tensors are the same
objects in both calls. Outputs go to preallocated tensors (out=), so no allocation is
timed; a strided output is the column block out=buf[:, :cols] of a buffer whose other
columns hold a sentinel that must survive. Positions, by family:

  gemm         y = act(x @ w.T + bias) + residual: epifuse.layers.linear_chain, the
               weight in nn.Linear's [N, K] layout read column-major; --gemm-dtypes,
               --activation, M,N,K = --gemm-shape.
                 a         x = xbuf[:, :K]
                 b         w = wbuf[:, :K], passed as w.t(), strides (1, K + pad)
                 residual  residual = rbuf[:, :N] (a full [M, N] epilogue input)
                 out       out=obuf[:, :N]
                 all       the four at once
  elementwise  y = dropout(gelu_tanh(x + bias), --dropout) + residual, --ew-dtype, built as
               docs/python.md builds it; one fixed seed and offset, so the dense and
               strided calls draw the same mask; M,N = --ew-shape: x, residual, out, all.
  row          add+RMSNorm (y = rmsnorm(x + residual)·weight, h = x + residual: two
               outputs) or LayerNorm (--row-chain), --row-dtype, epifuse.layers.norm_chain;
               M,N = --row-shape: x, residual (add+RMSNorm only), out (every output), all.

Timing (tools/perf/turns.py): a sample is --launches back-to-back calls between one
torch.cuda.Event pair, queued behind a short GPU sleep so the kernels run back to
back; each round samples dense and strided once, the first of the two alternating;
the figure is the median over --rounds rounds after --warmup. Printed per position:
dense ms, strided ms, strided/dense, and whether the outputs are bit-identical
(torch.equal on every output after the timed calls, and every sentinel column of a
strided output untouched).

A row chain whose strided tensor's rows do not start on 16 bytes (ld x element size
not a multiple of 16) may narrow the row kernel's vectors and sum a row in another
order than the dense shape's tile (docs/python.md, "Tensors"): a difference there is
reported as allowed. Any other difference makes the exit status 1.

    PYTHONPATH=python python3 tools/perf/strided_vs_dense.py [--families gemm,elementwise,row]
        [--gemm-shape 4096,4096,4096] [--ew-shape 16384,8192] [--row-shape 16384,8192]
        [--pad 64] [--rounds 30] [--launches 20] [--json PATH] [--dry-run]

--dry-run prints the positions, their tensors' shapes and strides and the chains'
inputs, and exits, with neither torch nor a GPU (the chains need the epifuse library).
"""
import argparse
import gc
import importlib
import json
import sys
from pathlib import Path

import turns

try:
    import torch
except ImportError:  # --dry-run runs without torch
    torch = None

DEVICE = "cuda"
DTYPES = ("f16", "bf16", "f32")
TORCH_DTYPES = {} if torch is None else {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
ELEMENT_BYTES = {"f16": 2, "bf16": 2, "f32": 4}
FAMILIES = ("gemm", "elementwise", "row")
ACTIVATIONS = ("relu", "gelu_tanh", "gelu")  # epifuse.layers' names (gelu: the erf form)
SENTINEL = 1234.0  # fills a strided output's other columns; exact in f16, bf16 rounds it alike each time


# ---- the families: chains and what each position makes strided
class Family:
    """One chain and its positions: `tensors` the dense inputs' shapes by name in the
    chain's binding order, `strided` the inputs a position may make strided (each a
    [rows, cols] matrix; `col_major` those passed as the transpose of their stored
    [cols, rows] rows), `outputs` each output's [M, N] shape. The chain is built by
    `make_chain` on first use, so a dry run without the library still lists positions."""

    def __init__(self, name, dtype, make_chain, tensors, strided, outputs, col_major=(), seed=0):
        self.name, self.dtype, self._make_chain, self._chain = name, dtype, make_chain, None
        self.tensors, self.strided, self.outputs = tensors, strided, outputs
        self.col_major, self.seed = set(col_major), seed

    @property
    def chain(self):
        if self._chain is None:
            self._chain = self._make_chain()
        return self._chain

    def positions(self):
        """[(position, {strided input names}, strided outputs?)]: each strided input
        alone, the outputs, then all at once."""
        ps = [(n, {n}, False) for n in self.strided]
        return ps + [("out", set(), True), ("all", set(self.strided), True)]


def gemm_family(dtype, activation, m, n, k):
    def make():
        from epifuse.layers import linear_chain
        return linear_chain(dtype, bias=True, activation=activation, residual=True)
    return Family("gemm", dtype, make, {"a": (m, k), "b": (k, n), "bias": (n,), "residual": (m, n)},
                  ["a", "b", "residual"], {"y": (m, n)}, col_major=["b"])


def elementwise_family(dtype, p, m, n, seed):
    def make():
        import epifuse
        c = epifuse.Chain("bias_gelu_dropout_add")
        x, b = c.input("x", dtype), c.input("bias", dtype, broadcast="row")
        c.output("y", c.add(c.dropout(c.gelu_tanh(c.add(x, b)), p), c.input("residual", dtype)), dtype)
        return c
    return Family("elementwise", dtype, make, {"x": (m, n), "bias": (n,), "residual": (m, n)}, ["x", "residual"],
                  {"y": (m, n)}, seed=seed)


def row_family(kind, dtype, m, n):
    def make():
        from epifuse.layers import norm_chain
        if kind == "add_rmsnorm":
            return norm_chain("rms", dtype, weight=dtype, eps=1e-6, residual=True)
        return norm_chain("layer", dtype, weight=dtype, bias=dtype, eps=1e-5)
    if kind == "add_rmsnorm":
        return Family("row", dtype, make, {"x": (m, n), "residual": (m, n), "weight": (n,)}, ["x", "residual"],
                      {"y": (m, n), "h": (m, n)})
    return Family("row", dtype, make, {"x": (m, n), "weight": (n,), "bias": (n,)}, ["x"], {"y": (m, n)})


def families(args):
    out = []
    if "gemm" in args.families:
        out += [gemm_family(dt, args.activation, *args.gemm_shape) for dt in args.gemm_dtypes]
    if "elementwise" in args.families:
        out.append(elementwise_family(args.ew_dtype, args.dropout, *args.ew_shape, args.seed))
    if "row" in args.families:
        out.append(row_family(args.row_chain, args.row_dtype, *args.row_shape))
    return out


def check_bindings(fam):
    """The chain binds the inputs this script passes, in this order: a chain built
    otherwise would fail here and not in the middle of a run."""
    names = fam.chain.compile(tune=False).input_names
    if names != list(fam.tensors):
        raise SystemExit(f"{fam.name} {fam.dtype}: the chain's inputs are {names}, the script passes "
                         f"{list(fam.tensors)}")


# ---- tensors
def strided_strides(shape, pad, col_major):
    """The strides of a strided view of a [rows, cols] matrix: rows ld = cols + pad
    apart, or for a column-major one the transpose of [cols, rows] rows rows + pad apart."""
    rows, cols = shape
    return (1, rows + pad) if col_major else (cols + pad, 1)


def strided_copy(t, pad, fill):
    """A view with t's values whose rows are t.shape[1] + pad elements apart, in a
    buffer whose other columns hold `fill`; for the transpose of a contiguous tensor
    (a column-major GEMM operand), the transpose of such a view of its rows."""
    if not t.is_contiguous() and t.t().is_contiguous():
        return strided_copy(t.t(), pad, fill).t()
    rows, cols = t.shape
    buf = torch.full((rows, cols + pad), fill, dtype=t.dtype, device=t.device)
    view = buf[:, :cols]
    view.copy_(t)
    return view


def ld_of(view):
    """A strided 2-D view's leading dimension: its larger stride."""
    return max(view.stride())


def make_inputs(fam, gen):
    """The dense inputs by name: random normal values (the weight scaled as nn.Linear's
    init would, so the GEMM's outputs stay near 1), the GEMM's b as w.t() of an
    [N, K] weight."""
    dt = TORCH_DTYPES[fam.dtype]
    out = {}
    for name, shape in fam.tensors.items():
        if name in fam.col_major:
            k, n = shape
            out[name] = (torch.randn(n, k, device=DEVICE, generator=gen) * k ** -0.5).to(dt).t()
        else:
            out[name] = torch.randn(*shape, device=DEVICE, generator=gen).to(dt)
    return out


# ---- one position
def run_position(fam, position, strided_in, strided_out, dense_fn, dense_in, args, queue):
    """Times and checks one position; returns its record."""
    dt = TORCH_DTYPES[fam.dtype]
    order = list(fam.tensors)
    rec = {"family": fam.name, "dtype": fam.dtype, "position": position, "chain": fam.chain.name,
           "shapes": {n: list(s) for n, s in {**fam.tensors, **fam.outputs}.items()},
           "strided_tensors": [n for n in fam.strided if n in strided_in] + (list(fam.outputs) if strided_out else []),
           "ld": {}}
    s_in = dict(dense_in)
    for n in strided_in:
        s_in[n] = strided_copy(dense_in[n], args.pad, float("nan"))
        rec["ld"][n] = ld_of(s_in[n])
    d_out = [torch.empty(s, dtype=dt, device=DEVICE) for s in fam.outputs.values()]
    if strided_out:
        s_out = [strided_copy(torch.full(s, SENTINEL, dtype=dt, device=DEVICE), args.pad, SENTINEL)
                 for s in fam.outputs.values()]
        for name, o in zip(fam.outputs, s_out):
            rec["ld"][name] = ld_of(o)
    else:
        s_out = [torch.empty(s, dtype=dt, device=DEVICE) for s in fam.outputs.values()]
    strided_fn = fam.chain.compile(tune=False)
    d_args, s_args = [dense_in[n] for n in order], [s_in[n] for n in order]
    d_o = d_out[0] if len(d_out) == 1 else tuple(d_out)
    s_o = s_out[0] if len(s_out) == 1 else tuple(s_out)
    seed = fam.seed

    def dense():
        dense_fn(*d_args, seed=seed, offset=0, out=d_o)

    def strided():
        strided_fn(*s_args, seed=seed, offset=0, out=s_o)

    dense()
    strided()  # compiles, and raises here for a call the module refuses
    times = turns.time_in_turns({"dense": dense, "strided": strided}, args.launches, args.warmup, args.rounds, queue)
    torch.cuda.synchronize()
    rec["dense"], rec["strided"] = turns.summary(times["dense"]), turns.summary(times["strided"])
    rec["ratio"] = rec["strided"]["ms"] / rec["dense"]["ms"]
    rec["identical"] = all(torch.equal(s, d) for s, d in zip(s_out, d_out))
    rec["gap_untouched"] = True
    if strided_out:  # the columns beside each strided output's block still hold the sentinel
        for o in s_out:
            gap = o.as_strided((o.shape[0], args.pad), (ld_of(o), 1), o.storage_offset() + o.shape[1])
            rec["gap_untouched"] = rec["gap_untouched"] and bool((gap == torch.tensor(SENTINEL, dtype=dt)).all())
    # Note in docs/python.md ("Tensors"): a row chain gives the dense bits where the
    # strided rows start on 16 bytes; otherwise narrowed vectors may reorder a row's sums.
    off_16 = [n for n, ld in rec["ld"].items() if ld * ELEMENT_BYTES[fam.dtype] % 16]
    rec["allowed_to_differ"] = fam.name == "row" and bool(off_16)
    rec["passed"] = rec["gap_untouched"] and (rec["identical"] or rec["allowed_to_differ"])
    rec["kernels"] = {"dense": kernels_of(dense_fn), "strided": kernels_of(strided_fn)}
    return rec


def kernels_of(fn):
    """{kernel name: tile} of the launches a callable prepared, read from its launch
    records (the module's private state, for the report only: {} if that changes)."""
    try:
        from epifuse import _lib
        out = {}
        for launch in fn._launches.values():
            kb = json.loads(_lib.take_string(_lib.lib.ef_kernel_bindings, launch.kernel.h))
            out[kb["name"]] = kb["tile"]
        return out
    except Exception:  # noqa: BLE001 - a report detail, never a failure
        return {}


def verdict(rec):
    if "error" in rec:
        return "FAILED"
    if rec["identical"] and rec["gap_untouched"]:
        return "yes"
    if not rec["gap_untouched"]:
        return "NO (wrote beside out)"
    return "no (allowed: ld off 16 B)" if rec["allowed_to_differ"] else "NO"


def row_line(rec):
    name = f"{rec['family']} {rec['dtype']} {rec['position']}"
    if "error" in rec:
        return f"{name:28} failed: {rec['error']}"
    tiles = {k: sorted(set(v.values())) for k, v in rec["kernels"].items()}
    note = f" (tiles: dense {tiles['dense']}, strided {tiles['strided']})" if tiles["dense"] != tiles["strided"] else ""
    return (f"{name:28} {rec['dense']['ms']:9.4f} {rec['strided']['ms']:10.4f} {rec['ratio']:8.3f}x "
            f"{rec['dense']['iqr_pct']:5.1f}% {rec['strided']['iqr_pct']:5.1f}%  {verdict(rec)}{note}")


# ---- dry run
def dry_run(args):
    """The positions and their tensors' strides, without torch or a GPU; with the
    epifuse library, each chain's inputs checked against what the script passes."""
    print(f"# dry run: {args.rounds} rounds after {args.warmup}, {args.launches} launches a sample, pad {args.pad}")
    try:
        importlib.import_module("epifuse")  # whether the module and its library load
        have_lib = True
    except ImportError as e:
        print(f"# epifuse not importable ({e}): the chains are not built")
        have_lib = False
    for fam in families(args):
        what = f"inputs {list(fam.tensors)}, outputs {list(fam.outputs)}"
        if have_lib:
            check_bindings(fam)
            what = f"chain '{fam.chain.name}', {what}"
        print(f"{fam.name} {fam.dtype}: {what}")
        for position, s_in, s_out in fam.positions():
            parts = []
            for n in [n for n in fam.strided if n in s_in]:
                shape = fam.tensors[n]
                parts.append(f"{n} {list(shape)} strides {strided_strides(shape, args.pad, n in fam.col_major)}")
            if s_out:
                parts += [f"out {n} {list(s)} strides {strided_strides(s, args.pad, False)}"
                          for n, s in fam.outputs.items()]
            print(f"  {position:9} " + "; ".join(parts))
    return 0


# ---- arguments
def dims(count, what):
    def parse(text):
        try:
            v = tuple(int(x) for x in text.split(","))
        except ValueError:
            v = ()
        if len(v) != count or min(v) < 1:
            raise argparse.ArgumentTypeError(f"{what} takes {count} positive integers, got {text!r}")
        return v
    return parse


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--families", type=turns.name_list(FAMILIES, "--families"), default=list(FAMILIES),
                    help="comma-separated: gemm, elementwise, row (default all)")
    ap.add_argument("--gemm-shape", type=dims(3, "--gemm-shape"), default=(4096, 4096, 4096), metavar="M,N,K")
    ap.add_argument("--gemm-dtypes", type=turns.name_list(DTYPES, "--gemm-dtypes"), default=["f16", "bf16"],
                    help="comma-separated (default f16,bf16)")
    ap.add_argument("--activation", choices=ACTIVATIONS, default="relu", help="the GEMM chain's (default relu)")
    ap.add_argument("--ew-shape", type=dims(2, "--ew-shape"), default=(16384, 8192), metavar="M,N")
    ap.add_argument("--ew-dtype", choices=DTYPES, default="bf16")
    ap.add_argument("--dropout", type=float, default=0.1, help="the elementwise chain's dropout probability")
    ap.add_argument("--row-shape", type=dims(2, "--row-shape"), default=(16384, 8192), metavar="M,N")
    ap.add_argument("--row-dtype", choices=DTYPES, default="bf16")
    ap.add_argument("--row-chain", choices=("add_rmsnorm", "layernorm"), default="add_rmsnorm")
    ap.add_argument("--pad", type=int, default=64,
                    help="elements between a strided view's rows and the next row's start, beyond its own (default 64)")
    turns.add_timing_arguments(ap, 30, 3, "timed rounds; each samples dense and strided once (default 30)")
    ap.add_argument("--seed", type=int, default=7, help="the inputs' generator and the dropout seed")
    turns.add_output_arguments(ap)
    ap.add_argument("--dry-run", action="store_true", help="print the positions and exit (no torch or GPU needed)")
    args = ap.parse_args(argv)
    if args.pad < 1:
        ap.error(f"--pad must be at least 1 (0 is the dense layout), got {args.pad}")
    turns.check_timing_arguments(ap, args)
    if not 0.0 <= args.dropout < 1.0:
        ap.error(f"--dropout must be in [0, 1), got {args.dropout}")
    if not 0 <= args.seed < 2 ** 63:
        ap.error(f"--seed must be in [0, 2^63), got {args.seed}")
    turns.check_gpu(ap, args, torch)
    return args


def main(argv=None):
    args = parse(argv)
    if args.dry_run:
        return dry_run(args)
    prov = turns.provenance()
    queue = turns.QueueAhead(not args.no_queue_ahead)
    print(turns.header(prov))
    print(f"# strided view (rows ld = cols + {args.pad} apart) against its contiguous copy, default path; "
          f"median of {args.rounds} rounds after {args.warmup}, {args.launches} launches a sample, "
          f"queue-ahead {queue.describe()}")
    print(f"{'position':28} {'dense ms':>9} {'strided ms':>10} {'str/dense':>9} {'IQR d':>6} {'IQR s':>6}  "
          "bit-identical")
    gen = torch.Generator(device=DEVICE)
    results = []
    for fam in families(args):
        check_bindings(fam)
        gen.manual_seed(args.seed)
        dense_in = make_inputs(fam, gen)
        dense_fn = fam.chain.compile(tune=False)
        for position, s_in, s_out in fam.positions():
            try:
                rec = run_position(fam, position, s_in, s_out, dense_fn, dense_in, args, queue)
            except Exception as e:  # noqa: BLE001 - reported, and the exit status says so
                lines = str(e).strip().splitlines()
                rec = {"family": fam.name, "dtype": fam.dtype, "position": position, "chain": fam.chain.name,
                       "error": f"{type(e).__name__}: {lines[0] if lines else ''}", "passed": False}
            results.append(rec)
            print(row_line(rec), flush=True)
            gc.collect()
            torch.cuda.empty_cache()
        del dense_in, dense_fn
        gc.collect()
        torch.cuda.empty_cache()

    failed = [f"{r['family']} {r['dtype']} {r['position']}" for r in results if not r["passed"]]
    if args.json:
        record = {**prov, "timing": "median of rounds; each round samples dense and strided once, the first "
                                    "alternating; a sample is one torch.cuda.Event pair around `launches` calls "
                                    f"into preallocated outputs; queue-ahead {queue.describe()}",
                  "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items()},
                  "results": results}
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.json}")
    if failed:
        print(f"outputs differ or a position failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
