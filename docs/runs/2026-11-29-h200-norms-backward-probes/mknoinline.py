import re, sys
# usage: mknoinline.py in.cu out.cu MIN_BLOCKS: the column tree as a call of its own (its registers
# apart from the row loop's), the kernel held to MIN_BLOCKS blocks an SM
src, dst, minb = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = open(src).read()
hdr = open('../templates/common/row_reduce.cuh').read()
i = hdr.index('template <int C, int ITEMS, int VEC, int THREADS, int GROUP, int F, class ColOf, class Store>\n__device__ __forceinline__ void ef_col_sums_finish(')
j = hdr.index('\n}\n', i) + 3
fn = hdr[i:j].replace('__device__ __forceinline__ void ef_col_sums_finish(', '__device__ __noinline__ void ef_col_sums_finish_call(')
k = t.index('extern "C" __global__')
t = t[:k] + '// variant: the column tree as a call of its own\n' + fn + '\n' + t[k:]
t = t.replace('  ef_col_sums_finish<', '  ef_col_sums_finish_call<')
if minb > 0:
    t = t.replace('__launch_bounds__(THREADS)', f'__launch_bounds__(THREADS, {minb})')
open(dst, 'w').write(t)
