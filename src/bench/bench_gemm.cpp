// epifuse bench on a GEMM chain (docs/bench.md): the fused kernel against
// cuBLASLt alone, cuBLASLt's own bias epilogue, cuBLASLt followed by the chain
// as one elementwise kernel and as one kernel per op, and the fused kernel
// without its dropout. Every row is run once when it is set up (the checks
// compare what it wrote), then all rows are timed together in turns
// (median_ms_interleaved, the same repeats and batch), so each sees the same
// clocks, and reported in TFLOP/s and against cuBLAS alone.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>

#include <fmt/format.h>

#include "bench/bench_device.hpp"
#include "bench/bench_specs.hpp"
#include "bench/cublaslt_baseline.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/reference.hpp"

namespace epifuse::bench_detail {

namespace {

using backend::CUdeviceptr;
using backend::DeviceBuffer;

std::string join(const std::vector<std::string>& items) { return backend::join(items); }

// A poisoned [M,N] buffer of `dtype` (a batched GEMM's [B,M,N]): what cuBLASLt writes D into.
DeviceBuffer matrix_buffer(const Shape& s, DType dtype) {
  DeviceBuffer d(static_cast<std::size_t>(s.batch * s.m * s.n) * size_of(dtype));
  d.fill_bytes(0xFF);
  return d;
}

HostTensor download(CUdeviceptr ptr, DType dtype, const Shape& s) {
  HostTensor t = HostTensor::zeros(dtype, {s.batch * s.m, s.n});  // every batch, stacked
  backend::cuda().copy_to_host(t.bytes.data(), ptr, t.bytes.size());
  return t;
}

// Two [M,N] results of the same chain on the same inputs. Rounding (fp32
// accumulation order, an intermediate stored in the GEMM's dtype) stays far
// below max|x|/32; a wrong layout, a transposed bias or different dropout
// masks do not.
GemmCheck compare_host(std::string what, const HostTensor& a, const HostTensor& b) {
  Difference d;
  add_difference(d, a, b);
  GemmCheck c;
  c.what = std::move(what);
  c.max_abs_diff = d.max_abs_diff;
  c.max_abs = d.max_abs;
  c.ok = c.max_abs_diff <= c.max_abs / 32;
  return c;
}

GemmCheck compare_results(std::string what, CUdeviceptr x, DType x_dtype, CUdeviceptr y, DType y_dtype,
                          const Shape& s) {
  backend::cuda().synchronize();
  return compare_host(std::move(what), download(x, x_dtype, s), download(y, y_dtype, s));
}

// Bytes of the tensors a row's path reads or writes (docs/bench.md, "memory"):
// the GEMM operands, the chain's inputs and outputs, and `extra_mn` more [M,N]
// tensors of `extra_dtype` (the separate GEMMs' results, eager intermediates).
// A batched GEMM's counts every batch's [M,N] tensors and batched operands.
std::size_t path_bytes(const KernelSpec& spec, const Shape& s, int extra_mn = 0, DType extra_dtype = DType::f32) {
  const auto mn = static_cast<std::size_t>(s.batch * s.m * s.n);
  const std::size_t operand = size_of(spec.mainloop.a);
  const std::size_t b_count = spec.mainloop.kind == MainloopKind::dual_gemm ? 2 : 1;
  auto copies = [&](int op) {  // a shared operand (batch stride 0) is read once
    return static_cast<std::size_t>(s.batch > 1 && gemm_operand_batch_stride(spec.mainloop, s, op) != 0 ? s.batch : 1);
  };
  std::size_t bytes = operand * static_cast<std::size_t>(s.m * s.k) * copies(0) +
                      operand * b_count * static_cast<std::size_t>(s.k * s.n) * copies(1);
  for (const Node& n : spec.graph.nodes()) {
    if (n.kind != NodeKind::input) continue;
    const std::size_t count = n.broadcast == Broadcast::full ? mn
                              : n.broadcast == Broadcast::row ? static_cast<std::size_t>(s.n)
                              : n.broadcast == Broadcast::col ? static_cast<std::size_t>(s.m)
                                                              : 1;
    bytes += count * size_of(n.dtype);
  }
  for (const Output& o : spec.graph.outputs()) bytes += mn * size_of(o.dtype);
  return bytes + static_cast<std::size_t>(extra_mn) * mn * size_of(extra_dtype);
}

// The state one bench_gemm call shares between its rows.
class GemmBench {
 public:
  GemmBench(BenchReport& r, Jit& jit, const KernelSpec& spec, const Shape& shape, const CompiledKernel& fused,
            const DeviceTensors& fused_t, const BenchOptions& opt)
      : r_(r), jit_(jit), spec_(spec), shape_(shape), fused_(fused), fused_t_(fused_t), opt_(opt),
        gemm_dtype_(spec.mainloop.a) {}

