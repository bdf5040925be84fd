// `epifuse emit CHAIN.json`: print the generated kernel source (no GPU, no NVRTC
// needed; where there is a GPU, the kernel the Jit would build for it).
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "common.hpp"
#include "epifuse/json.hpp"
#include "backend/hiprtc.hpp"
#include "backend/target.hpp"
#include "backend/header.hpp"
#include "jit_options.hpp"
#include "runtime/local_gpu.hpp"

namespace epifuse::cli {
namespace {

struct EmitOptions {
  std::string chain, shape, target;
  std::vector<std::string> lds;            // --ld NAME=LD
  std::int64_t batch = 1;                  // --batch
  std::vector<std::string> batch_strides;  // NAME=S
  TileOptions tile;
  bool standalone = false;
};

// The source with the project's own headers (templates/common/) written into it,
// as hipRTC is given them: one file that compiles with another build's headers,
// e.g. as `epifuse bench --variant` of a build whose headers changed.
std::string standalone_text(const std::string& text) {
  return backend::inline_headers(text, backend::template_headers());
}

void emit(const EmitOptions& opt) {
  // The source depends on the target only through the tiles it allows (wgmma
  // on sm_90a; the wave kernel and its instruction on AMD targets); a target
  // it could never compile for (sm_75, a typo) is an error here too, not only
  // at compile time.
  std::string target;
  if (opt.target.starts_with("gfx"))
    target = backend::parse_amd_target(opt.target).str();
  else if (!opt.target.empty())
    target = backend::parse_target(opt.target).str();
  const KernelSpec spec = load_spec(opt.chain);
  // As compile, bench and the Python module: without --target, this machine's
  // GPU's; for the target of the GPU here, its multiprocessors, shared memory
  // and bandwidth steer the untuned tile, as in the Jit. Elsewhere the target's
  // assumed device, and without a target or a GPU no particular target (GEMM
  // chains then take mma.sync tiles).
  const std::optional<LocalGpu> gpu = local_gpu();
  DeviceInfo device = assumed_device(target);
  if (target.empty() && gpu) {
    target = gpu->target;
    if (!session().json) std::cerr << fmt::format("epifuse: no --target; emitting for this machine's GPU, {} ({})\n", target, gpu->name);
  } else if (target.empty() && !session().json) {
    std::cerr << "epifuse: no --target and no GPU; emitting for no particular target (a GEMM chain takes "
                 "mma.sync tiles: --target sm_90a for wgmma)\n";
  }
  if (gpu && gpu->target == target) device = gpu->device;
  Shape shape;
  if (opt.shape.empty() && !spec.default_shape) {
    // The source depends on the shape only through its class (N % vec).
    shape = {1024, 1024, spec.mainloop.kind == MainloopKind::elementwise ? 0 : 1024};
    if (!session().json) std::cerr << "epifuse: no --shape; emitting for 1024,1024\n";
  } else {
    shape = resolve_shape(opt.shape, spec);
  }
  apply_lds(opt.lds, spec, shape);
  apply_batch(opt.batch, opt.batch_strides, spec, shape);
  KernelSource ks = emit_kernel(spec, shape, opt.tile.tile(), KernelPath::fastest, target, device);
  if (opt.standalone) ks.text = standalone_text(ks.text);
  if (session().json) {
    nlohmann::ordered_json doc;
    doc["name"] = ks.name;
    doc["target"] = target;  // empty: no particular target
    doc["tile"] = to_string(ks.tile);
    doc["inputs"] = ks.inputs;
    doc["outputs"] = ks.outputs;
    doc["source"] = ks.text;
    print_json(doc);
  } else {
    print_text(ks.text);
  }
}

}  // namespace

void add_emit(CLI::App& app) {
  auto opt = std::make_shared<EmitOptions>();
  CLI::App* sub = app.add_subcommand(
      "emit", "Print the generated kernel source (needs no GPU and no NVRTC; with a GPU, the kernel built for it)");
  sub->add_option("chain", opt->chain, "JSON op chain")->required()->check(non_empty());
  sub->add_option("--shape", opt->shape, "M,N (elementwise) or M,N,K (GEMM kinds); default the chain's shape")
      ->check(non_empty());
  sub->add_option("--target", opt->target,
                  "Target (sm_80, sm_90a, gfx90a, gfx1100, ...): which tiles are allowed (wgmma tiles need sm_90a; AMD "
                  "targets take wave tiles); default the GPU's, without one no particular target (mma.sync GEMM tiles)")
      ->check(non_empty());
  add_tile_options(*sub, opt->tile);
  sub->add_option("--ld", opt->lds,
                  "NAME=LD: a GEMM operand's or a chain's full [M,N] input's or output's leading dimension "
                  "(repeatable): the strided variant's source (docs/strided-batched.md)")
      ->allow_extra_args(false);
  add_batch_options(*sub, opt->batch, opt->batch_strides);
  sub->add_flag("--standalone", opt->standalone,
                "Write the project's headers (templates/common/) into the source: one file that compiles "
                "without them, e.g. as another build's `bench --variant`");
  add_json_flag(*sub);
  sub->callback([opt] { emit(*opt); });
}

}  // namespace epifuse::cli
