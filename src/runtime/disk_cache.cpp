#include "runtime/disk_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <system_error>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <fmt/format.h>

namespace epifuse {

namespace fs = std::filesystem;

namespace {

constexpr char k_magic[8] = {'E', 'P', 'I', 'F', 'U', 'S', 'E', 'C'};
constexpr std::uint32_t k_format = 1;
// magic, format, kind, key length, payload length ... checksum
constexpr std::size_t k_header = 8 + 4 + 4 + 8 + 8;
constexpr std::size_t k_trailer = 8;
constexpr const char* k_format_folder = "v1";
constexpr const char* k_tmp_prefix = ".tmp.";

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class T>
T get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::uint64_t xxh(std::string_view s) { return XXH3_64bits(s.data(), s.size()); }

bool is_temporary(const fs::path& p) { return p.filename().string().starts_with(k_tmp_prefix); }
bool is_record(const fs::path& p) { return p.extension() == ".bin" && !is_temporary(p); }

// Note [Reading a record]
// store() only ever renames a regular file into place, so anything else under
// a record's name is not a record, and reading it must not hang or exhaust the
// process: a FIFO (open and read would block), a directory, a symlink (to
// /dev/zero, say: endless), a sparse file of terabytes. The record is opened
// with O_NOFOLLOW (the cache folder itself may be a symlink; a record never
// is) and O_NONBLOCK (a FIFO opens at once), and the descriptor, not the name,
// is checked: a regular file of at most k_max_record_bytes, read for exactly
// its size. Anything else is a rejected record: a miss, and the store after
// the compile renames a record over it.
struct ReadResult {
  std::optional<std::string> data;  ///< the file's bytes when it may be a record
  bool present = false;             ///< something is there (a rejected record when data is empty)
};
ReadResult read_record(const fs::path& p) {
  ReadResult r;
  const int fd = ::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    r.present = errno != ENOENT && errno != ENOTDIR;  // nothing there, or no folder yet
    return r;
  }
  r.present = true;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0 ||
      static_cast<std::uint64_t>(st.st_size) > DiskCache::k_max_record_bytes) {
    ::close(fd);
    return r;
  }
  std::string data(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::read(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // an error, or truncated since the fstat
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (done == data.size()) r.data = std::move(data);
  return r;
}

// lstat: what the entry itself is, a symlink's target never followed.
std::optional<struct stat> entry_status(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return std::nullopt;
  return st;
}

// Removes an entry of the cache folder whatever it is (a directory with what
// is in it; a symlink, not its target). False when it was not there or stayed.
bool remove_entry(const fs::path& p) {
  std::error_code ec;
  const std::optional<struct stat> st = entry_status(p);
  if (!st) return false;
  if (S_ISDIR(st->st_mode)) return fs::remove_all(p, ec) > 0 && !ec;
  return fs::remove(p, ec);
}

// Checks a record's framing (sizes, checksum, magic, format); the kind, key
// and payload views point into `data` when it is whole.
struct Record {
  DiskCache::Kind kind;
  std::string_view key, payload;
};
std::optional<Record> parse(std::string_view data) {
  if (data.size() < k_header + k_trailer) return std::nullopt;
  if (std::memcmp(data.data(), k_magic, sizeof k_magic) != 0) return std::nullopt;
  if (get<std::uint32_t>(data.data() + 8) != k_format) return std::nullopt;
  const auto kind = get<std::uint32_t>(data.data() + 12);
  const auto key_len = get<std::uint64_t>(data.data() + 16);
  const auto payload_len = get<std::uint64_t>(data.data() + 24);
  const std::uint64_t body = data.size() - k_header - k_trailer;
  if (key_len > body || payload_len != body - key_len) return std::nullopt;
  const std::size_t end = data.size() - k_trailer;
  if (get<std::uint64_t>(data.data() + end) != xxh(data.substr(0, end))) return std::nullopt;
  if (kind != static_cast<std::uint32_t>(DiskCache::Kind::kernel) &&
      kind != static_cast<std::uint32_t>(DiskCache::Kind::tuned))
    return std::nullopt;
  return Record{static_cast<DiskCache::Kind>(kind), data.substr(k_header, key_len),
                data.substr(k_header + key_len, payload_len)};
}

}  // namespace

std::optional<fs::path> DiskCache::environment_dir(std::string* reason) {
  auto say = [&](const char* why) {
    if (reason) *reason = why;
    return std::nullopt;
  };
  if (const char* on = std::getenv("EPIFUSE_CACHE"); on && std::string_view(on) == "0")
    return say("EPIFUSE_CACHE=0");
  if (const char* d = std::getenv("EPIFUSE_CACHE_DIR"); d && *d) return fs::path(d);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x && fs::path(x).is_absolute())
    return fs::path(x) / "epifuse";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "epifuse";
  return say("neither EPIFUSE_CACHE_DIR, XDG_CACHE_HOME nor HOME is set");
}