  GemmBenchReport run() {
    g_.flops = (dual_ ? 4.0 : 2.0) * static_cast<double>(shape_.batch) * static_cast<double>(shape_.m) *
               static_cast<double>(shape_.n) * static_cast<double>(shape_.k);
    add_row("fused", "fused", to_string(r_.tile), 1, [this] { jit_.launch(fused_, fused_t_.bindings, shape_, opt_.args); });
    g_.rows.back().bytes = path_bytes(spec_, shape_);
    attempt("fused, dropout removed", [&] { fused_without_dropout(); });
    if (const std::string why = why_no_cublas(); !why.empty())
      g_.skipped.push_back(why);
    else
      attempt("cuBLAS GEMM alone", [&] { cublas_rows(); });
    for (const BenchOptions::Variant& v : opt_.variants)
      attempt(fmt::format("variant {}", v.label), [&] { variant_row(v); });
    finish();
    return std::move(g_);
  }

 private:
  // Keeps what a row's function uses alive until the rows are timed.
  template <class T>
  std::shared_ptr<T> keep(T&& value) {
    auto p = std::make_shared<T>(std::forward<T>(value));
    keep_.push_back(p);
    return p;
  }

  CUdeviceptr input(std::string_view name) const {
    return input_pointer(fused_.source(), fused_t_.bindings, name);
  }

  // A row, timed in finish() with the others; run once now so that its
  // outputs are there for the checks.
  void add_row(std::string key, std::string label, std::string detail, int kernels, std::function<void()> run) {
    run();
    GemmRow row;
    row.key = std::move(key);
    row.label = std::move(label);
    row.detail = std::move(detail);
    row.kernels = kernels;
    g_.rows.push_back(std::move(row));
    runs_.push_back(std::move(run));
  }

  // A baseline that fails (no algorithm, a kernel that cannot be compiled)
  // leaves a line saying so and lets the others run.
  template <class F>
  void attempt(std::string_view row, F&& f) {
    try {
      f();
    } catch (const Error& e) {
      g_.skipped.push_back(fmt::format("{}: {}", row, e.what()));
    }
  }

  // The fused kernel's tile, the chain's dropouts replaced by their operands.
  void fused_without_dropout() {
    if (spec_.graph.dropout_count() == 0) return;
    const std::optional<KernelSpec> nodrop = without_dropout(spec_);
    if (!nodrop) {
      g_.skipped.push_back("fused, dropout removed: a dropout makes a vector full [M,N]; without it an output is not");
      return;
    }
    nodrop_spec_ = *nodrop;
    nodrop_kernel_ = jit_.compile(*nodrop_spec_, shape_, r_.tile);
    nodrop_t_ = bind_inputs(nodrop_kernel_->source(), *nodrop_spec_, shape_,
                            [&](const std::string& name) { return input(name); });
    add_row("fused_no_dropout", "fused, dropout removed", to_string(nodrop_kernel_->source().tile), 1,
            [this] { jit_.launch(*nodrop_kernel_, nodrop_t_.bindings, shape_, opt_.args); });
  }

