// tf32 rounding of f32 GEMM operands, for the kernels and the reference
// evaluator alike (THE one definition, as philox.cuh is for dropout).
#pragma once
#include "common/host_device.cuh"

// An f32 (as bits) rounded to tf32: 10 mantissa bits, to nearest, ties to
// even, as the copy engine rounds f32 into a TFLOAT32 tensor map for wgmma and
// as cuBLAS's tf32 GEMMs round (both measured on an H100: docs/hopper.md); Inf
// and NaN stay as they are. A few integer instructions: the mma.sync kernels
// used cvt.rna (ties away) on every fragment register, and ptxas took twice as
// long over them (docs/perf/host.md, "NVRTC cold compile").
EPIFUSE_HD unsigned int ef_round_tf32_bits(unsigned int u) {
  return (u & 0x7f800000u) != 0x7f800000u ? (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u : u;
}
