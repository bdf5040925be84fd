// EPIFUSE_HD: a function that is THE one definition for the kernels (NVRTC,
// hipRTC) and the reference evaluator (g++) alike: philox.cuh, tf32.cuh. Those
// headers use built-in types only: no standard headers are available to NVRTC.
#pragma once

#ifndef EPIFUSE_HD
#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(__HIPCC__) || defined(__HIPCC_RTC__)
#define EPIFUSE_HD __host__ __device__ __forceinline__
#else
#define EPIFUSE_HD inline
#endif
#endif