  // Another source of the fused kernel (Note [Variant kernels]), on the fused
  // kernel's buffers; last, so that the checks above saw the fused outputs.
  // Its first output against the fused kernel's: equal, unless the variant
  // changes the arithmetic.
  void variant_row(const BenchOptions::Variant& v) {
    const auto kernel = jit_.compile_variant(fused_, v.text);
    keep_.push_back(kernel);
    const DType out_dtype = spec_.graph.outputs().front().dtype;
    const CUdeviceptr out = fused_t_.bindings.outputs.at(0);
    jit_.launch(fused_, fused_t_.bindings, shape_, opt_.args);
    backend::cuda().synchronize();
    const HostTensor want = download(out, out_dtype, shape_);
    // Poisoned, as run_on_device's outputs are: a variant that stores nothing
    // (or not everywhere) must not pass on what the fused kernel left there.
    backend::cuda().memset8(out, 0xFF, want.bytes.size());
    add_row("variant:" + v.label, fmt::format("variant {}", v.label),
            fmt::format("{}, compiled in {:.0f} ms", to_string(r_.tile), kernel->compile_ms()), 1,
            [this, kernel] { jit_.launch(*kernel, fused_t_.bindings, shape_, opt_.args); });
    g_.rows.back().bytes = path_bytes(spec_, shape_);
    backend::cuda().synchronize();
    g_.checks.push_back(
        compare_host(fmt::format("variant {} vs fused", v.label), download(out, out_dtype, shape_), want));
  }

  std::string why_no_cublas() const {
    if (!opt_.cublas) return "cuBLAS baselines skipped (--no-cublas)";
    if (spec_.mainloop.kind == MainloopKind::elementwise)
      return "cuBLAS baselines skipped: the chain has no GEMM";
    if (spec_.mainloop.a != spec_.mainloop.b)
      return fmt::format("cuBLAS baselines skipped: A is {} and B {}", to_string(spec_.mainloop.a),
                         to_string(spec_.mainloop.b));
    if (shape_.k == 0) return "cuBLAS baselines skipped: K = 0, there is no GEMM to time";
    // They would read (or write) the strided buffers as dense.
    if (shape_.lda != 0 || shape_.ldb != 0 || shape_.ldb1 != 0 || epilogue_strided(shape_))
      return "cuBLAS baselines skipped: --ld times the strided fused kernel (bench the dense shape for them)";
    if (!baseline::cublaslt_or_null()) return baseline::cublaslt_unavailable_reason() + ": cuBLAS baselines skipped";
    return "";
  }

