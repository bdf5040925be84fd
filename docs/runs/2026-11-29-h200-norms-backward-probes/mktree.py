import re, sys
# usage: mktree.py in.cu out.cu MIN_BLOCKS
src, dst, minb = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = open(src).read()
assert "constexpr int ROWS = THREADS / GROUP" in t
m = re.search(r"constexpr int THREADS = (\d+), VEC = (\d+), ITEMS = (\d+);", t)
threads, vec, items = map(int, m.groups())
assert re.search(r"constexpr int GROUP = (\d+);", t).group(1) == str(threads), "ROWS == 1 only"
ring = int(re.search(r"constexpr int RING = (\d+)", t).group(1))
stage = int(re.search(r"RING_STAGE = (\d+) \* ITEMS", t).group(1)) * items * threads * vec
C = int(re.search(r"float cs\[(\d+)\]\[ITEMS\]\[VEC\];", t).group(1))
need = C * items * vec * threads * 4
assert ring * stage >= need, (ring * stage, need)
t = t.replace("__launch_bounds__(THREADS)", f"__launch_bounds__(THREADS, {minb})")
k = t.index('extern "C" __global__')
t = t[:k] + open("tree_smem.cuh").read() + "\n" + t[k:]
t = re.sub(r"ef_col_sums_finish<(\d+), ITEMS, VEC, THREADS, GROUP, (\d+)>\(cs, col_buf,",
           r"ef_col_sums_finish_smem<\1, ITEMS, VEC, THREADS, \2>(cs, reinterpret_cast<float4*>(ring) + threadIdx.x,", t)
assert "ef_col_sums_finish_smem<" in t
open(dst, "w").write(t)
print(dst, "ring bytes", ring * stage, "cs", need)
