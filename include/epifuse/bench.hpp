#pragma once
/// Benchmarks (DESIGN §8: not tests). Every figure is a ratio to a baseline
/// measured in the same run: the copy ceiling for exactly the bytes the fused
/// kernel must move, and the same chain unfused.
#include <optional>
#include <string>
#include <vector>

#include "epifuse/jit.hpp"

namespace epifuse {

struct BenchOptions {
  int repeats = 30;            ///< timed batches; the median is reported
  int batch = 5;               ///< launches per timed batch
  bool tune = true;            ///< autotune the fused kernel's tile first
  bool unfused = true;         ///< time the one-kernel-per-op baseline
  bool sweep = true;           ///< block-size sweep table
  std::uint64_t data_seed = 1;
  LaunchArgs args{};
};

/// One row of an elementwise kernel's block-size sweep.
struct SweepRow {
  ElementwiseTile tile;
  double ms = 0, gbps = 0, of_copy = 0;
};

struct BenchReport {
  std::string device;
  Shape shape;
  double bytes = 0;              ///< the fewest bytes the fused kernel must move (reads + writes)
  double copy_ms = 0, copy_gbps = 0;  ///< cuMemcpyDtoD of bytes/2 (so bytes moved in all)
  TileConfig tile;               ///< the fused kernel's (tuned) tile
  double fused_ms = 0, fused_gbps = 0, fused_of_copy = 0;
  std::optional<double> unfused_ms;  ///< one generated kernel per op, intermediates in memory
  int unfused_kernels = 0;
  double speedup_vs_unfused = 0;
  std::vector<SweepRow> sweep;
  double compile_ms = 0;         ///< cold NVRTC compile of the fused kernel
  double hit_us = 0;             ///< key built from the spec + cache lookup
  double launch_us = 0;          ///< host time of one launch of a cached kernel
  int registers = 0;
};

/// Tunes the tile of (spec, shape) on random inputs (Jit::tune: candidates
/// compiled in parallel, every one timed, the best few again) and says how long
/// it took, compiles included. The choice is remembered by `jit`.
struct TuneReport {
  Jit::TuneResult result;
  double seconds = 0;        ///< wall time, compiles included
  std::size_t candidates = 0;
};
TuneReport tune_on_random_data(Jit& jit, const KernelSpec& spec, const Shape& shape, std::uint64_t data_seed = 1,
                               const LaunchArgs& args = {});

/// Runs the benchmark on the current GPU (RuntimeError without one).
BenchReport bench(Jit& jit, const KernelSpec& spec, const Shape& shape, const BenchOptions& options = {});

}  // namespace epifuse