  void cublas_rows() {
    baseline::CublasLt& lt = *baseline::cublaslt_or_null();
    g_.cublaslt = fmt::format("{} ({})", lt.version_string(), lt.library_path());
    // A dual GEMM's baseline is two cuBLAS GEMMs of the same A: D0 = A B0, D1 = A B1.
    const CUdeviceptr a = input("a");
    const std::vector<CUdeviceptr> bs = dual_ ? std::vector<CUdeviceptr>{input("b0"), input("b1")}
                                              : std::vector<CUdeviceptr>{input("b")};
    std::vector<std::shared_ptr<DeviceBuffer>> ds;
    for (std::size_t i = 0; i < bs.size(); ++i) ds.push_back(keep(matrix_buffer(shape_, gemm_dtype_)));
    Mainloop one = spec_.mainloop;  // each of a dual GEMM's products is one plain GEMM
    one.kind = MainloopKind::gemm;
    const auto gemm = std::make_shared<const baseline::LtMatmul>(lt, baseline::LtMatmulConfig{one, shape_, gemm_dtype_});
    keep_.push_back(gemm);
    const std::function<void()> run_gemm = [gemm, a, bs, ds] {
      for (std::size_t i = 0; i < bs.size(); ++i) gemm->run(a, bs[i], ds[i]->ptr());
    };
    const int gemms = static_cast<int>(bs.size());
    add_row("cublas", dual_ ? "cuBLAS two GEMMs alone" : "cuBLAS GEMM alone",
            fmt::format("cublasLtMatmul{}{}, {}, D {}, heuristic algorithm, workspace {} of {} MiB", dual_ ? " x2" : "",
                        shape_.batch > 1 ? fmt::format(" strided-batched (batch count {})", shape_.batch) : "",
                        spec_.mainloop.math == GemmMath::tf32 ? "CUBLAS_COMPUTE_32F_FAST_TF32" : "CUBLAS_COMPUTE_32F",
                        to_string(gemm_dtype_), gemm->workspace_used(), baseline::LtMatmul::k_workspace_bytes >> 20),
            gemms, run_gemm);
    KernelSpec operands_only;  // the GEMMs read the operands and write D (D0, D1)
    operands_only.mainloop = spec_.mainloop;
    g_.rows.back().bytes = path_bytes(operands_only, shape_, gemms, gemm_dtype_);
    std::vector<CUdeviceptr> d_ptrs;
    for (const auto& d : ds) d_ptrs.push_back(d->ptr());

    if (dual_)
      g_.skipped.push_back("cuBLASLt epilogue: cuBLASLt has none over two GEMMs");
    else
      attempt("cuBLASLt epilogue", [&] { lt_epilogue(lt, a, bs[0]); });
    const auto& d = ds.front();
    if (!dual_ && chain_is_plain_gemm(spec_, gemm_dtype_)) {
      g_.skipped.push_back("cuBLAS + epifuse epilogue: the chain is the GEMM alone");
      g_.checks.push_back(compare_results("fused vs cublas", fused_t_.bindings.outputs.at(0),
                                          spec_.graph.outputs().front().dtype, d->ptr(), gemm_dtype_, shape_));
      return;
    }
    if (const std::string why = stacked_epilogue_skip(); !why.empty()) {
      g_.skipped.push_back("cuBLAS + epifuse epilogue: " + why);
      if (opt_.unfused) g_.skipped.push_back("unfused: " + why);
      return;
    }
    attempt("cuBLAS + epifuse epilogue", [&] { then_epilogue(run_gemm, d_ptrs); });
    if (opt_.unfused) attempt("unfused", [&] { then_one_kernel_per_op(run_gemm); });
  }

  // Note [Batched GEMM]: after a batched GEMM the epilogue kernels run over
  // the batches stacked in M, [B*M, N], whose dropout elements are the
  // batched kernel's (docs/design.md §4); a column input [M] shared by every
  // batch is not a stacked [B*M] one.
  Shape epilogue_shape() const { return Shape{shape_.batch * shape_.m, shape_.n, 0}; }
  std::string stacked_epilogue_skip() const {
    if (shape_.batch == 1) return "";
    for (Value v : spec_.graph.inputs())
      if (spec_.graph.node(v).broadcast == Broadcast::col)
        return fmt::format("input '{}' is a column [M] shared by the batches; the stacked [B*M, N] epilogue has "
                           "none such", spec_.graph.node(v).name);
    return "";
  }

  // cuBLASLt's own bias + activation epilogue, where the chain starts with one.
  void lt_epilogue(baseline::CublasLt& lt, CUdeviceptr a, CUdeviceptr b) {
    const std::optional<LtEpilogueMatch> match = match_lt_epilogue(spec_);
    if (!match) {
      if (const std::optional<LtDgradMatch> dgrad = match_lt_dgrad(spec_)) return lt_dgrad(lt, a, b, *dgrad);
      g_.skipped.push_back(
          "cuBLASLt epilogue: the chain does not start with relu or gelu_tanh of acc + a row bias [N], nor is it "
          "acc * gelu_tanh_deriv(saved) with its col_sum (DGELU_BGRAD)");
      return;
    }
    baseline::LtMatmulConfig config{spec_.mainloop, shape_, gemm_dtype_};
    config.epilogue = match->kind;
    config.bias = input(match->bias);
    config.bias_dtype = match->bias_dtype;
    const auto gemm = std::make_shared<const baseline::LtMatmul>(lt, config);
    keep_.push_back(gemm);
    const auto d = keep(matrix_buffer(shape_, gemm_dtype_));
    const std::string label =
        match->not_covered.empty() ? "cuBLASLt epilogue" : fmt::format("cuBLASLt epilogue (no {})", join(match->not_covered));
    add_row("cublaslt_epilogue", label, std::string(lt_epilogue_name(match->kind)), 1,
            [gemm, a, b, d] { gemm->run(a, b, d->ptr()); });
    // The same values as the fused kernel without its dropouts.
    const bool nodrop = nodrop_kernel_ != nullptr;
    if (!match->output_is_activation || (spec_.graph.dropout_count() > 0 && !nodrop)) return;
    g_.checks.push_back(compare_results(nodrop ? "fused_no_dropout vs cublaslt_epilogue" : "fused vs cublaslt_epilogue",
                                        (nodrop ? nodrop_t_ : fused_t_).bindings.outputs.at(0),
                                        spec_.graph.outputs().front().dtype, d->ptr(), gemm_dtype_, shape_));
  }

