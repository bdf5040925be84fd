import re, sys
# usage: mklean.py in.cu out.cu INFLIGHT: the column tree as ef_col_sums_finish_lean (lean_tree.cuh)
src, dst, inflight = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = open(src).read()
k = t.index('extern "C" __global__')
import os
t = t[:k] + open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'lean_tree.cuh')).read() + '\n' + t[k:]
t, n = re.subn(r'ef_col_sums_finish<(\d+), ITEMS, VEC, THREADS, GROUP, (\d+)>\(',
               rf'ef_col_sums_finish_lean<\1, ITEMS, VEC, THREADS, GROUP, \2, {inflight}>(', t)
assert n == 1
open(dst, "w").write(t)
