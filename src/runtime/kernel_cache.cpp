#include "runtime/kernel_cache.hpp"

#include <mutex>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <fmt/format.h>

namespace epifuse {

std::uint64_t CacheKey::hash() const {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  auto add = [&](const std::string& s) {
    XXH3_64bits_update(&state, s.data(), s.size());
    XXH3_64bits_update(&state, "|", 1);
  };
  add(signature);
  add(shape_class);
  add(path == KernelPath::fastest ? "vector" : "general");
  const std::uint64_t t = tile_hash(tile);
  XXH3_64bits_update(&state, &t, sizeof t);
  add(target);
  add(compiler);
  add(options);
  XXH3_64bits_update(&state, &templates, sizeof templates);
  add(version);
  return XXH3_64bits_digest(&state);
}

std::uint64_t binding_names_hash(const KernelSpec& spec) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  const Graph& g = spec.graph;
  for (Value v : g.inputs()) {
    const std::string& name = g.node(v).name;
    XXH3_64bits_update(&state, name.data(), name.size() + 1);  // with its NUL: names cannot run together
  }
  XXH3_64bits_update(&state, "|", 1);
  for (const Output& o : g.outputs()) XXH3_64bits_update(&state, o.name.data(), o.name.size() + 1);
  return XXH3_64bits_digest(&state);
}

std::string CacheKey::str() const {
  return fmt::format("{:016x} tile={} shape_class={} path={} target={} compiler={} templates={:016x} epifuse={}",
                     hash(), to_string(tile), shape_class, path == KernelPath::fastest ? "vector" : "general",
                     target, compiler,
                     templates, version);
}

KernelCache::Entry KernelCache::get_or_build(const CacheKey& key, const std::function<Entry()>& build) {
  {
    std::shared_lock lock(mutex_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      auto future = it->second;
      lock.unlock();
      ++hits_;
      return future.get();  // waits if another thread is still compiling it
    }
  }
  std::promise<Entry> promise;
  std::shared_future<Entry> existing;
  {
    std::unique_lock lock(mutex_);
    auto [it, inserted] = map_.try_emplace(key, promise.get_future().share());
    if (!inserted) existing = it->second;
  }
  if (existing.valid()) {
    ++hits_;
    return existing.get();
  }
  ++misses_;
  try {
    Entry entry = build();
    ++compiles_;
    compile_us_ += static_cast<std::uint64_t>(entry->compile_ms() * 1000.0);
    promise.set_value(entry);
    return entry;
  } catch (...) {
    ++failures_;
    promise.set_exception(std::current_exception());
    std::unique_lock lock(mutex_);
    map_.erase(key);
    throw;
  }
}

CacheStats KernelCache::stats() const {
  CacheStats s;
  s.hits = hits_;
  s.misses = misses_;
  s.compiles = compiles_;
  s.failures = failures_;
  s.compile_ms = static_cast<double>(compile_us_.load()) / 1000.0;
  std::shared_lock lock(mutex_);
  s.entries = map_.size();
  return s;
}

std::vector<CacheKey> KernelCache::keys() const {
  std::shared_lock lock(mutex_);
  std::vector<CacheKey> out;
  for (const auto& [key, entry] : map_) out.push_back(key);
  return out;
}

void KernelCache::clear() {
  std::unique_lock lock(mutex_);
  map_.clear();
}

}  // namespace epifuse