  // cuBLASLt's backward epilogue, DGELU_BGRAD or DRELU_BGRAD, for a dgrad chain
  // of that form: dz from the saved GELU input or the ReLU's bit mask, and the
  // bias gradient in D's dtype.
  void lt_dgrad(baseline::CublasLt& lt, CUdeviceptr a, CUdeviceptr b, const LtDgradMatch& match) {
    const bool relu = match.kind == LtEpilogueKind::drelu_bgrad;
    const std::string name(lt_epilogue_name(match.kind).substr(std::string_view("CUBLASLT_EPILOGUE_").size()));
    if (shape_.n % 8 != 0 || shape_.batch > 1) {  // cuBLASLt: D and the aux input with a leading dimension a multiple of 8
      g_.skipped.push_back(fmt::format("cuBLASLt {}: N = {} is not a multiple of 8, or a batch", name, shape_.n));
      return;
    }
    baseline::LtMatmulConfig config{spec_.mainloop, shape_, gemm_dtype_};
    config.epilogue = match.kind;
    if (relu) {
      const DType saved = spec_.graph.node(spec_.graph.find(match.saved)).dtype;
      if (saved != spec_.mainloop.a) {
        g_.skipped.push_back(fmt::format("cuBLASLt {}: its bit mask is made from '{}' ({}) by a GEMM with A's dtype ({})",
                                         name, match.saved, to_string(saved), to_string(spec_.mainloop.a)));
        return;
      }
      // The identity is N x N: past 1 GiB (N > 23,170 in 16-bit) the row is skipped, not the bench.
      const double identity_bytes = static_cast<double>(shape_.n) * static_cast<double>(shape_.n) *
                                    static_cast<double>(size_of(saved));
      if (identity_bytes > double(1u << 30)) {
        g_.skipped.push_back(fmt::format("cuBLASLt {}: its bit mask is made by a GEMM with an N x N identity, {:.1f} "
                                         "GiB at N = {}; over 1 GiB, so not run",
                                         name, identity_bytes / double(1u << 30), shape_.n));
        return;
      }
      config.aux_ld = (shape_.n + 127) / 128 * 128;  // bits, a multiple of 128
      const auto mask = keep(DeviceBuffer(static_cast<std::size_t>(config.aux_ld / 8 * shape_.m)));
      relu_mask(lt, input(match.saved), mask->ptr(), config.aux_ld);
      config.aux = mask->ptr();
    } else {
      config.aux = input(match.saved);
      config.aux_ld = shape_.n;
    }
    const auto grad = keep(matrix_buffer(Shape{1, shape_.n, 0}, gemm_dtype_));
    config.bias = grad->ptr();
    const auto gemm = std::make_shared<const baseline::LtMatmul>(lt, config);
    keep_.push_back(gemm);
    const auto d = keep(matrix_buffer(shape_, gemm_dtype_));
    add_row("cublaslt_epilogue", "cuBLASLt " + name, std::string(lt_epilogue_name(match.kind)), 1,
            [gemm, a, b, d] { gemm->run(a, b, d->ptr()); });
    const KernelSource& ks = fused_.source();
    const auto output = [&](const std::string& name) {
      const auto at = static_cast<std::size_t>(std::find(ks.outputs.begin(), ks.outputs.end(), name) - ks.outputs.begin());
      DType dtype = gemm_dtype_;
      for (const Output& o : spec_.graph.outputs())
        if (o.name == name) dtype = o.dtype;
      return std::pair{fused_t_.bindings.outputs.at(at), dtype};
    };
    const auto [dz, dz_dtype] = output(match.dz);
    const auto [db, db_dtype] = output(match.db);
    g_.checks.push_back(compare_results(fmt::format("fused vs cublaslt {} (dz)", name), dz, dz_dtype, d->ptr(),
                                        gemm_dtype_, shape_));
    g_.checks.push_back(compare_results(fmt::format("fused vs cublaslt {} (bias gradient)", name), db, db_dtype,
                                        grad->ptr(), gemm_dtype_, Shape{1, shape_.n, 0}));
  }

