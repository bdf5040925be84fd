#pragma once
// The disk cache (docs/disk-cache.md): records of (key bytes, payload bytes),
// one file per key, written to a temporary file and renamed into place,
// checksummed, compared whole on load, evicted least recently used. Safe for
// many threads and many processes sharing one directory; every failure is a
// miss or (for writes) at most one warning, never an error.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
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
    bool writable = true;                ///< false once the folder could not be created or written in (memory-only from then on)
  };
  struct EntryInfo {
    Kind kind = Kind::kernel;
    std::filesystem::path path;
    std::uint64_t bytes = 0;
    bool valid = false;  ///< the record reads back whole (size, checksum, magic, format)
    std::string key;     ///< the key bytes it holds, when valid
  };

  static constexpr std::uint64_t k_default_max_bytes = std::uint64_t{512} << 20;
  /// The largest record file load reads (Note [Reading a record]): far above any
  /// cubin or code object epifuse makes (a few MiB at most), far below what a
  /// file that is not a record could make a process allocate.
  static constexpr std::uint64_t k_max_record_bytes = std::uint64_t{64} << 20;
  /// A temporary file younger than this may be a live writer's: eviction and
  /// clear leave it alone.
  static constexpr std::chrono::hours k_stale_temporary_age{1};

  /// The cache the environment asks for (EPIFUSE_CACHE, EPIFUSE_CACHE_DIR,
  /// XDG_CACHE_HOME, HOME, EPIFUSE_CACHE_MAX_MB); nullptr when turned off or
  /// when no directory can be named.
  static std::unique_ptr<DiskCache> from_environment();
  /// EPIFUSE_CACHE_MAX_MB's value as a size limit: whole MiB from 1 to 2^40;
  /// anything else gives k_default_max_bytes and, in `warning`, a line saying
  /// so (from_environment prints it, once per process).
  static std::uint64_t max_bytes_from(std::string_view text, std::string* warning);
  /// The directory from_environment would use, or nullopt (and why in `reason`).
  static std::optional<std::filesystem::path> environment_dir(std::string* reason = nullptr);

  explicit DiskCache(std::filesystem::path root, std::uint64_t max_bytes = k_default_max_bytes);

  /// The payload stored for `key`, or nullopt (no file, or something that is
  /// not a whole record of this key: counted as rejected).
  std::optional<std::string> load(Kind kind, std::string_view key);
  /// Writes (key, payload) atomically, replacing whatever is in the way. A
  /// folder that cannot be made or written in warns once and turns writing off;
  /// a write that fails otherwise (a rename, a temporary file removed meanwhile)
  /// skips this record only. One warning per cache at most.
  void store(Kind kind, std::string_view key, std::string_view payload);

  Stats stats() const;
  std::vector<EntryInfo> entries() const;
  /// Removes every record, whatever kind of file it is, and temporary files
  /// older than k_stale_temporary_age (younger ones may be another process's
  /// write in progress); returns how many entries went.
  std::size_t clear();
  const std::filesystem::path& root() const { return root_; }

  /// The record format, exposed for the corruption tests.
  static std::string encode(Kind kind, std::string_view key, std::string_view payload);
  std::filesystem::path path_of(Kind kind, std::string_view key) const;
  /// Tests only: runs in store() between writing the temporary file and renaming it.
  std::function<void(const std::filesystem::path& temporary)> before_rename_for_testing;

 private:
  std::filesystem::path folder(Kind kind) const;
  /// The warning (one per cache); `read_only` also turns writing off.
  void warn_once(const std::string& reason, bool read_only);
  void evict_if_needed();

  std::filesystem::path root_;
  std::uint64_t max_bytes_;
  std::atomic<bool> writable_{true};
  std::atomic<std::uint64_t> hits_{0}, misses_{0}, rejected_{0}, writes_{0}, evicted_{0}, tmp_counter_{0};
  std::once_flag warned_;
  std::mutex evict_mutex_;
};

}  // namespace epifuse
