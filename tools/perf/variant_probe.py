"""Probe variants of an emitted wgmma kernel, for `epifuse bench --variant`: the same
kernel with its epilogue taken apart, to find what the epilogue costs and why.

    build/epifuse emit CHAIN --shape M,N,K --tile T --standalone > k.cu
    python3 tools/perf/variant_probe.py k.cu noepi sumonly      # writes k_noepi.cu, k_sumonly.cu
    build/epifuse bench CHAIN --shape M,N,K --tile T --variant k_noepi.cu --variant k_sumonly.cu

Probes (docs/perf/gemm.md):
  noepi    no epilogue at all: the accumulators are dead after the mainloop. Read its
           TFLOP/s first: ptxas may then drop HGMMAs whose results nothing reads
           (H200: 1250 TFLOP/s at 4096^3, above the tensor peak); sumonly
           keeps them live
  sumonly  the accumulators summed and compared with a constant, nothing staged or
           stored: the mainloop with live accumulators and no epilogue work
  nostore  the epilogue as it is, its global stores made conditional on a value the
           output never takes (the staged quads' stores and the fragment epilogue's)
  draws8   the staged quads' dropout draws from one Philox call per EIGHT elements: quads
           i = 0, 2 of a lane make the call and keep its words' high halves, quads
           1, 3 take the low halves of the same call (16-bit draws, as a contract of
           one call per eight elements would; the mask is not docs/design.md §4's)
  nodraws  the staged quads' draws from one multiply-hash of the position instead of
           Philox (the keep test, select and scale stay): what dropout costs besides
           Philox
  bits     the staged quads' draws from keep bits read from memory (a static device array
           of 2^28 bits, 64 columns a word, zero: every element dropped) instead of
           Philox: the epilogue's side of docs/dropout-mask.md on the staged path
  fragbits a dropout-FREE chain's fragment epilogue with its accumulator first
           multiplied by dropout(0.1)'s factor from the same bits: what docs/dropout-mask.md's
           epilogue would cost where dropout takes the fragment epilogue (time it against
           the dropout chain's fused kernel, both on the shape and tile of the emit)
  timeline the kernel as it is, with clock64 stamps in the first consumer thread of each
           block (each tile's start and mainloop end, the block's end) printed as one
           `TL` line per block on the 21st launch (summarize with timeline_summary.py)

The probes store nothing, so `bench` reports their outputs as a MISMATCH against the
fused kernel's (the output is poisoned first) and exits 1: that is expected; their rows
are timed all the same. Single and dual GEMM kernels of templates/gemm_sm90.cu.in.
"""
import os
import re
import sys

EPILOGUE = "    if constexpr (FRAGMENT_EPILOGUE) {"


def block_end(s, start):
    """Index just past the brace block that opens at the first '{' at or after `start`."""
    depth = 0
    for j in range(s.index("{", start), len(s)):
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    raise ValueError("unbalanced braces")


def epilogue_span(s):
    """(start, end) of the whole epilogue: the fragment block and its `else` block."""
    if s.count(EPILOGUE) != 1:
        raise ValueError("not a wgmma kernel of this template (no FRAGMENT_EPILOGUE block)")
    start = s.index(EPILOGUE)
    first = block_end(s, start)
    rest = s[first:]
    if not rest.lstrip().startswith("else"):
        raise ValueError("the FRAGMENT_EPILOGUE block has no else")
    return start, block_end(s, first)


def noepi(s):
    start, end = epilogue_span(s)
    return s[:start] + "    // PROBE noepi: no epilogue\n" + s[end:]


def sumonly(s):
    start, end = epilogue_span(s)
    probe = """    // PROBE sumonly: accumulators live (summed), nothing staged or stored
    float sum = 0.0f;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          sum += acc[mi][ni][e];
          if constexpr (DUAL) sum += acc1[mi][ni][e];
        }
    if (sum == 1234.5f) *reinterpret_cast<unsigned char*>(p.out0) = (unsigned char)threadIdx.x;  // never taken
"""
    return s[:start] + probe + s[end:]


