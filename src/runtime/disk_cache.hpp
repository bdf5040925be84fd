#pragma once
// The disk cache (docs/disk-cache.md): records of (key bytes, payload bytes),
// one file per key, written to a temporary file and renamed into place,
// checksummed, compared whole on load, evicted least recently used. Safe for
// many threads and many processes sharing one directory; every failure is a
// miss or (for writes) one warning and memory-only caching, never an error.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace epifuse {

class DiskCache {
 public:
  enum class Kind : std::uint32_t { kernel = 1, tuned = 2 };

  struct Stats {
    std::uint64_t hits = 0, misses = 0, rejected = 0, writes = 0, evicted = 0;
    std::uint64_t files = 0, bytes = 0;  ///< what the folder holds now
    bool writable = true;                ///< false after a write failed (memory-only from then on)
  };
  struct EntryInfo {
    Kind kind = Kind::kernel;
    std::filesystem::path path;
    std::uint64_t bytes = 0;
    bool valid = false;  ///< the record reads back whole (size, checksum, magic, format)
  };

  static constexpr std::uint64_t k_default_max_bytes = std::uint64_t{512} << 20;

  /// The cache the environment asks for (EPIFUSE_CACHE, EPIFUSE_CACHE_DIR,
  /// XDG_CACHE_HOME, HOME, EPIFUSE_CACHE_MAX_MB); nullptr when turned off or
  /// when no directory can be named.
  static std::unique_ptr<DiskCache> from_environment();
  /// The directory from_environment would use, or nullopt (and why in `reason`).
  static std::optional<std::filesystem::path> environment_dir(std::string* reason = nullptr);

  explicit DiskCache(std::filesystem::path root, std::uint64_t max_bytes = k_default_max_bytes);

  /// The payload stored for `key`, or nullopt (no file, or a record that is
  /// not whole or holds another key: counted as rejected).
  std::optional<std::string> load(Kind kind, std::string_view key);
  /// Writes (key, payload) atomically; on failure warns once and stops writing.
  void store(Kind kind, std::string_view key, std::string_view payload);

  Stats stats() const;
  std::vector<EntryInfo> entries() const;
  /// Removes every record (and stray temporary file); returns how many files went.
  std::size_t clear();
  const std::filesystem::path& root() const { return root_; }

  /// The record format, exposed for the corruption tests.
  static std::string encode(Kind kind, std::string_view key, std::string_view payload);
  std::filesystem::path path_of(Kind kind, std::string_view key) const;

 private:
  std::filesystem::path folder(Kind kind) const;
  void warn_once(const std::string& reason);
  void evict_if_needed();

  std::filesystem::path root_;
  std::uint64_t max_bytes_;
  std::atomic<bool> writable_{true};
  std::atomic<std::uint64_t> hits_{0}, misses_{0}, rejected_{0}, writes_{0}, evicted_{0}, tmp_counter_{0};
  std::once_flag warned_;
  std::mutex evict_mutex_;
};

}  // namespace epifuse
