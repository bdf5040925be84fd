// The C ABI's compiling and launching (include/epifuse/c_api.h, docs/python.md):
// a Jit on a device, a spec compiled for a shape (with its leading dimensions
// and batch), tuning, and launches, each a thin wrapper over Jit. A launch
// (ef_jit_launch, ef_launch_record) is the Python module's hot path: it
// allocates nothing once this thread's bindings have grown. The specs
// themselves are c_api.cpp's; src/capi/handles.hpp is what both share.
#include "epifuse/c_api.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "capi/handles.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/reference.hpp"
#include "epifuse/tile.hpp"

namespace {

using namespace epifuse;
using namespace epifuse::capi;

// Note [Strided operands], Note [Strided epilogue tensors]: ld[i] is binding
// i's leading dimension (0 dense) in ef_kernel_bindings' order: the `operands`
// GEMM operands (none for an elementwise chain), the chain's `inputs`, then its
// `outputs` (Note [Strided rows] for the elementwise and row families). A chain tensor's
// vector is filled only where an ld is given, so a dense launch allocates nothing.
void put_lds(Shape& shape, const std::int64_t* ld, std::size_t nld, std::size_t operands, std::size_t inputs,
             std::size_t outputs) {
  require_array(ld, nld, "ld");
  EPIFUSE_CHECK(nld <= operands + inputs + outputs, "ld: {} given, the kernel binds {} inputs and {} outputs", nld,
                operands + inputs, outputs);
  for (std::size_t i = 0; i < std::min(nld, operands); ++i) (i == 0 ? shape.lda : i == 1 ? shape.ldb : shape.ldb1) = ld[i];
  const auto tensors = [&](std::vector<std::int64_t>& out, std::size_t first, std::size_t count) {
    const std::size_t end = std::min(nld, first + count);
    if (std::any_of(ld + std::min(first, end), ld + end, [](std::int64_t x) { return x != 0; }))
      out.assign(ld + first, ld + end);
  };
  tensors(shape.ld_inputs, operands, inputs);
  tensors(shape.ld_outputs, operands + inputs, outputs);
}

Shape with_lds(const KernelSpec& spec, Shape shape, const std::int64_t* ld, std::size_t nld) {
  put_lds(shape, ld, nld, mainloop_operand_names(spec.mainloop.kind).size(), spec.graph.inputs().size(),
          spec.graph.outputs().size());
  verify_shape(spec, shape);
  return shape;
}

// Note [Batched GEMM]: batch 0 or 1 is one problem; batch_stride[i] is GEMM
// operand i's (-1 its size, 0 shared), NULL and 0 all -1.
Shape with_batch(const KernelSpec& spec, Shape shape, std::int64_t batch, const std::int64_t* stride,
                 std::size_t nstride) {
  require_array(stride, nstride, "batch_stride");
  const std::size_t operands = mainloop_operand_names(spec.mainloop.kind).size();
  EPIFUSE_CHECK(nstride <= operands, "batch_stride: {} given, the chain has {} GEMM operands", nstride, operands);
  shape.batch = batch == 0 ? 1 : batch;
  if (nstride > 0) shape.batch_stride_a = stride[0];
  if (nstride > 1) shape.batch_stride_b = stride[1];
  if (nstride > 2) shape.batch_stride_b1 = stride[2];
  verify_shape(spec, shape);
  return shape;
}

}  // namespace

