// `epifuse compile CHAIN.json --shape M,N --target T...`: compile with NVRTC,
// or hipRTC for AMD targets (no GPU needed), and print each kernel's cache key,
// time, size and hit/miss.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "common.hpp"
#include "epifuse/codegen.hpp"
#include "epifuse/errors.hpp"
#include "epifuse/json.hpp"
#include "jit_options.hpp"

namespace epifuse::cli {
namespace {

struct CompileOptions {
  std::string chain, shape, cubin;
  std::vector<std::string> targets;
  TileOptions tile;
};

// Flushed and closed before it counts as written: a full disk fails there.
void write_cubin(const std::string& path, const std::vector<char>& binary) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw OutputError(fmt::format("--cubin {}: cannot write: {}", path, std::strerror(errno)));
  out.write(binary.data(), static_cast<std::streamsize>(binary.size()));
  out.close();
  if (!out) throw OutputError(fmt::format("--cubin {}: write failed", path));
}

void compile(const CompileOptions& opt) {
  const KernelSpec spec = load_spec(opt.chain);
  const Shape shape = resolve_shape(opt.shape, spec);
  std::vector<std::string> targets = opt.targets;
  if (targets.empty()) targets.push_back("");  // the GPU's
  nlohmann::ordered_json doc = nlohmann::ordered_json::array();
  for (const std::string& target : targets) {
    Jit jit(target);
    auto kernel = jit.compile(spec, shape, opt.tile.tile());
    const CacheStats first = jit.stats();
    if (!opt.cubin.empty())
      write_cubin(targets.size() == 1 ? opt.cubin : opt.cubin + "." + jit.target(), kernel->binary());
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