// Cache configuration never makes a compile fail (docs/disk-cache.md): a bad
// EPIFUSE_CACHE_MAX_MB is a warning, the default used.
std::uint64_t DiskCache::max_bytes_from(std::string_view text, std::string* warning) {
  constexpr std::uint64_t k_most_mb = std::uint64_t{1} << 40;
  std::uint64_t mb = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), mb);
  if (!text.empty() && ec == std::errc{} && end == text.data() + text.size() && mb >= 1 && mb <= k_most_mb)
    return mb << 20;
  if (warning)
    *warning = fmt::format("EPIFUSE_CACHE_MAX_MB='{}' is not a whole number of MiB from 1 to {}; using the default, "
                           "{} MiB",
                           text, k_most_mb, k_default_max_bytes >> 20);
  return k_default_max_bytes;
}

std::unique_ptr<DiskCache> DiskCache::from_environment() {
  const std::optional<fs::path> dir = environment_dir();
  if (!dir) return nullptr;
  std::uint64_t max_bytes = k_default_max_bytes;
  if (const char* v = std::getenv("EPIFUSE_CACHE_MAX_MB")) {
    std::string warning;
    max_bytes = max_bytes_from(v, &warning);
    // Once per process: every Jit reads the variable.
    static std::once_flag warned;
    if (!warning.empty()) std::call_once(warned, [&] { std::cerr << "epifuse: warning: " << warning << '\n'; });
  }
  return std::make_unique<DiskCache>(*dir, max_bytes);
}

DiskCache::DiskCache(fs::path root, std::uint64_t max_bytes) : root_(std::move(root)), max_bytes_(max_bytes) {}

fs::path DiskCache::folder(Kind kind) const {
  return root_ / k_format_folder / (kind == Kind::kernel ? "kernels" : "tuned");
}

fs::path DiskCache::path_of(Kind kind, std::string_view key) const {
  return folder(kind) / fmt::format("{:016x}.bin", xxh(key));
}

std::string DiskCache::encode(Kind kind, std::string_view key, std::string_view payload) {
  std::string out;
  out.reserve(k_header + key.size() + payload.size() + k_trailer);
  out.append(k_magic, sizeof k_magic);
  put(out, k_format);
  put(out, static_cast<std::uint32_t>(kind));
  put(out, static_cast<std::uint64_t>(key.size()));
  put(out, static_cast<std::uint64_t>(payload.size()));
  out.append(key);
  out.append(payload);
  put(out, xxh(out));
  return out;
}