  // DRELU_BGRAD's bit mask of saved > 0, made as cuBLASLt's forward makes it:
  // RELU_AUX on saved · I (exact: one product a sum), so the bits lie as
  // DRELU_BGRAD reads them. Setup, not timed.
  void relu_mask(baseline::CublasLt& lt, CUdeviceptr saved, CUdeviceptr mask, std::int64_t ld) {
    const DType dt = spec_.mainloop.a;
    HostTensor eye = HostTensor::zeros(dt, {shape_.n, shape_.n});
    for (std::int64_t i = 0; i < shape_.n; ++i) eye.set(i * shape_.n + i, 1.0f);
    DeviceBuffer identity(eye.bytes.size());
    backend::cuda().copy_to_device(identity.ptr(), eye.bytes.data(), eye.bytes.size());
    baseline::LtMatmulConfig config{{MainloopKind::gemm, dt, dt, Layout::row, Layout::row},
                                    Shape{shape_.m, shape_.n, shape_.n}, dt};
    config.epilogue = LtEpilogueKind::relu_aux;
    config.aux = mask;
    config.aux_ld = ld;
    const baseline::LtMatmul forward(lt, config);
    const DeviceBuffer relu(static_cast<std::size_t>(shape_.m * shape_.n) * size_of(dt));
    forward.run(saved, identity.ptr(), relu.ptr());
    backend::cuda().synchronize();
  }

  // cuBLASLt, then the chain as one epifuse elementwise kernel reading D (D0 and D1).
  void then_epilogue(const std::function<void()>& run_gemm, const std::vector<CUdeviceptr>& d) {
    const EpilogueAfterGemm ep = epilogue_after_gemm(spec_, gemm_dtype_);
    const Shape es = epilogue_shape();
    auto kernel = jit_.compile(ep.spec, es);
    const auto t = keep(bind_inputs(kernel->source(), ep.spec, es, [&](const std::string& name) {
      for (std::size_t i = 0; i < ep.gemm_outputs.size(); ++i)
        if (name == ep.gemm_outputs[i]) return d.at(i);
      return input(name);
    }));
    run_gemm();  // D holds the product while the epilogue is tuned
    if (opt_.tune) {
      jit_.tune(ep.spec, es, t->bindings, opt_.args);
      kernel = jit_.compile(ep.spec, es);
    }
    const int gemms = static_cast<int>(d.size());
    add_row("cublas_then_epilogue", "cuBLAS + epifuse epilogue", to_string(kernel->source().tile), gemms + 1,
            [this, run_gemm, kernel, t, es] {
              run_gemm();
              jit_.launch(*kernel, t->bindings, es, opt_.args);
            });
    g_.rows.back().bytes = path_bytes(spec_, shape_, gemms, gemm_dtype_);
    g_.checks.push_back(compare_results("fused vs cublas_then_epilogue", fused_t_.bindings.outputs.at(0),
                                        spec_.graph.outputs().front().dtype, t->bindings.outputs.at(0),
                                        spec_.graph.outputs().front().dtype, shape_));
  }

