"""wgrad through the Python module (epifuse's GEMM, default tile, A = dacc read column-major)
against torch.mm(dacc.t(), x), in turns, random data; and the dbias column sum."""
import statistics, torch, triton.testing, epifuse
dt = torch.bfloat16
def b(f): return triton.testing.do_bench(f, return_mode="median")
chain = epifuse.load("scratch_dev/wgrad.json").compile()
g = torch.Generator(device="cuda").manual_seed(1)
print("#", torch.cuda.get_device_name())
for tokens, n_out, n_in in [(8192, 2048, 8192), (8192, 8192, 2048), (16384, 4096, 16384), (16384, 16384, 4096)]:
    # dW [n_out, n_in] = dacc[tokens, n_out]^T @ x[tokens, n_in]
    dacc = torch.randn(tokens, n_out, device="cuda", dtype=dt, generator=g)
    x = torch.randn(tokens, n_in, device="cuda", dtype=dt, generator=g)
    o1 = torch.empty(n_out, n_in, device="cuda", dtype=dt); o2 = torch.empty_like(o1)
    tm = lambda: torch.mm(dacc.t(), x, out=o1)
    ef = lambda: chain(dacc.t(), x, out=o2)
    tm(); ef()
    err = ((o1.float() - o2.float()).norm() / o1.float().norm()).item()
    r = []
    for _ in range(5):
        a_, c_ = b(tm), b(ef); r.append((a_, c_))
    ratios = sorted(c / a for a, c in r)
    db = lambda: dacc.sum(0)
    print(f"M',N',K' = {n_out},{n_in},{tokens}: torch.mm {statistics.median(a for a,_ in r):.4f} ms, epifuse "
          f"{statistics.median(c for _,c in r):.4f} ms, {statistics.median(ratios):.3f}x ({ratios[0]:.3f}-{ratios[-1]:.3f}); "
          f"rel err {err:.1e}; dacc.sum(0) {b(db):.4f} ms", flush=True)
