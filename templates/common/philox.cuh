// Philox4x32-10 and the dropout keep rule: docs/design.md §4, bit-exact on every kernel
// and on the CPU. This is THE one definition: the reference evaluator includes
// it from src/reference (g++), kernels get it through NVRTC/hipRTC. No standard
// headers are available there, so only built-in types are used.
//
// Note [Triton compatibility mode]
// Verified against triton-lang/triton python/triton/language/random.py (Triton
// 3.x: philox_impl, philox, randint4x, randint, rand, uint32_to_uniform_float):
//  - round: c0' = umulhi(0xCD9E8D57, c2) ^ c1 ^ k0, c1' = 0xCD9E8D57 * c2,
//    c2' = umulhi(0xD2511F53, c0) ^ c3 ^ k1, c3' = 0xD2511F53 * c0; then
//    k0 += 0x9E3779B9, k1 += 0xBB67AE85; 10 rounds. Same as Random123.
//  - philox(seed, ...): seed.to(uint64), key = {seed & 0xffffffff, seed >> 32}.
//  - randint4x(seed, offset) = philox(seed, offset, 0, 0, 0); randint takes word 0.
//  - rand(seed, offset) first does offset.to(tl.uint32, bitcast=True), which only
//    compiles for 32-bit offsets (a 64-bit bitcast to 32 bits raises "Cannot
//    bitcast data-type of size 64 to 32"). So Triton's counter is {off, 0, 0, 0}
//    with a 32-bit off; docs/design.md's {off_lo, off_hi, 0, 0} equals it for every
//    offset + i < 2^32 and is an epifuse extension beyond (Triton has no answer).
//  - uint_to_uniform_float: x = bitcast int32; x = x < 0 ? -x - 1 : x;
//    return x * 4.6566127342e-10. That fp32 constant is 0x2FFFFFFF
//    (0x1.fffffep-32, just below 2^-31), as docs/design.md §4 says, so r < 1 always:
//    x converts to fp32 by round-to-nearest-even (2^31 - 1 becomes 2^31) and
//    r = float(x) * 0x1.fffffep-32 <= 1 - 2^-24. Pinned to real Triton (3.6.0
//    on an H100): tests/golden/triton_dropout.json, made by
//    tools/triton_golden.py, holds tl.rand values, uniforms of edge words,
//    tutorial dropout masks, and the 421 offsets among 2^32 draws where 2^-31
//    and 0x2FFFFFFF disagree about r > p; tests/unit/test_philox.cpp compares
//    with it bit for bit.
//  - Triton's dropout tutorial keeps `r > p` (p an fp32 scalar).
// Deviation: p == 0 keeps every element in both modes (docs/design.md: "p = 0 keeps
// all"); bare Triton `r > 0` would drop the two draws with r == 0 (0 and
// 0xFFFFFFFF), a 2^-31 chance per element.
#pragma once
#include "common/host_device.cuh"

/// Four 32-bit words: a Philox counter or its output.
struct ef_u32x4 {
  unsigned int x, y, z, w;
};

/// Two 32-bit words: a Philox key.
struct ef_u32x2 {
  unsigned int x, y;
};

// Philox4x32 constants (Random123; docs/design.md §4).
#define EF_PHILOX_M0 0xD2511F53u
#define EF_PHILOX_M1 0xCD9E8D57u
#define EF_PHILOX_W0 0x9E3779B9u
#define EF_PHILOX_W1 0xBB67AE85u

// hi32(a * b): the 64-bit product compiles to one mul.wide / mul.hi on GPUs.
EPIFUSE_HD unsigned int ef_mulhi32(unsigned int a, unsigned int b) {
  return (unsigned int)(((unsigned long long)a * (unsigned long long)b) >> 32);
}