extern "C" {

int ef_jit_new(const char* target, ef_jit** out) { return ef_jit_new_on_device(target, 0, out); }

int ef_jit_new_on_device(const char* target, int device, ef_jit** out) {
  return guarded([&] {
    require(out, "out");
    auto j = std::make_unique<ef_jit>();
    j->jit = std::make_unique<Jit>(target ? target : "", device);
    j->target = j->jit->target();
    *out = j.release();
  });
}

void ef_jit_free(ef_jit* jit) { delete jit; }

const char* ef_jit_target(const ef_jit* jit) { return jit ? jit->target.c_str() : ""; }

// ef_jit_compile and ef_jit_compile_ld are ef_jit_compile_batched with no ld
// and one problem (dense, unbatched: the same key and kernel).
int ef_jit_compile(ef_jit* jit, const ef_spec* spec, std::int64_t m, std::int64_t n, std::int64_t k, const char* tile,
                   ef_kernel** out) {
  return ef_jit_compile_batched(jit, spec, m, n, k, nullptr, 0, 1, nullptr, 0, tile, out);
}

int ef_jit_compile_ld(ef_jit* jit, const ef_spec* spec, std::int64_t m, std::int64_t n, std::int64_t k,
                      const std::int64_t* ld, std::size_t nld, const char* tile, ef_kernel** out) {
  return ef_jit_compile_batched(jit, spec, m, n, k, ld, nld, 1, nullptr, 0, tile, out);
}

int ef_jit_compile_batched(ef_jit* jit, const ef_spec* spec, std::int64_t m, std::int64_t n, std::int64_t k,
                           const std::int64_t* ld, std::size_t nld, std::int64_t batch, const std::int64_t* batch_stride,
                           std::size_t nbatch_stride, const char* tile, ef_kernel** out) {
  return guarded([&] {
    require(jit, "jit");
    require(spec, "spec");
    require(out, "out");
    const KernelSpec s = snapshot(spec);
    verify(s);
    const Shape shape = with_batch(s, with_lds(s, make_shape(s, m, n, k), ld, nld), batch, batch_stride, nbatch_stride);
    std::optional<TileConfig> t;
    if (tile && *tile) t = parse_tile(tile);
    *out = new ef_kernel{jit->jit->compile(s, shape, t), mainloop_operand_names(s.mainloop.kind).size()};
  });
}

void ef_kernel_free(ef_kernel* kernel) { delete kernel; }

namespace {
// UserError unless a launch gives as many pointers as `ks` binds.
void check_counts(const KernelSource& ks, std::size_t ninputs, std::size_t noutputs) {
  EPIFUSE_CHECK(ninputs == ks.inputs.size() && noutputs == ks.outputs.size(),
                "{} binds {} inputs and {} outputs, got {} and {}", ks.name, ks.inputs.size(), ks.outputs.size(),
                ninputs, noutputs);
}

// The device pointers of a launch, as many as `ks` binds (UserError otherwise).
DeviceBindings bindings_of(const KernelSource& ks, const std::uint64_t* inputs, std::size_t ninputs,
                           const std::uint64_t* outputs, std::size_t noutputs) {
  check_counts(ks, ninputs, noutputs);
  DeviceBindings b;
  b.inputs.assign(inputs, inputs + ninputs);
  b.outputs.assign(outputs, outputs + noutputs);
  return b;
}

// The same in this thread's bindings, reused from launch to launch: a launch
// (ef_launch_record, every call of the Python module) allocates nothing once
// they have grown to its kernel's counts.
const DeviceBindings& launch_bindings(const KernelSource& ks, const std::uint64_t* inputs, std::size_t ninputs,
                                      const std::uint64_t* outputs, std::size_t noutputs) {
  check_counts(ks, ninputs, noutputs);
  thread_local DeviceBindings b;
  b.inputs.assign(inputs, inputs + ninputs);
  b.outputs.assign(outputs, outputs + noutputs);
  return b;
}
}  // namespace

int ef_jit_tune(ef_jit* jit, const ef_spec* spec, std::int64_t m, std::int64_t n, std::int64_t k,
                const std::uint64_t* inputs, std::size_t ninputs, const std::uint64_t* outputs, std::size_t noutputs,
                std::uint64_t seed, std::uint64_t offset, char** result) {
  return guarded([&] {
    require(jit, "jit");
    require(spec, "spec");
    require(result, "result");
    require_array(inputs, ninputs, "inputs");
    require_array(outputs, noutputs, "outputs");
    const KernelSpec s = snapshot(spec);
    verify(s);
    const Shape shape = make_shape(s, m, n, k);
    const KernelSource& ks = jit->jit->compile(s, shape)->source();  // the bindings every tile shares
    const DeviceBindings b = bindings_of(ks, inputs, ninputs, outputs, noutputs);
    const Jit::TuneResult r = jit->jit->tune(s, shape, b, LaunchArgs{seed, offset, 0});
    *result = c_string(Json{{"tile", to_string(r.tile)}, {"ms", r.ms}, {"candidates", r.all.size()}}.dump());
  });
}

int ef_kernel_bindings(const ef_kernel* kernel, char** out) {
  return guarded([&] {
    require(kernel, "kernel");
    require(out, "out");
    const KernelSource& ks = kernel->kernel->source();
    *out = c_string(Json{{"name", ks.name}, {"tile", to_string(ks.tile)}, {"inputs", ks.inputs}, {"outputs", ks.outputs}}
                        .dump());
  });
}

namespace {
int launch_with(const ef_jit* jit, const ef_kernel* kernel, const std::uint64_t* inputs, std::size_t ninputs,
                const std::uint64_t* outputs, std::size_t noutputs, std::int64_t m, std::int64_t n, std::int64_t k,
                const LaunchArgs& args, void* stream, const std::int64_t* ld = nullptr, std::size_t nld = 0,
                std::int64_t batch = 0, const std::int64_t* batch_stride = nullptr, std::size_t nbatch_stride = 0) {
  return guarded([&] {
    require_array(inputs, ninputs, "inputs");
    require_array(outputs, noutputs, "outputs");
    require(jit, "jit");
    require(kernel, "kernel");
    const KernelSource& ks = kernel->kernel->source();
    const DeviceBindings& b = launch_bindings(ks, inputs, ninputs, outputs, noutputs);
    Shape shape{m, n, k};
    if (nld > 0)  // the dense launch stays off this path (the Python module's hot path)
      put_lds(shape, ld, nld, kernel->operands, ks.inputs.size() - kernel->operands, ks.outputs.size());
    if (batch > 1 || nbatch_stride > 0) {  // Note [Batched GEMM]: as ef_jit_compile_batched takes them
      require_array(batch_stride, nbatch_stride, "batch_stride");
      EPIFUSE_CHECK(nbatch_stride <= 3, "batch_stride: {} given; only GEMM operands (at most 3) take one",
                    nbatch_stride);
      shape.batch = batch == 0 ? 1 : batch;
      if (nbatch_stride > 0) shape.batch_stride_a = batch_stride[0];
      if (nbatch_stride > 1) shape.batch_stride_b = batch_stride[1];
      if (nbatch_stride > 2) shape.batch_stride_b1 = batch_stride[2];
    }  // the launch checks the count and the strides (Jit::Impl::pack_params)
    jit->jit->launch(*kernel->kernel, b, shape, args, stream);
  });
}
}  // namespace

int ef_jit_launch(const ef_jit* jit, const ef_kernel* kernel, const std::uint64_t* inputs, std::size_t ninputs,
                  const std::uint64_t* outputs, std::size_t noutputs, std::int64_t m, std::int64_t n, std::int64_t k,
                  std::uint64_t seed, std::uint64_t offset, void* stream) {
  return launch_with(jit, kernel, inputs, ninputs, outputs, noutputs, m, n, k, LaunchArgs{seed, offset, 0}, stream);
}

int ef_launch_record(const ef_launch* l) {
  if (!l) return guarded([] { throw UserError("launch is NULL"); });
  return launch_with(l->jit, l->kernel, l->inputs, l->ninputs, l->outputs, l->noutputs, l->m, l->n, l->k,
                LaunchArgs{l->seed, l->offset, l->rng_state}, l->stream, l->ld, l->nld, l->batch, l->batch_stride,
                l->nbatch_stride);
}

}  // extern "C"
