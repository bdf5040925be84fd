// epifuse bench: fused vs unfused vs the same-run copy ceiling (docs/perf/README.md:
// count the bytes, measure the ceiling in the same run, report ratios); GEMM chains
// add cuBLAS(Lt) and the baselines around it (bench_gemm.cpp, docs/bench.md).
#include "bench/bench.hpp"

#include <algorithm>
#include <chrono>

#include "backend/cuda_driver.hpp"
#include "bench/bench_device.hpp"
#include "bench/bench_specs.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/reference.hpp"

namespace epifuse {

namespace {

using backend::DeviceBuffer;
using bench_detail::DeviceTensors;
using bench_detail::upload;

double elements(const std::vector<std::int64_t>& dims) {
  double n = 1;
  for (auto d : dims) n *= static_cast<double>(d);
  return n;
}

// The fewest bytes a fused kernel must move: each input read once, each output
// written once ([M,N], or N elements for a col_sum and M for a row reduction).
double required_bytes(const KernelSpec& spec, const Shape& shape) {
  double bytes = 0;
  for (const auto& in : required_inputs(spec, shape)) bytes += elements(in.shape) * static_cast<double>(size_of(in.dtype));
  for (const Output& o : spec.graph.outputs())
    bytes += elements(operand_shape(spec.graph.node(o.value).broadcast, shape)) * static_cast<double>(size_of(o.dtype));
  return bytes;
}

// Copy ceiling: exactly the bytes the fused kernel moves (read + write).
void measure_copy(BenchReport& r, const BenchOptions& opt) {
  auto& drv = backend::cuda();
  const std::size_t half = static_cast<std::size_t>(r.bytes / 2) / 16 * 16;
  DeviceBuffer src(half), dst(half);
  src.fill_bytes(0x3C);
  r.copy_ms = backend::median_ms([&] { drv.copy_device(dst.ptr(), src.ptr(), half); }, opt.repeats, opt.batch);
  r.copy_gbps = 2.0 * static_cast<double>(half) / (r.copy_ms * 1e6);
}

double time_kernel(Jit& jit, const CompiledKernel& k, const DeviceTensors& t, const Shape& shape,
                   const BenchOptions& opt, int repeats) {
  return backend::median_ms([&] { jit.launch(k, t.bindings, shape, opt.args); }, repeats, opt.batch);
}

// The block-size sweep of an elementwise kernel at the tuned vector width and
// stages (none where a block size has no room for them).
void sweep(BenchReport& r, Jit& jit, const KernelSpec& spec, const Shape& shape, const DeviceTensors& t,
           const BenchOptions& opt) {
  const auto* tuned = std::get_if<ElementwiseTile>(&r.tile);
  if (!tuned) return;
  for (int threads : {128, 256, 512, 1024})
    for (int blocks_per_sm : {0, 4, 16}) {
      auto k = jit.compile(spec, shape, ElementwiseTile{threads, tuned->vec, blocks_per_sm, tuned->stages});
      SweepRow row;
      row.tile = std::get<ElementwiseTile>(k->source().tile);
      row.ms = time_kernel(jit, *k, t, shape, opt, std::max(5, opt.repeats / 3));
      row.gbps = r.bytes / (row.ms * 1e6);
      row.of_copy = row.gbps / r.copy_gbps;
      r.sweep.push_back(row);
    }
}

// One generated kernel per op, intermediates in memory.
void measure_unfused(BenchReport& r, Jit& jit, const KernelSpec& spec, const Shape& shape, const BenchOptions& opt) {
  auto specs = one_kernel_per_op(spec, spec.graph.outputs().front().dtype);
  if (!specs) return;
  // Each op's kernel reads its operands from buffers of the right size; the
  // values are whatever the previous kernel left, as in an eager framework.
  std::vector<std::shared_ptr<const CompiledKernel>> kernels;
  std::vector<DeviceTensors> bound;
  for (const KernelSpec& s : *specs) {
    kernels.push_back(jit.compile(s, shape));
    bound.push_back(upload(kernels.back()->source(), make_inputs(s, shape, opt.data_seed), s, shape));
  }
  r.unfused_kernels = static_cast<int>(kernels.size());
  r.unfused_ms = backend::median_ms(
      [&] {
        for (std::size_t k = 0; k < kernels.size(); ++k) jit.launch(*kernels[k], bound[k].bindings, shape, opt.args);
      },
      opt.repeats, opt.batch);
  r.speedup_vs_unfused = *r.unfused_ms / r.fused_ms;
}

// Host costs of the cached path: key + lookup, and one launch.
void measure_host(BenchReport& r, Jit& jit, const KernelSpec& spec, const Shape& shape, const CompiledKernel& fused,
                  const DeviceTensors& t, const BenchOptions& opt) {
  using clock = std::chrono::steady_clock;
  auto& drv = backend::cuda();
  constexpr int n = 2000;
  auto t0 = clock::now();
  for (int i = 0; i < n; ++i) (void)jit.compile(spec, shape, r.tile);
  r.hit_us = std::chrono::duration<double, std::micro>(clock::now() - t0).count() / n;
  // Fewer launches than the driver's queue holds, so the host never waits.
  constexpr int launches = 200;
  drv.synchronize();
  t0 = clock::now();
  for (int i = 0; i < launches; ++i) jit.launch(fused, t.bindings, shape, opt.args);
  r.launch_us = std::chrono::duration<double, std::micro>(clock::now() - t0).count() / launches;
  drv.synchronize();
  // A second process's first launch, as far as the caches can tell: a new
  // Jit has an empty memory cache and reads the disk (docs/disk-cache.md).
  Jit fresh(jit.target());
  if (!fresh.stats().disk_dir.empty()) {
    t0 = clock::now();
    auto kernel = fresh.compile(spec, shape, r.tile);
    fresh.launch(*kernel, t.bindings, shape, opt.args);
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    drv.synchronize();
    if (kernel->from_disk()) r.disk_first_launch_ms = ms;
  }
}

// The outputs' bytes as the fused kernel left them (the last buffers of `t`).
std::vector<std::vector<std::byte>> download_outputs(const DeviceTensors& t) {
  std::vector<std::vector<std::byte>> out;
  for (std::size_t j = t.buffers.size() - t.bindings.outputs.size(); j < t.buffers.size(); ++j) {
    out.emplace_back(t.buffers[j].size());
    t.buffers[j].download(out.back().data(), out.back().size());
  }
  return out;
}

// A variant's outputs against the fused kernel's, element by element in each
// output's dtype. Both leave an output's gaps (strided rows) poisoned alike.
void compare_outputs(VariantRow& row, const KernelSpec& spec, const std::vector<std::vector<std::byte>>& want,
                     const std::vector<std::vector<std::byte>>& got) {
  const auto& outputs = spec.graph.outputs();
  bench_detail::Difference d;
  for (std::size_t j = 0; j < outputs.size(); ++j) {
    const DType dtype = outputs[j].dtype;
    const auto count = static_cast<std::int64_t>(want[j].size() / size_of(dtype));
    HostTensor a = HostTensor::zeros(dtype, {count}), b = HostTensor::zeros(dtype, {count});
    a.bytes = want[j];
    b.bytes = got[j];
    bench_detail::add_difference(d, a, b);
  }
  row.max_abs_diff = d.max_abs_diff;
  row.max_abs = d.max_abs;
  row.ok = row.max_abs_diff <= row.max_abs / 32;
}

// Elementwise and row chains: other sources of the fused kernel (Note [Variant
// kernels]) on its buffers, each output poisoned before a variant's first run
// and compared with the fused kernel's; then every kernel timed in turns. The
// fused kernel's time in those turns is each row's baseline.
void measure_variants(BenchReport& r, Jit& jit, const KernelSpec& spec, const Shape& shape,
                      const CompiledKernel& fused, DeviceTensors& t, const BenchOptions& opt) {
  auto& drv = backend::cuda();
  const std::size_t first_output = t.buffers.size() - t.bindings.outputs.size();
  auto launch = [&](const CompiledKernel& k) { jit.launch(k, t.bindings, shape, opt.args); };
  std::vector<std::shared_ptr<const CompiledKernel>> kernels;
  std::vector<std::size_t> rows;  // r.variants' index of each kernel
  for (const BenchOptions::Variant& v : opt.variants) {
    VariantRow row;
    row.label = v.label;
    try {
      auto kernel = jit.compile_variant(fused, v.text);
      launch(fused);  // a column sum's counters and the outputs as the fused kernel leaves them
      drv.synchronize();
      const auto want = download_outputs(t);
      for (std::size_t j = first_output; j < t.buffers.size(); ++j) t.buffers[j].fill_bytes(0xFF);
      launch(*kernel);
      drv.synchronize();
      compare_outputs(row, spec, want, download_outputs(t));
      kernels.push_back(std::move(kernel));
      rows.push_back(r.variants.size());
    } catch (const Error& e) {
      row.skipped = e.what();
    }
    r.variants.push_back(std::move(row));
  }
  if (kernels.empty()) return;
  std::vector<std::function<void()>> runs{[&] { launch(fused); }};
  for (const auto& k : kernels) runs.push_back([&launch, k] { launch(*k); });
  const std::vector<double> ms = backend::median_ms_interleaved(runs, opt.repeats, opt.batch);
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    VariantRow& row = r.variants[rows[i]];
    row.ms = ms[i + 1];
    row.fused_ms = ms[0];
    row.gbps = r.bytes / (row.ms * 1e6);
    row.of_copy = row.gbps / r.copy_gbps;
  }
}

}  // namespace