// One round: {hi(M1*z) ^ y ^ k.x, M1*z, hi(M0*x) ^ w ^ k.y, M0*x}.
// On NVIDIA GPUs each product is one PTX mul.wide.u32, split into its halves:
// ptxas makes it one IMAD.WIDE.U32. From C++, __umulhi plus the low product
// compiled to separate IMAD.HI and IMAD (4 instructions per element more), and
// a 64-bit multiply added a zero high word after each IMAD.WIDE
// (docs/perf/elementwise.md). HIP keeps __umulhi.
EPIFUSE_HD ef_u32x4 ef_philox_round(ef_u32x4 c, ef_u32x2 k) {
  ef_u32x4 r;
#if (defined(__CUDA_ARCH__) || defined(__CUDACC_RTC__)) && !defined(__HIPCC__) && !defined(__HIPCC_RTC__)
  unsigned int hi0, hi1;
  asm("{\n\t.reg .b64 t;\n\tmul.wide.u32 t, %2, %3;\n\tmov.b64 {%0, %1}, t;\n\t}"
      : "=r"(r.y), "=r"(hi1) : "r"(c.z), "r"(EF_PHILOX_M1));
  asm("{\n\t.reg .b64 t;\n\tmul.wide.u32 t, %2, %3;\n\tmov.b64 {%0, %1}, t;\n\t}"
      : "=r"(r.w), "=r"(hi0) : "r"(c.x), "r"(EF_PHILOX_M0));
  r.x = hi1 ^ c.y ^ k.x;
  r.z = hi0 ^ c.w ^ k.y;
  return r;
#elif defined(__HIP_DEVICE_COMPILE__)
  r.x = __umulhi(EF_PHILOX_M1, c.z) ^ c.y ^ k.x;
  r.z = __umulhi(EF_PHILOX_M0, c.x) ^ c.w ^ k.y;
#else
  r.x = ef_mulhi32(EF_PHILOX_M1, c.z) ^ c.y ^ k.x;
  r.z = ef_mulhi32(EF_PHILOX_M0, c.x) ^ c.w ^ k.y;
#endif
  r.y = EF_PHILOX_M1 * c.z;
  r.w = EF_PHILOX_M0 * c.x;
  return r;
}

/// Philox4x32-10: ten rounds, key += {W0, W1} between rounds.
EPIFUSE_HD ef_u32x4 ef_philox4x32_10(ef_u32x4 counter, ef_u32x2 key) {
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    counter = ef_philox_round(counter, key);
    key.x += EF_PHILOX_W0;
    key.y += EF_PHILOX_W1;
  }
  return counter;
}

/// key = {seed_lo, seed_hi} (both modes).
EPIFUSE_HD ef_u32x2 ef_philox_key(unsigned long long seed) {
  ef_u32x2 k;
  k.x = (unsigned int)seed;
  k.y = (unsigned int)(seed >> 32);
  return k;
}

/// Word w (0..3) of r, without dynamic indexing (keeps r in registers).
EPIFUSE_HD unsigned int ef_u32x4_word(ef_u32x4 r, unsigned int w) {
  return w == 0u ? r.x : w == 1u ? r.y : w == 2u ? r.z : r.w;
}

// ---- default mode (philox4): one Philox call serves elements 4q .. 4q+3 ----

/// counter = {q_lo, (q_hi & 0xFFFF) | (stream << 16), offset_lo, offset_hi}, q = i >> 2.
EPIFUSE_HD ef_u32x4 ef_philox4_counter(unsigned long long q, unsigned int stream,
                                       unsigned long long offset) {
  ef_u32x4 c;
  c.x = (unsigned int)q;
  c.y = ((unsigned int)(q >> 32) & 0xFFFFu) | (stream << 16);
  c.z = (unsigned int)offset;
  c.w = (unsigned int)(offset >> 32);
  return c;
}

/// The four draws of elements 4q .. 4q+3 (word w is element 4q + w).
EPIFUSE_HD ef_u32x4 ef_philox4_draws(unsigned long long seed, unsigned long long offset,
                                     unsigned int stream, unsigned long long q) {
  return ef_philox4x32_10(ef_philox4_counter(q, stream, offset), ef_philox_key(seed));
}

/// draw(i) = word (i & 3) of Philox(counter(i >> 2, stream, offset), key(seed)).
EPIFUSE_HD unsigned int ef_philox4_draw(unsigned long long seed, unsigned long long offset,
                                        unsigned int stream, unsigned long long i) {
  return ef_u32x4_word(ef_philox4_draws(seed, offset, stream, i >> 2), (unsigned int)(i & 3u));
}

