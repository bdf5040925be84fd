"""Is a strided [M, N] stream slower than a dense one on this GPU? One Triton kernel,
out = a + b over rows with their own leading dimensions (ld = N dense, N + pad strided),
so the only difference is where the rows lie. In turns, 20 launches an event pair."""
import statistics, torch, triton, triton.language as tl

@triton.jit
def add2d(a, b, o, lda, ldb, ldo, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    lda = tl.multiple_of(lda, 16); ldb = tl.multiple_of(ldb, 16); ldo = tl.multiple_of(ldo, 16)
    x = tl.load(a + row * lda + cols)
    y = tl.load(b + row * ldb + cols)
    tl.store(o + row * ldo + cols, x + y)

M, N, BLOCK = 16384, 8192, 2048
dt = torch.bfloat16
def timed(f, launches=20):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(2_000_000)
    s.record()
    for _ in range(launches): f()
    e.record(); e.synchronize()
    return s.elapsed_time(e) / launches
def run(a, b, o):
    add2d[(M, N // BLOCK)](a, b, o, a.stride(0), b.stride(0), o.stride(0), N, BLOCK=BLOCK, num_warps=8)
print("#", torch.cuda.get_device_name())
g = torch.Generator(device="cuda").manual_seed(0)
mk = lambda w: torch.randn(M, w, device="cuda", dtype=dt, generator=g)
ad, bd, od = mk(N), mk(N), mk(N)
for pad in (64, 4096):
    as_, bs, os_ = mk(N + pad)[:, :N], mk(N + pad)[:, :N], mk(N + pad)[:, :N]
    rows = {"dense": (ad, bd, od), "a strided": (as_, bd, od), "b strided": (ad, bs, od),
            "out strided": (ad, bd, os_), "all strided": (as_, bs, os_)}
    t = {k: [] for k in rows}
    for v in rows.values(): run(*v)
    for r in range(15):
        for k, v in rows.items(): t[k].append(timed(lambda: run(*v)))
    med = {k: statistics.median(v) for k, v in t.items()}
    gbs = 3 * M * N * 2 / (med["dense"] * 1e-3) / 1e12
    print(f"pad {pad} (dense {gbs:.2f} TB/s): " + " | ".join(f"{k} {v*1e3:.1f} us {v / med['dense']:.3f}x" for k, v in med.items()), flush=True)
