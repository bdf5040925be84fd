#pragma once
// The in-memory kernel cache (docs/design.md §5; arrayfire's kernel_cache): a
// shared-lock lookup, an unlocked compile, and a first-writer-wins insert of
// a shared future, so a key is compiled once however many threads ask at the
// same moment; the others wait for that compile. A failed compile is not
// cached: the next request tries again (and gets the same error).
#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "epifuse/jit.hpp"

namespace epifuse {

// Note [Binding names]. A kernel's source names its tensors as the spec it
// was emitted from does (KernelSource::inputs, outputs), and callers bind by
// those names (run_on_device, the bench, the C ABI's ef_kernel_bindings that
// the Python module maps its arguments with). Two specs with one signature
// may name their inputs differently, even swap the names of two inputs of one
// kind: a kernel emitted for the first, handed to the second, would bind the
// second's tensors by the first's names, to the wrong slots or to none (found
// by tests/fuzz/gpu_fuzz.cpp: a chain and its backward, `x -> dropout -> y`
// and `dy -> dropout -> dx`). So the memory cache keys on the names too
// (CacheKey::bindings), while the disk record, whose binary names nothing,
// stays shared: the second spec's kernel is emitted with its own names and
// its binary read from disk (or compiled again when the disk cache is off).
std::uint64_t binding_names_hash(const KernelSpec& spec);

class KernelCache {
 public:
  using Entry = std::shared_ptr<const CompiledKernel>;

  /// Returns the cached entry for `key`, or runs `build` once and caches it.
  Entry get_or_build(const CacheKey& key, const std::function<Entry()>& build);
  CacheStats stats() const;
  std::vector<CacheKey> keys() const;
  void clear();

 private:
  struct KeyHash {
    std::size_t operator()(const CacheKey& k) const { return static_cast<std::size_t>(k.hash()); }
  };
  mutable std::shared_mutex mutex_;
  std::unordered_map<CacheKey, std::shared_future<Entry>, KeyHash> map_;
  std::atomic<std::uint64_t> hits_{0}, misses_{0}, compiles_{0}, failures_{0};
  std::atomic<std::uint64_t> compile_us_{0};
};

}  // namespace epifuse
