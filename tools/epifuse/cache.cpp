// `epifuse cache stats|list|clear [CHAIN.json...]`: the disk cache (docs/disk-cache.md)
// and this process's in-memory cache. Named chains are compiled twice first
// (memory miss, then hit; the first may be a disk hit), so the counters show
// both layers at work. `clear` removes every disk record.
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
  std::size_t removed = 0;
  if (opt.action == "clear") {
    jit.clear();
    removed = jit.clear_disk();
  }
  const CacheStats s = jit.stats();
  const std::vector<DiskEntry> disk = opt.action == "list" ? jit.disk_entries() : std::vector<DiskEntry>{};
  if (session().json) {
    nlohmann::ordered_json doc{{"target", jit.target()},     {"entries", s.entries},   {"hits", s.hits},
                               {"misses", s.misses},         {"compiles", s.compiles}, {"failures", s.failures},
                               {"compile_ms", s.compile_ms}, {"keys", nlohmann::ordered_json::array()}};
    doc["disk"] = {{"dir", s.disk_dir.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(s.disk_dir)},
                   {"writable", s.disk_writable}, {"files", s.disk_files},   {"bytes", s.disk_bytes},
                   {"hits", s.disk_hits},         {"misses", s.disk_misses}, {"rejected", s.disk_rejected},
                   {"writes", s.disk_writes},     {"removed", removed},      {"entries", nlohmann::ordered_json::array()}};
    if (opt.action == "list") {
      for (const CacheKey& k : jit.cached_keys()) doc["keys"].push_back(k.str());
      for (const DiskEntry& e : disk)
        doc["disk"]["entries"].push_back({{"path", e.path}, {"kind", e.kind}, {"bytes", e.bytes}, {"valid", e.valid}});
    }
    print_json(doc);
    return;
  }
  std::string text;
  if (s.disk_dir.empty())
    text += "disk cache: off (EPIFUSE_CACHE=0, or no EPIFUSE_CACHE_DIR, XDG_CACHE_HOME or HOME)\n";
  else
    text += fmt::format("disk cache {}: {} records, {:.1f} MiB{}; this process: {} hits, {} misses, {} rejected, "
                        "{} writes{}\n",
                        s.disk_dir, s.disk_files, static_cast<double>(s.disk_bytes) / (1 << 20),
                        s.disk_writable ? "" : " (not writable: memory only)", s.disk_hits, s.disk_misses,
                        s.disk_rejected, s.disk_writes,
                        opt.action == "clear" ? fmt::format("; cleared {} files", removed) : "");
  text += fmt::format("memory, target {}: {} entries, {} hits, {} misses, {} compiles ({:.1f} ms), {} failures\n",
                      jit.target(), s.entries, s.hits, s.misses, s.compiles, s.compile_ms, s.failures);
  if (opt.action == "list") {
    for (const CacheKey& k : jit.cached_keys()) text += fmt::format("  memory {}\n", k.str());
    for (const DiskEntry& e : disk)
      text += fmt::format("  disk {} {} {} bytes{}\n", e.kind, e.path, e.bytes, e.valid ? "" : " (not whole: will be replaced)");
  }
  print_text(text);
}

}  // namespace

void add_cache(CLI::App& app) {
  auto opt = std::make_shared<CacheOptions>();
  CLI::App* sub = app.add_subcommand("cache", "The kernel caches (disk and memory): stats, list or clear");
  sub->add_option("action", opt->action, "stats, list or clear")
      ->required()
      ->check(CLI::IsMember({"stats", "list", "clear"}));
  sub->add_option("chains", opt->chains, "Chains to compile into the caches first");
  sub->footer("The disk cache lives in EPIFUSE_CACHE_DIR, else $XDG_CACHE_HOME/epifuse, else ~/.cache/epifuse;\n"
              "EPIFUSE_CACHE=0 turns it off, EPIFUSE_CACHE_MAX_MB sets its size limit (512). docs/disk-cache.md.");
  sub->add_option("--target", opt->target, "Target (sm_80, sm_90a, ...); default the GPU's")->check(non_empty());
  add_json_flag(*sub);
  sub->callback([opt] { cache_command(*opt); });
}

}  // namespace epifuse::cli
