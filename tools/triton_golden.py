#!/usr/bin/env python3
"""Golden data for epifuse's Triton compatibility mode, produced by real Triton.

docs/design.md §4's `"rng": "triton"` mode must reproduce `tl.rand(seed, offset + i)` and
the dropout tutorial's `keep = r > p` bit for bit. This script runs Triton on a GPU
and writes what it computed as JSON; tests/unit/test_philox.cpp compares the C++
draws, uniforms and keep decisions with it exactly, on the CPU.

What is recorded:
  - rand:     tl.randint and tl.rand for 256 consecutive offsets at a few (seed, offset)
  - uniform:  triton.language.random.uint_to_uniform_float on chosen 32-bit words,
              the edges (0, 2^31-1, 2^31, 2^32-1) and words around them
  - masks:    the dropout tutorial's keep mask (tl.rand(seed, offset + i) > p) for
              4096 elements, several seeds, offsets and probabilities
  - boundary: offsets whose draw lands where the 2^-31 scale and Triton's
              0x2FFFFFFF scale disagree about `r > p` (found by a search over 2^31
              offsets per seed), with Triton's r and keep there

Run on a machine with a GPU, PyTorch and Triton:
    python3 tools/triton_golden.py tests/golden/triton_dropout.json
"""
import json
import struct
import sys

import torch
import triton
import triton.language as tl

try:
    from triton.language.random import uint_to_uniform_float as _u2f
except ImportError:  # pragma: no cover
    _u2f = tl.random.uint_to_uniform_float


