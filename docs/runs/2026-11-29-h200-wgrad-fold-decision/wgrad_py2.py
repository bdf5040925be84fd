import statistics, torch, triton.testing, epifuse
dt = torch.bfloat16
def b(f): return triton.testing.do_bench(f, return_mode="median")
ch = epifuse.load("scratch_dev/wgrad.json")
dflt, pinned = ch.compile(), ch.compile(tile="h128x128x64s6g8p")
g = torch.Generator(device="cuda").manual_seed(1)
def benchlike(*s):  # |v| = range/64 + u*(range - range/64), random sign (src/reference/tensor.cpp)
    u = torch.rand(*s, device="cuda", generator=g)
    v = (1/64 + u * (1 - 1/64)) * torch.where(torch.rand(*s, device="cuda", generator=g) < 0.5, -1.0, 1.0)
    return v.to(dt)
print("#", torch.cuda.get_device_name())
for tokens, n_out, n_in in [(8192, 2048, 8192), (16384, 16384, 4096)]:
    for kind in ("randn", "benchlike"):
        mk = (lambda *s: torch.randn(*s, device="cuda", dtype=dt, generator=g)) if kind == "randn" else benchlike
        dacc, x = mk(tokens, n_out), mk(tokens, n_in)
        o = torch.empty(n_out, n_in, device="cuda", dtype=dt)
        rows = {"torch.mm": lambda: torch.mm(dacc.t(), x, out=o), "ef default": lambda: dflt(dacc.t(), x, out=o),
                "ef pinned": lambda: pinned(dacc.t(), x, out=o)}
        t = {k: [] for k in rows}
        for _ in range(5):
            for k, f in rows.items(): t[k].append(b(f))
        base = t["torch.mm"]
        print(f"{n_out},{n_in},{tokens} {kind}: " + " | ".join(
            f"{k} {statistics.median(v):.4f} ms {statistics.median([a / c for a, c in zip(v, base)]):.3f}x" for k, v in t.items()), flush=True)
