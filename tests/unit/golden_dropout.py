#!/usr/bin/env python3
"""Independent golden values for the dropout RNG (docs/design.md §4).

Written from docs/design.md §4 and Triton's python/triton/language/random.py, not from
templates/common/philox.cuh, so tests/unit/test_philox.cpp checks the C++ code
against a second implementation. Pure Python 3, no numpy.

Run:  python3 tests/unit/golden_dropout.py
and paste the output into tests/unit/test_philox.cpp (the comment there says so).
"""
import math
import struct

M32 = 0xFFFFFFFF


def philox4x32_10(c, k):
    c = list(c)
    k0, k1 = k
    for _ in range(10):
        p0 = 0xD2511F53 * c[0]
        p1 = 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c[3] ^ k1) & M32, p0 & M32]
        k0 = (k0 + 0x9E3779B9) & M32
        k1 = (k1 + 0xBB67AE85) & M32
    return c


def key(seed):
    return (seed & M32, seed >> 32)


def philox4_draw(seed, offset, stream, i):
    q = i >> 2
    ctr = (q & M32, ((q >> 32) & 0xFFFF) | (stream << 16), offset & M32, offset >> 32)
    return philox4x32_10(ctr, key(seed))[i & 3]


def philox4_keep(seed, offset, stream, p, i):
    thr = int(math.floor(p * 2**24 + 0.5))  # llround for p >= 0
    return (philox4_draw(seed, offset, stream, i) >> 8) >= thr


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def triton_draw(seed, offset, i):
    off = (offset + i) & 0xFFFFFFFFFFFFFFFF
    return philox4x32_10((off & M32, off >> 32, 0, 0), key(seed))[0]


def triton_uniform(x):
    s = x - 2**32 if x & 0x80000000 else x      # bitcast to int32
    s = -s - 1 if s < 0 else s
    # Triton's literal 4.6566127342e-10 is the fp32 0x2FFFFFFF (just below 2^-31),
    # so r < 1; checked against real Triton in tests/golden/triton_dropout.json.
    return f32(f32(float(s)) * f32(4.6566127342e-10))


def triton_keep(seed, offset, p, i):
    pf = f32(p)
    return pf <= 0.0 or triton_uniform(triton_draw(seed, offset, i)) > pf


def bits(fn, n=64):
    return "".join("1" if fn(i) else "0" for i in range(n))


CASES = [  # (seed, offset, stream, p)
    (0, 0, 0, 0.5),
    (0x123456789ABCDEF0, 0x0000000500000007, 0, 0.1),
    (42, 7, 1, 0.3),
]

print("// philox4 keep bits, elements 0..63: (seed, offset, stream, p) -> bits")
for s, o, st, p in CASES:
    print(f'{{0x{s:X}ull, 0x{o:X}ull, {st}, {p}, "{bits(lambda i: philox4_keep(s, o, st, p, i))}"}},')

print("// philox4 single draws at large i: (seed, offset, stream, i) -> draw")
for s, o, st, i in [(1, 2, 3, (1 << 40) + 5), (0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF, 0x7FFF, (1 << 48) - 1),
                    (7, 0, 0, (1 << 34) + 2)]:
    print(f"{{0x{s:X}ull, 0x{o:X}ull, {st}, 0x{i:X}ull, 0x{philox4_draw(s, o, st, i):08X}u}},")

print("// triton keep bits, elements 0..63: (seed, offset, p) -> bits")
for s, o, p in [(0, 0, 0.5), (0x123456789ABCDEF0, 1000, 0.1), (42, (1 << 32) - 10, 0.3)]:
    print(f'{{0x{s:X}ull, 0x{o:X}ull, {p}, "{bits(lambda i: triton_keep(s, o, p, i))}"}},')

print("// triton uniform: draw -> fp32 bits of r")
for x in [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x12345678, 0xDEADBEEF, 0x7FFFFFC0, 0x7FFFFFBF]:
    r = triton_uniform(x)
    print(f"{{0x{x:08X}u, 0x{struct.unpack('<I', struct.pack('<f', r))[0]:08X}u}},")