def nostore(s):
    out = s
    replaced = 0
    for old, new in (("    if (row < p.m && col0 + 3 < p.n) {",
                      "    if (out0_q[0] == 1234.5f && out0_q[3] == -7.25f && row < p.m && col0 + 3 < p.n) {"),
                     ("    } else if (row < p.m) {",
                      "    } else if (out0_q[1] == 1234.5f && row < p.m && col0 + 3 >= p.n) {"),
                     ("          if (row < p.m && col < p.n) {",
                      "          if (v.x == 0x12345u && v.w == 0x54321u && row < p.m && col < p.n) {")):
        replaced += out.count(old)
        out = out.replace(old, new)
    if replaced == 0:
        raise ValueError("no epilogue stores found to guard")
    return out


DRAWS = re.compile(r"(?P<pad> *)unsigned d(?P<k>\d+)\[4\];  // dropout stream (?P<stream>\d+): one Philox call per four elements\n"
                   r"(?P=pad)\{\n(?P=pad)  const ef_u32x4 w = ef_philox4_draws\((?P<args>[^\n]*)>> 2\);\n")
QUAD_LOOP = "#pragma unroll\n        for (int i = 0; i < 4; ++i) {\n          const int q = lane + 32 * i"


def replace_draws(s, note, lines):
    """Each staged quad's Philox call (DRAWS) replaced: `lines(k)` are the statements
    that set `ef_u32x4 w` for dropout stream k, whose words the quad's d<k>[] take."""
    def block(m):
        pad, k = m.group("pad"), m.group("k")
        body = "".join(f"{pad}  {line}\n" for line in lines(k, m.group("args")))
        return f"{pad}unsigned d{k}[4];  // PROBE {note}\n{pad}{{\n{body}"
    return DRAWS.sub(block, s)


def draws8(s):
    keys = [m.group("k") for m in DRAWS.finditer(s)]
    if not keys or s.count(QUAD_LOOP) != 1:
        raise ValueError("no staged quad draws found (a dropout chain on the staged wgmma epilogue?)")
    decl = "".join(f"        ef_u32x4 probe_w{k};\n" for k in keys)
    return replace_draws(s.replace(QUAD_LOOP, decl + QUAD_LOOP), "draws8: one Philox call per eight elements",
                         lambda k, args: [f"if ((i & 1) == 0) probe_w{k} = ef_philox4_draws({args}>> 3);",
                                          "const unsigned sh = (i & 1) ? 16u : 0u;", "ef_u32x4 w;"]
                         + [f"w.{c} = (probe_w{k}.{c} << sh) & 0xFFFF0000u;" for c in "xyzw"])


def nodraws(s):
    if not DRAWS.search(s):
        raise ValueError("no staged quad draws found (a dropout chain on the staged wgmma epilogue?)")
    return replace_draws(s, "nodraws: a multiply-hash instead of Philox",
                         lambda k, args: ["const unsigned h = (unsigned)(row * p.n + col0) * 0x9E3779B9u;", "ef_u32x4 w;",
                                          "w.x = h;", "w.y = h ^ 0x5bd1e995u;", "w.z = h + 0x7f4a7c15u;",
                                          "w.w = h ^ 0x94d049bbu;"])


BITS_HEAD = """// PROBE: keep bits, 64 columns of a row a word (docs/dropout-mask.md); zero, so every
// element is dropped: the outputs are wrong, the reads are what is timed.
__device__ unsigned long long ef_probe_bits[1 << 22];
"""


def with_bits_head(s):
    kernel = s.index('extern "C" __global__')
    return s[:kernel] + BITS_HEAD + s[kernel:]


def bits(s):
    if not DRAWS.search(s):
        raise ValueError("no staged quad draws found (a dropout chain on the staged wgmma epilogue?)")
    lines = ["const unsigned long long probe_i = (unsigned long long)(row * p.n + col0);",
             "const unsigned probe_b = (unsigned)(ef_probe_bits[(probe_i >> 6) & ((1u << 22) - 1u)] >> (probe_i & 63u));",
             "ef_u32x4 w;"] + [f"w.{c} = (probe_b & {1 << j}u) ? 0xFFFFFFFFu : 0u;" for j, c in enumerate("xyzw")]
    return with_bits_head(replace_draws(s, "bits: keep bits read from memory instead of Philox", lambda k, args: lines))


FRAG_ROWS = ("          for (int h = 0; h < 2; ++h) {\n"
             "            const long long row = m0 + wm + mi * 64 + warp * 16 + (lane >> 2) + h * 8;\n")