// Note [Seeds on the device]
// A dropout kernel's parameters hold seed and offset and a pointer rng_state.
// Null, the seed and offset are the launch's; else the kernel reads them from
// the device, seed = rng_state[0] and offset = rng_state[1] + the launch's
// offset, so a launch recorded in a CUDA graph draws fresh masks on every
// replay when the graph refills rng_state (PyTorch fills it from its
// generator: docs/python.md). A kernel reads them into `rng` before its
// loops (the GEMM and row kernels at their start, the wgmma kernel's
// consumers at theirs, the column-sum kernel before its walk of the rows;
// the flat kernel, whose default grid runs its loop once, at each step), and
// every draw takes rng.seed and rng.offset. Read where each draw is, the
// loads and the null test were repeated for every quad of every epilogue
// chunk (NVVM does not move a global load across the epilogue's barriers and
// stores): 2-8% of a dropout GEMM's time (docs/perf/gemm.md, "Seed and
// offset read once").
struct ef_rng_state {
  unsigned long long seed, offset;
};
#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(__HIPCC__) || defined(__HIPCC_RTC__)
template <class Params>
__device__ __forceinline__ ef_rng_state ef_rng_read(const Params& p) {
  if (!p.rng_state) return {p.seed, p.offset};
  return {__ldg(p.rng_state), __ldg(p.rng_state + 1) + p.offset};
}
#endif

/// keep = (draw >> 8) >= thr, thr = llround(p * 2^24) (host, double); thr 0 keeps
/// all, thr 2^24 drops all.
EPIFUSE_HD bool ef_dropout_keep(unsigned int draw, unsigned int thr) {
  return (draw >> 8) >= thr;
}

/// The same test with the shift folded into the threshold: (draw >> 8) >= thr
/// iff draw >= thr * 2^8, which fits 32 bits for thr < 2^24 (p < 1; p = 1
/// never reaches a kernel's keep test). One instruction less per element.
EPIFUSE_HD bool ef_dropout_keep_scaled(unsigned int draw, unsigned int thr_times_256) {
  return draw >= thr_times_256;
}

/// keep ? scale : 0 for the kernels' scaled test; the caller multiplies the
/// value by it, so a dropped element is a * 0 as PyTorch's x * mask * scale
/// gives: 0 with a's sign, and NaN for a NaN or inf (NaN propagates through
/// every op). On the GPU the select is inline PTX, which the optimiser cannot
/// turn into keep ? a * scale : 0, so an add that follows contracts with the
/// multiply into one FFMA (docs/decisions.md).
EPIFUSE_HD float ef_dropout_factor(unsigned int draw, unsigned int thr_times_256, float scale) {
#if defined(__CUDA_ARCH__) || defined(__CUDACC_RTC__)
  float y;
  asm("{\n\t.reg .pred keep;\n\tsetp.hs.u32 keep, %1, %2;\n\tselp.f32 %0, %3, 0f00000000, keep;\n\t}"
      : "=f"(y)
      : "r"(draw), "r"(thr_times_256), "f"(scale));
  return y;
#else
  return ef_dropout_keep_scaled(draw, thr_times_256) ? scale : 0.0f;
#endif
}

// ---- compatibility mode (triton): tl.rand(seed, offset + i), keep = r > p ----

/// counter = {off_lo, off_hi, 0, 0}, off = offset + i (see Note above).
EPIFUSE_HD ef_u32x4 ef_triton_counter(unsigned long long off) {
  ef_u32x4 c;
  c.x = (unsigned int)off;
  c.y = (unsigned int)(off >> 32);
  c.z = 0u;
  c.w = 0u;
  return c;
}

/// draw(i) = word 0 of Philox({off_lo, off_hi, 0, 0}, key(seed)), off = offset + i (mod 2^64).
EPIFUSE_HD unsigned int ef_triton_draw(unsigned long long seed, unsigned long long offset,
                                       unsigned long long i) {
  return ef_philox4x32_10(ef_triton_counter(offset + i), ef_philox_key(seed)).x;
}

/// r = float(x < 0 ? -x - 1 : x) * 0x2FFFFFFF-as-float, x = int32 bitcast of draw
/// (-x - 1 == ~x); r in [0, 1 - 2^-24].
EPIFUSE_HD float ef_triton_uniform(unsigned int draw) {
  const unsigned int u = (draw & 0x80000000u) ? ~draw : draw;  // in [0, 2^31 - 1]
  return (float)(int)u * 0x1.fffffep-32f;                       // RNE convert, then one fp32 multiply
}

/// keep = p <= 0 || r > p, p the fp32 probability (p = 0 keeps all; p = 1 drops all).
EPIFUSE_HD bool ef_triton_keep(unsigned int draw, float p) {
  return p <= 0.0f || ef_triton_uniform(draw) > p;
}