@triton.jit
def rand_kernel(words_ptr, rand_ptr, seed, offset, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(words_ptr + offs, tl.randint(seed, offset + offs), mask=m)
    tl.store(rand_ptr + offs, tl.rand(seed, offset + offs), mask=m)


@triton.jit
def rand_at_kernel(offsets_ptr, words_ptr, rand_ptr, seed, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    o = tl.load(offsets_ptr + i, mask=m)
    tl.store(words_ptr + i, tl.randint(seed, o), mask=m)
    tl.store(rand_ptr + i, tl.rand(seed, o), mask=m)


@triton.jit
def uniform_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m)
    tl.store(out_ptr + i, _u2f(x), mask=m)


@triton.jit
def dropout_kernel(x_ptr, out_ptr, n, p, seed, offset, BLOCK: tl.constexpr):
    # The Triton tutorial's seeded dropout, with a base offset added.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    keep = tl.rand(seed, offset + offs) > p
    tl.store(out_ptr + offs, tl.where(keep, x / (1 - p), 0.0), mask=m)


@triton.jit
def dropout_at_kernel(offsets_ptr, keep_ptr, n, p, seed, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    o = tl.load(offsets_ptr + i, mask=m)
    keep = tl.rand(seed, o) > p
    tl.store(keep_ptr + i, keep.to(tl.int32), mask=m)


@triton.jit
def randint_kernel(words_ptr, seed, offset, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(words_ptr + offs, tl.randint(seed, offset + offs), mask=m)


BLOCK = 1024
DEV = "cuda"


def f32_bits(t):
    return [int(v) & 0xFFFFFFFF for v in t.view(torch.int32).tolist()]


def u32(t):
    return [int(v) & 0xFFFFFFFF for v in t.tolist()]


def grid(n):
    return (triton.cdiv(n, BLOCK),)


def rand_block(seed, offset, n=256):
    words = torch.empty(n, dtype=torch.int32, device=DEV)
    r = torch.empty(n, dtype=torch.float32, device=DEV)
    rand_kernel[grid(n)](words, r, seed, offset, n, BLOCK=BLOCK)
    return {"seed": seed, "offset": offset, "words": u32(words), "rand_bits": f32_bits(r)}


def uniforms():
    xs = [0, 1, 2, 3, 0x7F, 0x80, 0xFFFFFF, 0x1000000, 0x1000001, 0x7FFFFFBF, 0x7FFFFFC0, 0x7FFFFFFE,
          0x7FFFFFFF, 0x80000000, 0x80000001, 0x80000040, 0x80000041, 0xFFFFFFFE, 0xFFFFFFFF,
          0x12345678, 0xDEADBEEF, 0x3FFFFFFF, 0x40000000, 0xC0000000]
    x = torch.tensor([v - (1 << 32) if v >= 1 << 31 else v for v in xs], dtype=torch.int32, device=DEV)
    out = torch.empty(len(xs), dtype=torch.float32, device=DEV)
    uniform_kernel[grid(len(xs))](x, out, len(xs), BLOCK=BLOCK)
    return [{"x": v, "r_bits": b} for v, b in zip(xs, f32_bits(out))]


def mask(seed, offset, p, n=4096):
    x = torch.ones(n, dtype=torch.float32, device=DEV)
    out = torch.empty_like(x)
    dropout_kernel[grid(n)](x, out, n, p, seed, offset, BLOCK=BLOCK)
    keep = (out != 0).to(torch.uint8).tolist()
    # Bits packed little-endian into bytes, hex: element i is bit (i & 7) of byte i >> 3.
    packed = bytearray((n + 7) // 8)
    for i, k in enumerate(keep):
        if k:
            packed[i >> 3] |= 1 << (i & 7)
    return {"seed": seed, "offset": offset, "p": p, "n": n, "keep_hex": packed.hex()}


def scale_bits(bits):
    return torch.tensor(struct.unpack("<f", struct.pack("<I", bits))[0], dtype=torch.float32, device=DEV)


def boundary(seed, ps, limit=1 << 31, chunk=1 << 27):
    """Offsets in [0, limit) whose keep decision differs between r = u * 2^-31 and
    r = u * 0x2FFFFFFF-as-float (u the folded 31-bit word), for each p in ps."""
    found = {p: [] for p in ps}
    words = torch.empty(chunk, dtype=torch.int32, device=DEV)
    s_old, s_new = scale_bits(0x30000000), scale_bits(0x2FFFFFFF)
    for base in range(0, limit, chunk):
        n = min(chunk, limit - base - BLOCK)  # keep offset + i below 2^31 (Triton's offsets are int32)
        randint_kernel[grid(n)](words, seed, base, n, BLOCK=BLOCK)
        w = words[:n]
        u = (w ^ (w >> 31)).to(torch.float32)  # x < 0 ? -x - 1 : x, then RNE to fp32
        r_old, r_new = u * s_old, u * s_new
        for p in ps:
            pf = torch.tensor(p, dtype=torch.float32, device=DEV)
            idx = torch.nonzero((r_old > pf) != (r_new > pf)).flatten()
            found[p].extend(int(base + i) for i in idx.tolist())
    out = []
    for p, offsets in found.items():
        if not offsets:
            continue
        o = torch.tensor(offsets, dtype=torch.int32, device=DEV)
        n = len(offsets)
        w = torch.empty(n, dtype=torch.int32, device=DEV)
        r = torch.empty(n, dtype=torch.float32, device=DEV)
        k = torch.empty(n, dtype=torch.int32, device=DEV)
        rand_at_kernel[grid(n)](o, w, r, seed, n, BLOCK=BLOCK)
        dropout_at_kernel[grid(n)](o, k, n, p, seed, BLOCK=BLOCK)
        for off, word, rb, keep in zip(offsets, u32(w), f32_bits(r), k.tolist()):
            out.append({"seed": seed, "offset": off, "p": p, "word": word, "rand_bits": rb, "keep": bool(keep)})
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "triton_dropout.json"
    seeds = [0, 42, 0x123456789ABCDEF0]
    doc = {
        "generator": "tools/triton_golden.py",
        "triton": triton.__version__,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "rand": [rand_block(s, o) for s in seeds for o in (0, 1000, (1 << 31) - 300)],
        "uniform": uniforms(),
        "masks": [mask(s, o, p) for s in seeds for o in (0, 12345) for p in (0.1, 0.25, 0.5)],
        "boundary": [b for s in (0, 42) for b in boundary(s, (0.1, 0.25, 0.5))],
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    # A self-check of what docs/design.md §4 says, printed for the record.
    scale = struct.unpack("<f", struct.pack("<I", 0x2FFFFFFF))[0]
    agree = total = 0
    for blk in doc["rand"]:
        for w, rb in zip(blk["words"], blk["rand_bits"]):
            x = w - (1 << 32) if w >= 1 << 31 else w
            u = -x - 1 if x < 0 else x
            r = struct.unpack("<f", struct.pack("<f", struct.unpack("<f", struct.pack("<f", float(u)))[0] * scale))[0]
            agree += struct.unpack("<I", struct.pack("<f", r))[0] == rb
            total += 1
    print(f"triton {triton.__version__} on {doc['device']}: {agree}/{total} tl.rand values equal "
          f"float(u) * 0x2FFFFFFF-as-float; boundary offsets found: {len(doc['boundary'])}; wrote {path}")


if __name__ == "__main__":
    main()