std::optional<std::string> DiskCache::load(Kind kind, std::string_view key) {
  const fs::path p = path_of(kind, key);
  const ReadResult read = read_record(p);
  if (!read.present) {
    ++misses_;
    return std::nullopt;
  }
  const std::optional<Record> r = read.data ? parse(*read.data) : std::nullopt;
  if (!r || r->kind != kind || r->key != key) {
    // Not a record (Note [Reading a record]), not whole, or another key under
    // the same hash (another version, target or toolkit): a miss; the
    // caller's store replaces it by rename.
    ++rejected_;
    ++misses_;
    return std::nullopt;
  }
  ++hits_;
  // Least recently used: a hit is a use (best effort; a read-only cache still serves).
  ::utimensat(AT_FDCWD, p.c_str(), nullptr, 0);
  return std::string(r->payload);
}

void DiskCache::warn_once(const std::string& reason, bool read_only) {
  if (read_only) writable_ = false;
  std::call_once(warned_, [&] {
    std::cerr << fmt::format("epifuse: warning: kernel cache {}: {}; {}\n", root_.string(), reason,
                             read_only ? "caching in memory only" : "that entry is kept in memory only");
  });
}

void DiskCache::store(Kind kind, std::string_view key, std::string_view payload) {
  if (!writable_) return;
  const fs::path dir = folder(kind);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return warn_once(fmt::format("cannot create {}: {}", dir.string(), ec.message()), true);
  const fs::path final_path = path_of(kind, key);
  // pid, a per-process counter and the clock: unique across threads, and across
  // processes in separate pid namespaces that share the folder (O_EXCL checks).
  const fs::path tmp =
      dir / fmt::format("{}{}.{}.{}.{}", k_tmp_prefix, final_path.stem().string(), ::getpid(), tmp_counter_++,
                        std::chrono::steady_clock::now().time_since_epoch().count());
  const std::string record = encode(kind, key, payload);
  {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return warn_once(fmt::format("cannot write {}: {}", tmp.string(), std::strerror(errno)), true);
    std::size_t done = 0;
    while (done < record.size()) {
      const ssize_t n = ::write(fd, record.data() + done, record.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        return warn_once(fmt::format("cannot write {}: {}", tmp.string(), std::strerror(n < 0 ? err : ENOSPC)), true);
      }
      done += static_cast<std::size_t>(n);
    }
    if (::close(fd) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      return warn_once(fmt::format("cannot write {}: {}", tmp.string(), std::strerror(err)), true);
    }
  }
  if (before_rename_for_testing) before_rename_for_testing(tmp);
  int renamed = ::rename(tmp.c_str(), final_path.c_str());
  int err = renamed == 0 ? 0 : errno;
  if (renamed != 0 && (err == EISDIR || err == ENOTEMPTY || err == EEXIST)) {
    // A directory where the record goes: never a record (Note [Reading a
    // record]), and left there it would fail this key's every store.
    if (const std::optional<struct stat> st = entry_status(final_path); st && S_ISDIR(st->st_mode)) {
      remove_entry(final_path);
      renamed = ::rename(tmp.c_str(), final_path.c_str());
      err = renamed == 0 ? 0 : errno;
    }
  }
  if (renamed != 0) {
    // The folder is writable (the temporary file was written): this record is
    // skipped, the cache stays on. The temporary may be gone already (a
    // `cache clear` in another process), which is fine.
    ::unlink(tmp.c_str());
    return warn_once(fmt::format("cannot rename into {}: {}", final_path.string(), std::strerror(err)), false);
  }
  ++writes_;
  evict_if_needed();
}

