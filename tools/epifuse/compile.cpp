// `epifuse compile CHAIN.json --shape M,N --target T...`: compile with NVRTC,
// or hipRTC for AMD targets (no GPU needed), and print each kernel's cache key,
// time, size and hit/miss.
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "backend/device_runtime.hpp"
#include "backend/hiprtc.hpp"
#include "backend/target.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/json.hpp"
#include "io/atomic_file.hpp"
#include "jit_options.hpp"

namespace epifuse::cli {
namespace {

struct CompileOptions {
  std::string chain, shape, cubin;
  std::vector<std::string> targets;
  TileOptions tile;
};

// Through a temporary renamed into place (Note [Atomic output files]): a
// failed write leaves the previous file, never a short one.
void write_cubin(const std::string& path, const std::vector<char>& binary) {
  try {
    io::write_file_atomically(path, std::string_view(binary.data(), binary.size()));
  } catch (const UserError& e) {  // could not create it
    throw OutputError(fmt::format("--cubin {}", e.what()));
  } catch (const RuntimeError& e) {  // could not write, sync or rename it
    throw OutputError(fmt::format("--cubin {}", e.what()));
  }
}

// Where --cubin writes each target's binary: the file itself for one target,
// FILE.<target> for several, <target> spelled as the Jit spells it
// (`gfx90a:xnack-`, `sm_90a`). Two --target spellings of one target would
// write one file twice, and are refused before anything is compiled.
std::vector<std::string> cubin_paths(const CompileOptions& opt, const std::vector<std::string>& targets) {
  if (opt.cubin.empty()) return std::vector<std::string>(targets.size());
  if (targets.size() == 1) return {opt.cubin};
  std::vector<std::string> paths;
  OutputFiles files;
  for (const std::string& t : targets) {
    const bool amd = backend::vendor_of(t) == backend::Vendor::amd;
    const std::string name = amd ? backend::parse_amd_target(t).str() : backend::parse_target(t).str();
    paths.push_back(opt.cubin + "." + name);
    files.add(fmt::format("--cubin for --target {}", t), paths.back());
  }
  return paths;
}

void compile(const CompileOptions& opt) {
  const KernelSpec spec = load_spec(opt.chain);
  const Shape shape = resolve_shape(opt.shape, spec);
  std::vector<std::string> targets = opt.targets;
  if (targets.empty()) targets.push_back("");  // the GPU's
  const std::vector<std::string> cubins = cubin_paths(opt, targets);
  nlohmann::ordered_json doc = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < targets.size(); ++i) {
    Jit jit(targets[i]);
    auto kernel = jit.compile(spec, shape, opt.tile.tile());
    const CacheStats first = jit.stats();
    if (!cubins[i].empty()) write_cubin(cubins[i], kernel->binary());
    (void)jit.compile(spec, shape, opt.tile.tile());  // the same key again: a hit
    const CacheStats second = jit.stats();
    const std::string result =
        first.misses != 1 ? "hit" : kernel->from_disk() ? "miss (read from the disk cache)" : "miss (compiled)";
    if (session().json) {
      doc.push_back({{"target", jit.target()},
                     {"kernel", kernel->source().name},
                     {"key", kernel->key().str()},
                     {"compile_ms", kernel->compile_ms()},
                     {"cubin_bytes", kernel->binary().size()},
                     {"first_lookup", first.misses == 1 ? "miss" : "hit"},
                     {"from_disk", kernel->from_disk()},
                     {"second_lookup", second.hits > first.hits ? "hit" : "miss"}});
    } else {
      // An AMD target's binary is a code object (an ELF from hipRTC), an NVIDIA one's a cubin.
      const char* binary = jit.target().starts_with("gfx") ? "code object" : "cubin";
      print_text(fmt::format("{}: {} {:.1f} ms, {} {} bytes, {}; again: {}\n  key {}\n", jit.target(),
                             kernel->source().name, kernel->compile_ms(), binary, kernel->binary().size(), result,
                             second.hits > first.hits ? "hit" : "miss", kernel->key().str()));
    }
  }
  if (session().json) print_json(doc);
}

}  // namespace

void add_compile(CLI::App& app) {
  auto opt = std::make_shared<CompileOptions>();
  CLI::App* sub = app.add_subcommand("compile", "Compile a chain with NVRTC or hipRTC (no GPU needed) and show its cache key");
  sub->add_option("chain", opt->chain, "JSON op chain")->required()->check(non_empty());
  sub->add_option("--shape", opt->shape, "M,N or M,N,K; default the chain's shape")->check(non_empty());
  sub->add_option("--cubin", opt->cubin, "Write the binary here (FILE.<target> with several targets)")
      ->check(non_empty());
  sub->add_option("--target", opt->targets, "Targets (repeatable): sm_80, sm_86, sm_89, sm_90a, ..., gfx90a, gfx1030, ...; default the GPU's")
      ->check(non_empty());
  add_tile_options(*sub, opt->tile);
  add_json_flag(*sub);
  sub->callback([opt] { compile(*opt); });
}

}  // namespace epifuse::cli