FRAG_CALL = re.compile(r"(ef_[0-9a-f]+_epilogue\(p, )ch\[f\]\[2 \* h \+ e\]")


def fragbits(s):
    if "constexpr bool FRAGMENT_EPILOGUE = true;" not in s or s.count(FRAG_ROWS) != 1 or len(FRAG_CALL.findall(s)) != 1:
        raise ValueError("no fragment epilogue of this template found (a dropout-free chain?)")
    # The half of the row's 64-bit word that holds columns f * 8 .. f * 8 + 7: one
    # 32-bit register a lane instead of two.
    word = ("            const unsigned probe_w = reinterpret_cast<const unsigned*>(ef_probe_bits)[(((unsigned long long)"
            "(row * p.n + n0 + c * 64) >> 6) & ((1u << 22) - 1u)) * 2 + (f >> 2)];  // PROBE fragbits\n")
    s = s.replace(FRAG_ROWS, FRAG_ROWS + word)
    s = FRAG_CALL.sub(r"\1ch[f][2 * h + e] * ef_dropout_factor((probe_w >> ((f & 3) * 8 + (lane & 3) * 2 + e) & 1u) * "
                      r"0xFFFFFFFFu, 429496832u, 1.1111112f)", s)
    return with_bits_head(s)


TIMELINE_HEAD = """__device__ unsigned ef_probe_launches;
__device__ __forceinline__ unsigned long long ef_probe_gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
"""


def timeline(s):
    """clock64 stamps of the first consumer thread: 4 tiles at most a block."""
    kernel = s.index('extern "C" __global__')
    body = s.index("smem_raw[];\n", kernel) + len("smem_raw[];\n")
    loop = "    ++local;\n"
    wait0 = "    ef_wgmma_wait<0>();\n"
    tail = "  // No block leaves while its peer may still copy into it or arrive on its barriers.\n"
    if any(s.count(x) != 1 for x in (loop, wait0, tail)):
        raise ValueError("not a wgmma kernel of this template")
    s = (s[:kernel] + TIMELINE_HEAD + s[kernel:body]
         + "  const unsigned long long tl_g0 = ef_probe_gtime();\n  const long long tl_c0 = clock64();\n"
           "  long long tl_t[8] = {0, 0, 0, 0, 0, 0, 0, 0};\n" + s[body:])
    s = s.replace(loop, loop + "    if (threadIdx.x == 128 && local < 4) tl_t[2 * local] = clock64() - tl_c0;\n")
    s = s.replace(wait0, wait0 + "    if (threadIdx.x == 128 && local < 4) tl_t[2 * local + 1] = clock64() - tl_c0;\n")
    stamp = """  if (threadIdx.x == 128) {
    const long long tl_end = clock64() - tl_c0;
    const unsigned long long tl_g1 = ef_probe_gtime();
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (atomicAdd(&ef_probe_launches, 1u) / gridDim.x == 20)
      printf("TL %d %u %llu %llu %lld %lld %lld %lld %lld %lld %lld %lld %lld\\n", blockIdx.x, smid, tl_g0, tl_g1, tl_end,
             tl_t[0], tl_t[1], tl_t[2], tl_t[3], tl_t[4], tl_t[5], tl_t[6], tl_t[7]);
  }
"""
    return s.replace(tail, stamp + tail)


PROBES = {"noepi": noepi, "sumonly": sumonly, "nostore": nostore, "draws8": draws8, "nodraws": nodraws,
          "bits": bits, "fragbits": fragbits, "timeline": timeline}


def main():
    if len(sys.argv) < 3 or any(p not in PROBES for p in sys.argv[2:]):
        sys.exit(f"usage: {sys.argv[0]} KERNEL.cu PROBE... (probes: {', '.join(PROBES)})")
    path = sys.argv[1]
    text = open(path).read()
    base, ext = os.path.splitext(path)
    for name in sys.argv[2:]:
        try:
            probe = PROBES[name](text)
        except ValueError as e:
            sys.exit(f"{path}: {name}: {e}")
        with open(f"{base}_{name}{ext}", "w") as f:
            f.write(probe)
        print(f"{base}_{name}{ext}")


if __name__ == "__main__":
    main()
