// The Jit's launch path: the parameter struct packed by role, the general
// kernel on a misaligned launch, the grid (persistent grids sized once per
// kernel), the launch itself.
#include <algorithm>
#include <cstring>

#include "epifuse/errors.hpp"
#include "ir/limits.hpp"
#include "ir/names.hpp"
#include "runtime/bindings_overlap.hpp"
#include "runtime/jit_impl.hpp"

namespace epifuse {

namespace {

// Note [Strided epilogue tensors]: a strided [M,N] tensor's ld at launch, at
// least N; a row start its vector accesses cannot take (ld x element size off
// the tensor's alignment, `need` bytes) clears `aligned`, as a misaligned
// pointer does.
std::int64_t tensor_ld(const std::string& name, std::int64_t ld, const Shape& shape, int need, DType dtype,
                       bool& aligned) {
  EPIFUSE_CHECK(ld >= shape.n, "launch: tensor '{}': ld {} is less than its rows' {} elements (N)", name, ld, shape.n);
  if (need && (ld * static_cast<std::int64_t>(size_of(dtype))) % need) aligned = false;
  return ld;
}

}  // namespace

void Jit::Impl::pack_params(const LoadedKernel& kernel, const DeviceBindings& b, const Shape& shape,
                            const LaunchArgs& args, void* stream, unsigned char* params, bool& aligned) const {
  const KernelSource& ks = kernel.src;
  auto put = [&](const ParamField& f, const auto& v) {
    static_assert(std::is_trivially_copyable_v<std::decay_t<decltype(v)>>);
    EPIFUSE_ASSERT(f.size == sizeof v, "parameter '{}' is {} bytes, bound with {}", f.name, f.size, sizeof v);
    std::memcpy(params + f.offset, &v, sizeof v);
  };
  unsigned char* flag = nullptr;
  std::optional<std::pair<std::uint64_t, std::uint64_t>> scratch;  // (zeroed, free), looked up once
  aligned = true;
  for (const ParamField& f : ks.params) {
    switch (f.role) {
      case ParamRole::input:
      case ParamRole::output: {
        const bool in = f.role == ParamRole::input;
        const std::uint64_t ptr = in ? b.inputs[f.index] : b.outputs[f.index];
        const int need = in ? ks.input_alignment[f.index] : ks.output_alignment[f.index];
        if (need && ptr % need) aligned = false;
        put(f, ptr);
        break;
      }
      case ParamRole::dim_m: put(f, std::int64_t{shape.m}); break;
      case ParamRole::dim_n: put(f, std::int64_t{shape.n}); break;
      case ParamRole::dim_k: put(f, std::int64_t{shape.k}); break;
      case ParamRole::inv_n: put(f, 1.0 / static_cast<double>(shape.n)); break;
      case ParamRole::n_magic: put(f, n_magic(shape.n)); break;  // Note [Division by N]
      case ParamRole::seed: put(f, std::uint64_t{args.seed}); break;
      case ParamRole::offset: put(f, std::uint64_t{args.offset}); break;
      case ParamRole::rng_state: put(f, std::uint64_t{args.rng_state}); break;
      case ParamRole::scalar: put(f, ks.scalars[f.index]); break;
      case ParamRole::vector_flag: flag = params + f.offset; break;
      case ParamRole::ld: {  // Note [Strided operands]: every row's start aligned as the pointer must be
        const Mainloop& ml = kernel.spec->mainloop;
        const std::size_t operands = names::gemm_operand_names(ml.kind).size();
        if (f.index >= operands) {  // Note [Strided epilogue tensors]: a full input's rows
          const std::size_t i = f.index - operands;
          const DType dtype = kernel.spec->graph.node(kernel.spec->graph.inputs()[i]).dtype;
          put(f, tensor_ld(ks.inputs[f.index], input_ld(shape, i), shape, ks.input_alignment[f.index], dtype, aligned));
          break;
        }
        const std::int64_t ld = gemm_operand_ld(ml, shape, static_cast<int>(f.index));
        const std::int64_t extent = gemm_operand_extent(ml, shape, static_cast<int>(f.index));
        EPIFUSE_CHECK(ld >= extent, "launch: operand '{}': ld {} is less than its rows' {} elements",
                      ks.inputs[f.index], ld, extent);
        const int need = ks.input_alignment[f.index];
        const auto bytes = static_cast<std::int64_t>(size_of(f.index == 0 ? ml.a : ml.b));
        if (need && (ld * bytes) % need) aligned = false;
        put(f, ld);
        break;
      }
      case ParamRole::workspace: {
        if (!scratch) scratch = workspace(stream, kernel.family->workspace(ks, shape));
        put(f, f.index == 0 ? scratch->first : scratch->second);
        break;
      }
      case ParamRole::opaque: {
        EPIFUSE_ASSERT(f.size == 128, "an opaque parameter is a 128-byte tensor map");
        const std::optional<TensorMap2d> map = kernel.family->tensor_map(f, {ks, b.inputs, b.outputs, shape});
        EPIFUSE_ASSERT(!map || driver, "a tensor map for {}: TMA is an NVIDIA feature", target_name);
        if (map) tensor_maps.fill(*driver, *map, params + f.offset);  // else left zero
        // Note [Batched GEMM]: a batched operand the copy engine cannot take
        // (shared, or a batch stride off 16 bytes) runs the general kernel.
        if (!map && shape.batch > 1) aligned = false;
        break;
      }
      case ParamRole::output_ld:  // Note [Strided epilogue tensors]: a full output's rows
        put(f, tensor_ld(ks.outputs[f.index], output_ld(shape, f.index), shape, ks.output_alignment[f.index],
                         kernel.spec->graph.outputs()[f.index].dtype, aligned));
        break;
      case ParamRole::batch:
        EPIFUSE_CHECK(shape.batch >= 1 && shape.batch <= limits::k_max_batch, "launch: batch {} must be between 1 and {}",
                      shape.batch, limits::k_max_batch);
        put(f, std::int64_t{shape.batch});
        break;
      case ParamRole::batch_stride: {  // Note [Batched GEMM]: each batch's operand aligned as the pointer must be
        const Mainloop& ml = kernel.spec->mainloop;
        const std::int64_t stride = gemm_operand_batch_stride(ml, shape, static_cast<int>(f.index));
        const std::int64_t size = gemm_operand_size(ml, shape, static_cast<int>(f.index));
        EPIFUSE_CHECK(stride == 0 || stride >= size,
                      "launch: operand '{}': batch stride {} is less than its {} elements: batches would overlap",
                      ks.inputs[f.index], stride, size);
        const int need = ks.input_alignment[f.index];
        const auto bytes = static_cast<std::int64_t>(size_of(f.index == 0 ? ml.a : ml.b));
        if (need && (stride * bytes) % need) aligned = false;
        put(f, stride);
        break;
      }
    }
  }
  EPIFUSE_ASSERT(!ks.requires_alignment || flag == nullptr, "a kernel that requires alignment has no vector flag");
  if (flag) {
    const int vectorized = aligned ? 1 : 0;
    std::memcpy(flag, &vectorized, 4);
  }
}

void Jit::launch(const CompiledKernel& compiled, const DeviceBindings& b, const Shape& shape,
                 const LaunchArgs& args, void* stream) const {
  impl_->launch(compiled, b, shape, args, stream);
}

void Jit::Impl::launch(const CompiledKernel& compiled, const DeviceBindings& b, const Shape& shape,
                       const LaunchArgs& args, void* stream) {
  const Impl& d = *this;
  const auto& kernel = static_cast<const LoadedKernel&>(compiled);
  const KernelSource& ks = kernel.src;
  const KernelFamily& family = *kernel.family;
  EPIFUSE_CHECK(d.device && kernel.function,
                "kernel for {} cannot run here: {}", d.target_name,
                gpu_unavailable_reason().empty() ? "the GPU is a different architecture"
                                                 : gpu_unavailable_reason());
  EPIFUSE_CHECK(kernel.ordinal == d.ordinal,
                "kernel {} is loaded on device {} and this Jit launches on device {}: compile it with the Jit that "
                "launches it", ks.name, kernel.ordinal, d.ordinal);
  const backend::DeviceScope scope(d.device, d.ordinal);  // Note [Device scopes]
  EPIFUSE_CHECK(b.inputs.size() == ks.inputs.size() && b.outputs.size() == ks.outputs.size(),
                "launch: {} inputs and {} outputs bound, the kernel takes {} and {}",
                b.inputs.size(), b.outputs.size(), ks.inputs.size(), ks.outputs.size());
  if (shape.m == 0 || shape.n == 0) {  // an empty result: nothing to compute, no zero-size grid
    // ...but a column sum over no rows is N zeros, as the reference gives (a
    // bias's gradient from an empty batch). A synchronous memset: this edge
    // does not need the stream's order to be cheap.
    if (shape.n > 0)
      for (std::size_t k = 0; k < ks.outputs.size(); ++k) {
        const auto& outs = kernel.spec->graph.outputs();
        const auto o = std::find_if(outs.begin(), outs.end(), [&](const Output& x) { return x.name == ks.outputs[k]; });
        if (o != outs.end() && kernel.spec->graph.node(o->value).broadcast == Broadcast::row)
          d.device->memset8(b.outputs[k], 0, static_cast<std::size_t>(shape.n) * size_of(o->dtype));
      }
    return;
  }
  if (std::string overlap = overlapping_bindings(*kernel.spec, shape, b, ks.inputs, ks.outputs); !overlap.empty())
    throw UserError("launch: " + overlap);  // Note [Overlapping bindings]
  EPIFUSE_CHECK(family.shape_class(*kernel.spec, ks.tile, shape) == kernel.k.shape_class,
                "launch: shape {}x{}x{} is of class {}, not {} that this kernel was compiled for", shape.m,
                shape.n, shape.k, family.shape_class(*kernel.spec, ks.tile, shape), kernel.k.shape_class);

  alignas(64) unsigned char params[limits::k_kernel_param_bytes];
  std::memset(params, 0, ks.params_size);
  bool aligned = true;
  d.pack_params(kernel, b, shape, args, stream, params, aligned);
  if (ks.requires_alignment && !aligned) {
    // The first misaligned launch compiles the general kernel (scalar path
    // included); later ones find it in the cache.
    CacheKey general = kernel.k;
    general.path = KernelPath::general;
    auto sibling = compile(general, *kernel.spec, kernel.spec, kernel.shape);
    launch(*sibling, b, shape, args, stream);
    return;
  }
  LaunchGeometry g = family.geometry(ks, shape, d.multiprocessors);
  if (g.persistent_work > 0) {
    // A persistent grid: as many blocks as the GPU holds at once. Clusters
    // are placed whole within a GPC, so multiprocessors x blocks per
    // multiprocessor would overcount them (measured: a second, partial wave
    // made cluster-of-8 rows 1.6x slower); the driver counts clusters itself.
    int occupancy = kernel.occupancy.load(std::memory_order_relaxed);
    const int threads = static_cast<int>(g.block[0] * g.block[1] * g.block[2]);
    if (occupancy < 0) {
      if (g.grid_multiple > 1) {
        EPIFUSE_ASSERT(d.driver, "a cluster launch for {}: clusters are an NVIDIA feature", d.target_name);
        const int clusters = d.driver->max_active_clusters(static_cast<backend::CUfunction>(kernel.function),
                                                           static_cast<int>(g.grid_multiple), threads, g.shared_bytes);
        occupancy = clusters > 0 ? clusters * static_cast<int>(g.grid_multiple) : 0;
      }
      if (occupancy <= 0)
        occupancy = d.multiprocessors * std::max(1, d.device->max_active_blocks_per_sm(kernel.function, threads, g.shared_bytes));
      kernel.occupancy.store(occupancy, std::memory_order_relaxed);
    }
    // `occupancy` is the grid's blocks in all (not per multiprocessor).
    const std::int64_t blocks = std::min<std::int64_t>(g.persistent_work, occupancy);
    const std::int64_t granule = std::max(1u, g.grid_multiple);
    g.grid[0] = static_cast<unsigned>(std::max(granule, blocks / granule * granule));
  }
  void* kernel_args[] = {params};
  d.device->launch(kernel.function, {g.grid[0], g.grid[1], g.grid[2]}, {g.block[0], g.block[1], g.block[2]},
                   kernel_args, g.shared_bytes, stream);
}

}  // namespace epifuse
