// `epifuse cache stats|list|clear [CHAIN.json...]`: the in-memory kernel cache
// lives in one process, so the command compiles the given chains twice (the
// second time must hit) and shows the counters and keys. With no chains there
// is nothing cached yet: it says so. (A disk cache is DESIGN §5's next step.)
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "common.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/json.hpp"

namespace epifuse::cli {
namespace {

struct CacheOptions {
  std::string action;
  std::vector<std::string> chains;
  std::string target;
};

void cache_command(const CacheOptions& opt) {
  Jit jit(opt.target);
  for (int pass = 0; pass < 2; ++pass)
    for (const std::string& chain : opt.chains) {
      const KernelSpec spec = load_spec(chain);
      if (spec.mainloop.kind == MainloopKind::dual_gemm) {
        if (pass == 0 && !session().json)
          std::cerr << fmt::format("epifuse: {}: {} kernels are not generated yet; skipped\n", chain,
                                   to_string(spec.mainloop.kind));
        continue;
      }
      const bool gemm = spec.mainloop.kind != MainloopKind::elementwise;
      (void)jit.compile(spec, spec.default_shape.value_or(Shape{1024, 1024, gemm ? 1024 : 0}));
    }
  if (opt.action == "clear") jit.clear();
  const CacheStats s = jit.stats();
  if (session().json) {
    nlohmann::ordered_json doc{{"target", jit.target()},     {"entries", s.entries},   {"hits", s.hits},
                               {"misses", s.misses},         {"compiles", s.compiles}, {"failures", s.failures},
                               {"compile_ms", s.compile_ms}, {"keys", nlohmann::ordered_json::array()}};
    if (opt.action == "list")
      for (const CacheKey& k : jit.cached_keys()) doc["keys"].push_back(k.str());
    print_json(doc);
    return;
  }
  std::string text;
  if (opt.chains.empty()) text += "the in-memory cache lives in one process; name chains to compile them into it\n";
  text += fmt::format("target {}: {} entries, {} hits, {} misses, {} compiles ({:.1f} ms), {} failures\n",
                      jit.target(), s.entries, s.hits, s.misses, s.compiles, s.compile_ms, s.failures);
  if (opt.action == "list")
    for (const CacheKey& k : jit.cached_keys()) text += fmt::format("  {}\n", k.str());
  print_text(text);
}

}  // namespace

void add_cache(CLI::App& app) {
  auto opt = std::make_shared<CacheOptions>();
  CLI::App* sub = app.add_subcommand("cache", "Inspect the kernel cache: stats, list or clear");
  sub->add_option("action", opt->action, "stats, list or clear")
      ->required()
      ->check(CLI::IsMember({"stats", "list", "clear"}));
  sub->add_option("chains", opt->chains, "Chains to compile into this process's cache first");
  sub->add_option("--target", opt->target, "Target (sm_80, sm_90a, ...); default the GPU's")->check(non_empty());
  add_json_flag(*sub);
  sub->callback([opt] { cache_command(*opt); });
}

}  // namespace epifuse::cli