std::vector<DiskCache::EntryInfo> DiskCache::entries() const {
  std::vector<EntryInfo> out;
  for (const Kind kind : {Kind::kernel, Kind::tuned}) {
    std::error_code ec;
    for (fs::directory_iterator it(folder(kind), ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path& p = it->path();
      if (!is_record(p)) continue;
      const std::optional<struct stat> st = entry_status(p);
      if (!st) continue;  // removed meanwhile
      EntryInfo e;
      e.kind = kind;
      e.path = p;
      e.bytes = static_cast<std::uint64_t>(st->st_size);
      const ReadResult read = read_record(p);  // never blocks or reads without bound
      if (const std::optional<Record> r = read.data ? parse(*read.data) : std::nullopt; r && r->kind == kind) {
        e.valid = true;
        e.key = std::string(r->key);
      }
      out.push_back(std::move(e));
    }
  }
  return out;
}

DiskCache::Stats DiskCache::stats() const {
  Stats s;
  s.hits = hits_;
  s.misses = misses_;
  s.rejected = rejected_;
  s.writes = writes_;
  s.evicted = evicted_;
  s.writable = writable_;
  for (const Kind kind : {Kind::kernel, Kind::tuned}) {
    std::error_code ec;
    for (fs::directory_iterator it(folder(kind), ec), end; !ec && it != end; it.increment(ec)) {
      if (!is_record(it->path())) continue;
      const std::optional<struct stat> st = entry_status(it->path());
      if (!st) continue;  // removed meanwhile
      ++s.files;
      s.bytes += static_cast<std::uint64_t>(st->st_size);
    }
  }
  return s;
}

// Note [Cache eviction]
// After a write, when the records exceed the limit, the least recently used
// (oldest modification time: a hit touches its file) go until 80% of the limit
// remains; a file over k_max_record_bytes can never load and goes first.
// Temporary files of writers that died (older than k_stale_temporary_age) go
// too. Sizes and times are the entries' own (lstat): a symlink's target is
// never counted or touched. Another process may evict at the same moment: a
// file already gone is fine, and a record evicted while another process reads
// it is still whole in that reader (POSIX keeps an unlinked file readable
// through an open descriptor).
void DiskCache::evict_if_needed() {
  std::lock_guard lock(evict_mutex_);
  struct File {
    fs::path path;
    std::uint64_t bytes;
    std::int64_t time;  // modification time, seconds
  };
  std::vector<File> files;
  std::uint64_t total = 0;
  const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count();
  const std::int64_t stale = std::chrono::duration_cast<std::chrono::seconds>(k_stale_temporary_age).count();
  for (const Kind kind : {Kind::kernel, Kind::tuned}) {
    std::error_code ec;
    for (fs::directory_iterator it(folder(kind), ec), end; !ec && it != end; it.increment(ec)) {
      const std::optional<struct stat> st = entry_status(it->path());
      if (!st || !S_ISREG(st->st_mode)) continue;
      if (is_temporary(it->path())) {
        if (now - st->st_mtime > stale) remove_entry(it->path());
        continue;
      }
      const auto bytes = static_cast<std::uint64_t>(st->st_size);
      total += bytes;
      files.push_back({it->path(), bytes, bytes > k_max_record_bytes ? INT64_MIN : std::int64_t{st->st_mtime}});
    }
  }
  if (total <= max_bytes_) return;
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.time < b.time; });
  const std::uint64_t target = max_bytes_ / 5 * 4;
  for (const File& f : files) {
    if (total <= target) break;
    std::error_code ec;
    if (fs::remove(f.path, ec)) ++evicted_;
    total -= f.bytes;
  }
}

std::size_t DiskCache::clear() {
  std::size_t removed = 0;
  const auto now = std::chrono::system_clock::now();
  for (const Kind kind : {Kind::kernel, Kind::tuned}) {
    std::error_code ec;
    std::vector<fs::path> doomed;
    for (fs::directory_iterator it(folder(kind), ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path& p = it->path();
      if (is_record(p)) {
        doomed.push_back(p);
      } else if (is_temporary(p)) {
        // Another process's write in progress must not lose its file
        // (Note [Cache eviction]); a dead writer's goes once it is old.
        const std::optional<struct stat> st = entry_status(p);
        if (st && now - std::chrono::system_clock::from_time_t(st->st_mtime) > k_stale_temporary_age)
          doomed.push_back(p);
      }
    }
    for (const fs::path& p : doomed)
      if (remove_entry(p)) ++removed;
  }
  return removed;
}

}  // namespace epifuse