  // cuBLASLt, then one generated kernel per op, intermediates in memory: what
  // an eager framework runs. Each kernel reads buffers of the right size
  // holding whatever the previous one left, as the elementwise unfused row does.
  void then_one_kernel_per_op(const std::function<void()>& run_gemm) {
    const auto specs = one_kernel_per_op(spec_, gemm_dtype_);
    if (!specs || specs->empty()) {
      g_.skipped.push_back(specs ? "unfused: the chain has no ops after the GEMM"
                                 : "unfused: an op works on vectors only and has no [M,N] kernel of its own");
      return;
    }
    const Shape es = epilogue_shape();
    const auto kernels = keep(std::vector<std::shared_ptr<const CompiledKernel>>{});
    const auto bound = keep(std::vector<DeviceTensors>{});
    for (const KernelSpec& s : *specs) {
      kernels->push_back(jit_.compile(s, es));
      bound->push_back(upload(kernels->back()->source(), make_inputs(s, es, opt_.data_seed), s, es));
    }
    const int gemms = dual_ ? 2 : 1, n = static_cast<int>(kernels->size()) + gemms;
    add_row("unfused", "cuBLAS + one kernel per op", fmt::format("{} kernels", n), n, [this, run_gemm, kernels, bound, es] {
      run_gemm();
      for (std::size_t k = 0; k < kernels->size(); ++k) jit_.launch(*(*kernels)[k], (*bound)[k].bindings, es, opt_.args);
    });
    // Every op's result but the last (the output) is an [M,N] intermediate.
    g_.rows.back().bytes = path_bytes(spec_, shape_, gemms, gemm_dtype_) +
                           (kernels->size() - 1) * static_cast<std::size_t>(shape_.m * shape_.n) *
                               size_of(spec_.graph.outputs().front().dtype);
    r_.unfused_kernels = n;
  }

  // Every row timed in turns with the others, then against cuBLAS alone;
  // cuBLAS's row first. The fused and unfused times replace the report's.
  void finish() {
    const std::vector<double> ms = backend::median_ms_interleaved(runs_, opt_.repeats, opt_.batch);
    for (std::size_t i = 0; i < g_.rows.size(); ++i) {
      GemmRow& row = g_.rows[i];
      row.ms = ms[i];
      row.tflops = ms[i] > 0 ? g_.flops / (ms[i] * 1e9) : 0;
      if (row.key == "fused") r_.fused_ms = ms[i];
      if (row.key == "unfused") r_.unfused_ms = ms[i];
    }
    if (r_.unfused_ms && r_.fused_ms > 0) r_.speedup_vs_unfused = *r_.unfused_ms / r_.fused_ms;
    const auto cublas = std::find_if(g_.rows.begin(), g_.rows.end(), [](const GemmRow& r) { return r.key == "cublas"; });
    if (cublas == g_.rows.end()) return;
    std::rotate(g_.rows.begin(), cublas, cublas + 1);
    const double base = g_.rows.front().ms;
    for (GemmRow& row : g_.rows) row.of_cublas = row.ms / base;
  }

  BenchReport& r_;
  Jit& jit_;
  const KernelSpec& spec_;
  const Shape& shape_;
  const CompiledKernel& fused_;
  const DeviceTensors& fused_t_;
  const BenchOptions& opt_;
  const DType gemm_dtype_;  // what the separate GEMM writes: the operands' dtype, as torch.matmul
  const bool dual_ = spec_.mainloop.kind == MainloopKind::dual_gemm;
  GemmBenchReport g_;
  std::vector<std::function<void()>> runs_;     // one per row of g_.rows, timed in finish()
  std::vector<std::shared_ptr<const void>> keep_;     // what the runs use
  std::optional<KernelSpec> nodrop_spec_;
  std::shared_ptr<const CompiledKernel> nodrop_kernel_;
  DeviceTensors nodrop_t_;
};

}  // namespace

GemmBenchReport bench_gemm(BenchReport& report, Jit& jit, const KernelSpec& spec, const Shape& shape,
                           const CompiledKernel& fused, const DeviceTensors& fused_tensors, const BenchOptions& options) {
  return GemmBench(report, jit, spec, shape, fused, fused_tensors, options).run();
}

}  // namespace epifuse::bench_detail