TuneReport tune_on_random_data(Jit& jit, const KernelSpec& spec, const Shape& shape, std::uint64_t data_seed,
                               const LaunchArgs& args, std::vector<TileConfig> candidates) {
  auto& drv = backend::cuda();
  drv.ensure_context();
  const auto t0 = std::chrono::steady_clock::now();
  TuneReport report;
  if (candidates.empty()) candidates = jit.tile_candidates(spec, shape);  // this GPU's, with its default
  report.candidates = candidates.size();
  auto first = jit.compile(spec, shape, candidates.front());
  DeviceTensors t = upload(first->source(), make_inputs(spec, shape, data_seed), spec, shape);
  report.result = jit.tune(spec, shape, t.bindings, args, candidates);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

BenchReport bench(Jit& jit, const KernelSpec& spec, const Shape& shape, const BenchOptions& opt) {
  EPIFUSE_CHECK(shape.m > 0 && shape.n > 0, "bench: M={} N={} is an empty problem: there is nothing to time",
                shape.m, shape.n);
  auto& drv = backend::cuda();
  drv.ensure_context();
  BenchReport r;
  r.device = drv.device(0).name;
  r.shape = shape;
  r.bytes = required_bytes(spec, shape);

  const TensorMap inputs = make_inputs(spec, shape, opt.data_seed);
  auto first = jit.compile(spec, shape);
  r.compile_ms = first->compile_ms();
  r.compile_from_disk = first->from_disk();
  DeviceTensors t = upload(first->source(), inputs, spec, shape);
  measure_copy(r, opt);

  if (opt.tune && !opt.tile) jit.tune(spec, shape, t.bindings, opt.args);
  auto fused = jit.compile(spec, shape, opt.tile);  // the given or the tuned tile
  r.tile = fused->source().tile;
  r.registers = fused->registers();
  r.fused_ms = time_kernel(jit, *fused, t, shape, opt, opt.repeats);
  r.fused_gbps = r.bytes / (r.fused_ms * 1e6);
  r.fused_of_copy = r.fused_gbps / r.copy_gbps;

  if (opt.sweep) sweep(r, jit, spec, shape, t, opt);  // elementwise tiles only
  if (const auto* row = std::get_if<RowTile>(&r.tile); row && row->persistent) {
    // The persistent grid against one block per row (docs/row-reductions.md).
    RowTile per_row = *row;
    per_row.persistent = 0;
    auto k = jit.compile(spec, shape, per_row);
    r.per_row_grid_ms = time_kernel(jit, *k, t, shape, opt, opt.repeats);
  }
  if (spec.mainloop.kind == MainloopKind::elementwise) {
    // One kernel per op has inputs of its own, which the strided tensors'
    // lds do not name: --ld times the fused kernel alone (Note [Strided rows]).
    if (opt.unfused && !epilogue_strided(shape)) measure_unfused(r, jit, spec, shape, opt);
    if (!opt.variants.empty()) measure_variants(r, jit, spec, shape, *fused, t, opt);
  } else {
    // One kernel per epilogue op without the GEMM would compare nothing: the
    // GEMM rows time cuBLAS followed by one kernel per op instead.
    r.gemm = bench_detail::bench_gemm(r, jit, spec, shape, *fused, t, opt);
  }
  measure_host(r, jit, spec, shape, *fused, t, opt);
  return r;
}

}  // namespace epifuse
