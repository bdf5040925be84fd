#pragma once
/// Benchmarks (docs/design.md §8: not tests). Every figure is a ratio to a baseline
/// measured in the same run: the copy ceiling for exactly the bytes the fused
/// kernel must move, and the same chain unfused; for GEMM chains, cuBLAS(Lt)
/// alone and the baselines built around it (docs/bench.md).
///
/// The epifuse_bench target's, not the library's: `epifuse bench` and `tune`,
/// and the tests of them, link it; it is not installed (docs/architecture.md).
#include <optional>
#include <string>
#include <vector>

#include "epifuse/jit.hpp"

namespace epifuse {

struct BenchOptions {
  int repeats = 30;            ///< timed batches; the median is reported
  int batch = 5;               ///< launches per timed batch
  bool tune = true;            ///< autotune the fused kernel's tile first
  /// The fused kernel's tile (`--tile`): no tuning; nullopt: tuned, or the
  /// family default when `tune` is off.
  std::optional<TileConfig> tile;
  bool unfused = true;         ///< time the one-kernel-per-op baseline
  bool sweep = true;           ///< block-size sweep table
  bool cublas = true;          ///< GEMM chains: the cuBLASLt baselines (when libcublasLt loads)
  std::uint64_t data_seed = 1;
  LaunchArgs args{};
  /// Other sources of the fused kernel, each timed as a row of its own in turns
  /// with the others (`--variant`, Note [Variant kernels]): GEMM chains among
  /// their cuBLAS rows, elementwise and row chains against the fused kernel.
  struct Variant {
    std::string label;  ///< what the table shows (the file's name)
    std::string text;   ///< the kernel source
  };
  std::vector<Variant> variants;
};

/// One row of an elementwise kernel's block-size sweep.
struct SweepRow {
  ElementwiseTile tile;
  double ms = 0, gbps = 0, of_copy = 0;
};

/// One row of a GEMM chain's table: a way of computing the chain (or the GEMM
/// alone), timed like the fused kernel.
struct GemmRow {
  std::string key;    ///< JSON key: cublas, fused, fused_no_dropout, cublaslt_epilogue, cublas_then_epilogue, unfused, variant:<file>
  std::string label;  ///< what the text table shows
  std::string detail; ///< the tile chosen, the cuBLASLt epilogue used, ...
  int kernels = 1;    ///< launches per run
  double ms = 0;
  double tflops = 0;  ///< 2*M*N*K / time
  std::optional<double> of_cublas;  ///< ms / cuBLAS alone's ms; absent without cuBLAS
  /// Device memory the row's path holds while it runs: operands, epilogue
  /// inputs, GEMM results and intermediates it writes, outputs (0: not counted).
  std::size_t bytes = 0;
};

/// Two rows' first outputs compared on the same inputs (a check that the
/// baselines compute the chain: layouts, bias orientation, dropout masks).
struct GemmCheck {
  std::string what;        ///< "fused vs cublas_then_epilogue"
  double max_abs_diff = 0;
  double max_abs = 0;      ///< the largest |value| of the first row's output
  bool ok = true;          ///< max_abs_diff <= max_abs / 32 (rounding, never a layout error)
};

/// The GEMM part of a bench report (mainloops gemm and dual_gemm).
struct GemmBenchReport {
  double flops = 0;                  ///< 2*M*N*K
  std::string cublaslt;              ///< "cuBLASLt 13.0.2 (path)"; empty when it was not used
  std::vector<GemmRow> rows;         ///< cuBLAS alone first when it ran, then the fused kernel
  std::vector<std::string> skipped;  ///< one line per baseline not measured, saying why
  std::vector<GemmCheck> checks;
};

/// An elementwise or row chain's `--variant` row: timed in turns with the fused
/// kernel on its buffers, every output compared with the fused kernel's.
struct VariantRow {
  std::string label;             ///< the file's name
  double ms = 0, gbps = 0, of_copy = 0;
  double fused_ms = 0;           ///< the fused kernel's median in the same turns
  double max_abs_diff = 0;       ///< over every output, against the fused kernel's
  double max_abs = 0;            ///< the largest |value| of the fused outputs
  bool ok = true;                ///< max_abs_diff <= max_abs / 32 (0 for a change that keeps the arithmetic)
  std::string skipped;           ///< why the variant did not run (no row then)
};

struct BenchReport {
  std::string device;
  Shape shape;
  double bytes = 0;              ///< the fewest bytes the fused kernel must move (reads + writes)
  double copy_ms = 0, copy_gbps = 0;  ///< cuMemcpyDtoD of bytes/2 (so bytes moved in all)
  TileConfig tile;               ///< the fused kernel's (tuned) tile
  double fused_ms = 0, fused_gbps = 0, fused_of_copy = 0;
  std::optional<double> unfused_ms;  ///< one generated kernel per op, intermediates in memory
                                     ///< (GEMM chains: cuBLAS, then one kernel per op)
  int unfused_kernels = 0;
  double speedup_vs_unfused = 0;
  std::vector<SweepRow> sweep;
  /// Row kernels with a persistent grid: the same tile with one block per row.
  std::optional<double> per_row_grid_ms;
  double compile_ms = 0;         ///< cold NVRTC compile of the fused kernel (or its disk read)
  bool compile_from_disk = false;  ///< the first compile found the kernel in the disk cache
  /// A fresh Jit (as a new process would) finding the fused kernel on disk: key,
  /// disk read, module load and launch call, until the launch returns; nullopt
  /// with the disk cache off.
  std::optional<double> disk_first_launch_ms;
  double hit_us = 0;             ///< key built from the spec + cache lookup
  double launch_us = 0;          ///< host time of one launch of a cached kernel
  int registers = 0;
  std::optional<GemmBenchReport> gemm;  ///< GEMM chains only
  std::vector<VariantRow> variants;     ///< elementwise and row chains' `--variant` rows
};

/// Tunes the tile of (spec, shape) on random inputs (Jit::tune: candidates
/// compiled in parallel, every one timed, the best few again) and says how long
/// it took, compiles included. The choice is remembered by `jit`. Empty
/// `candidates` means the family's own list.
struct TuneReport {
  Jit::TuneResult result;
  double seconds = 0;        ///< wall time, compiles included
  std::size_t candidates = 0;
};
TuneReport tune_on_random_data(Jit& jit, const KernelSpec& spec, const Shape& shape, std::uint64_t data_seed = 1,
                               const LaunchArgs& args = {}, std::vector<TileConfig> candidates = {});

/// Runs the benchmark on the current GPU (RuntimeError without one).
BenchReport bench(Jit& jit, const KernelSpec& spec, const Shape& shape, const BenchOptions& options = {});

}  // namespace epifuse
