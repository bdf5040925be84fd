// `epifuse cache stats|list|clear [CHAIN.json...]`: the disk cache (docs/disk-cache.md)
// and this process's in-memory cache. Named chains are compiled twice first
// (memory miss, then hit; the first may be a disk hit), so the counters show
// both layers at work. `clear` removes every disk record. Without chains the
// command only reads the cache folder: no GPU, no compiler, no target needed;
// `--target` narrows stats and list to that target's records.
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "backend/device_runtime.hpp"
#include "backend/hiprtc.hpp"
#include "backend/target.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/json.hpp"
#include "runtime/cache_records.hpp"
#include "runtime/disk_cache.hpp"

namespace epifuse::cli {
namespace {

struct CacheOptions {
  std::string action;
  std::vector<std::string> chains;
  std::string target;
};

// Compiles each chain twice in `jit` (Note at the top of this file).
void compile_chains(Jit& jit, const std::vector<std::string>& chains) {
  for (int pass = 0; pass < 2; ++pass)
    for (const std::string& chain : chains) {
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
}

struct DiskRecord {
  DiskCache::EntryInfo info;
  std::optional<std::string> target;  ///< nullopt when the record is not whole
};

void cache_command(const CacheOptions& opt) {
  // A --target that is no target is the user's error even when nothing compiles.
  if (!opt.target.empty()) {
    if (backend::vendor_of(opt.target) == backend::Vendor::amd)
      (void)backend::parse_amd_target(opt.target);
    else
      (void)backend::parse_target(opt.target);
  }
  // Only chains to compile need a Jit (a GPU or --target, and a compiler).
  std::unique_ptr<Jit> jit;
  if (!opt.chains.empty()) {
    jit = std::make_unique<Jit>(opt.target);
    compile_chains(*jit, opt.chains);
  }
  const std::unique_ptr<DiskCache> disk = DiskCache::from_environment();
  std::size_t removed = 0;
  if (opt.action == "clear") {
    if (jit) jit->clear();
    if (disk) removed = disk->clear();
  }
  // The folder's records: all of them, or with --target that target's (which
  // takes reading each record's key).
  std::vector<DiskRecord> records;
  std::uint64_t files = 0, bytes = 0;
  if (disk && (opt.action == "list" || !opt.target.empty())) {
    for (DiskCache::EntryInfo& e : disk->entries()) {
      DiskRecord r{std::move(e), std::nullopt};
      if (r.info.valid) r.target = target_of_key(r.info.key);
      if (!opt.target.empty() && r.target != opt.target) continue;
      ++files;
      bytes += r.info.bytes;
      records.push_back(std::move(r));
    }
  } else if (disk) {
    const DiskCache::Stats d = disk->stats();
    files = d.files;
    bytes = d.bytes;
  }
  const CacheStats s = jit ? jit->stats() : CacheStats{};
  const std::string target = jit ? jit->target() : opt.target;
  const std::string dir = disk ? disk->root().string() : std::string();
  const char* kind_names[] = {"", "kernel", "tuned"};
  if (session().json) {
    nlohmann::ordered_json doc{{"target", target.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(target)},
                               {"entries", s.entries},       {"hits", s.hits},         {"misses", s.misses},
                               {"compiles", s.compiles},     {"failures", s.failures}, {"compile_ms", s.compile_ms},
                               {"keys", nlohmann::ordered_json::array()}};
    doc["disk"] = {{"dir", dir.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(dir)},
                   {"writable", jit ? s.disk_writable : disk != nullptr},
                   {"files", files},
                   {"bytes", bytes},
                   {"hits", s.disk_hits},
                   {"misses", s.disk_misses},
                   {"rejected", s.disk_rejected},
                   {"writes", s.disk_writes},
                   {"removed", removed},
                   {"entries", nlohmann::ordered_json::array()}};
    if (opt.action == "list") {
      if (jit)
        for (const CacheKey& k : jit->cached_keys()) doc["keys"].push_back(k.str());
      for (const DiskRecord& r : records)
        doc["disk"]["entries"].push_back(
            {{"path", r.info.path.string()},
             {"kind", kind_names[static_cast<int>(r.info.kind)]},
             {"target", r.target ? nlohmann::ordered_json(*r.target) : nlohmann::ordered_json()},
             {"bytes", r.info.bytes},
             {"valid", r.info.valid}});
    }
    print_json(doc);
    return;
  }
  std::string text;
  if (dir.empty())
    text += "disk cache: off (EPIFUSE_CACHE=0, or no EPIFUSE_CACHE_DIR, XDG_CACHE_HOME or HOME)\n";
  else
    text += fmt::format("disk cache {}: {} records{}, {:.1f} MiB{}; this process: {} hits, {} misses, {} rejected, "
                        "{} writes{}\n",
                        dir, files, opt.target.empty() ? "" : fmt::format(" for {}", opt.target),
                        static_cast<double>(bytes) / (1 << 20),
                        !jit || s.disk_writable ? "" : " (not writable: memory only)", s.disk_hits, s.disk_misses,
                        s.disk_rejected, s.disk_writes,
                        opt.action == "clear" ? fmt::format("; cleared {} files", removed) : "");
  if (jit)
    text += fmt::format("memory, target {}: {} entries, {} hits, {} misses, {} compiles ({:.1f} ms), {} failures\n",
                        target, s.entries, s.hits, s.misses, s.compiles, s.compile_ms, s.failures);
  else
    text += "memory: no chains named, nothing compiled in this process\n";
  if (opt.action == "list") {
    if (jit)
      for (const CacheKey& k : jit->cached_keys()) text += fmt::format("  memory {}\n", k.str());
    for (const DiskRecord& r : records)
      text += fmt::format("  disk {} {} {} {} bytes{}\n", kind_names[static_cast<int>(r.info.kind)],
                          r.target.value_or("?"), r.info.path.string(), r.info.bytes,
                          r.info.valid ? "" : " (not a whole record: will be replaced)");
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
  sub->add_option("--target", opt->target,
                  "Target (sm_80, sm_90a, gfx90a, ...): the chains' (default the GPU's), and the only records "
                  "stats and list show")
      ->check(non_empty());
  add_json_flag(*sub);
  sub->callback([opt] { cache_command(*opt); });
}

}  // namespace epifuse::cli
