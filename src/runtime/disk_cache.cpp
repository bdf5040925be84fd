#include "runtime/disk_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
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

// The whole file, or nullopt when it cannot be opened or read.
std::optional<std::string> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return std::nullopt;
  return data;
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

std::optional<std::uint64_t> env_megabytes(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const unsigned long long mb = std::strtoull(v, &end, 10);
  if (*end || mb == 0 || mb > (std::uint64_t{1} << 40)) return std::nullopt;
  return mb << 20;
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

std::unique_ptr<DiskCache> DiskCache::from_environment() {
  const std::optional<fs::path> dir = environment_dir();
  if (!dir) return nullptr;
  return std::make_unique<DiskCache>(*dir, env_megabytes("EPIFUSE_CACHE_MAX_MB").value_or(k_default_max_bytes));
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
  std::optional<std::string> data = read_file(p);
  if (!data) {
    ++misses_;
    return std::nullopt;
  }
  const std::optional<Record> r = parse(*data);
  if (!r || r->kind != kind || r->key != key) {
    // Not whole, or another key under the same hash (another version, target
    // or toolkit): a miss; the caller's store replaces it by rename.
    ++rejected_;
    ++misses_;
    return std::nullopt;
  }
  ++hits_;
  // Least recently used: a hit is a use (best effort; a read-only cache still serves).
  ::utimensat(AT_FDCWD, p.c_str(), nullptr, 0);
  return std::string(r->payload);
}

void DiskCache::warn_once(const std::string& reason) {
  writable_ = false;
  std::call_once(warned_, [&] {
    std::cerr << fmt::format("epifuse: warning: kernel cache {}: {}; caching in memory only\n", root_.string(),
                             reason);
  });
}

void DiskCache::store(Kind kind, std::string_view key, std::string_view payload) {
  if (!writable_) return;
  const fs::path dir = folder(kind);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return warn_once(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  const fs::path final_path = path_of(kind, key);
  // pid, a per-process counter and the clock: unique across threads, and across
  // processes in separate pid namespaces that share the folder (O_EXCL checks).
  const fs::path tmp =
      dir / fmt::format("{}{}.{}.{}.{}", k_tmp_prefix, final_path.stem().string(), ::getpid(), tmp_counter_++,
                        std::chrono::steady_clock::now().time_since_epoch().count());
  const std::string record = encode(kind, key, payload);
  {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return warn_once(fmt::format("cannot write {}: {}", tmp.string(), std::strerror(errno)));
    std::size_t done = 0;
    while (done < record.size()) {
      const ssize_t n = ::write(fd, record.data() + done, record.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        return warn_once(fmt::format("cannot write {}: {}", tmp.string(), std::strerror(n < 0 ? err : ENOSPC)));
      }
      done += static_cast<std::size_t>(n);
    }
    if (::close(fd) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      return warn_once(fmt::format("cannot write {}: {}", tmp.string(), std::strerror(err)));
    }
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return warn_once(fmt::format("cannot rename into {}: {}", final_path.string(), std::strerror(err)));
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
      EntryInfo e;
      e.kind = kind;
      e.path = p;
      std::error_code size_ec;
      e.bytes = fs::file_size(p, size_ec);
      if (size_ec) continue;  // removed meanwhile
      const std::optional<std::string> data = read_file(p);
      e.valid = data && parse(*data).has_value();
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
      std::error_code size_ec;
      const std::uint64_t n = fs::file_size(it->path(), size_ec);
      if (size_ec) continue;
      ++s.files;
      s.bytes += n;
    }
  }
  return s;
}

// Note [Cache eviction]
// After a write, when the records exceed the limit, the least recently used
// (oldest modification time: a hit touches its file) go until 80% of the limit
// remains; temporary files of writers that died (older than an hour) go too.
// Another process may evict at the same moment: a file already gone is fine,
// and a record evicted while another process reads it is still whole in that
// reader (POSIX keeps an unlinked file readable through an open descriptor).
void DiskCache::evict_if_needed() {
  std::lock_guard lock(evict_mutex_);
  struct File {
    fs::path path;
    std::uint64_t bytes;
    fs::file_time_type time;
  };
  std::vector<File> files;
  std::uint64_t total = 0;
  const auto now = fs::file_time_type::clock::now();
  for (const Kind kind : {Kind::kernel, Kind::tuned}) {
    std::error_code ec;
    for (fs::directory_iterator it(folder(kind), ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code e1, e2;
      const std::uint64_t bytes = it->file_size(e1);
      const fs::file_time_type time = it->last_write_time(e2);
      if (e1 || e2) continue;
      if (is_temporary(it->path())) {
        if (now - time > std::chrono::hours(1)) fs::remove(it->path(), e1);
        continue;
      }
      total += bytes;
      files.push_back({it->path(), bytes, time});
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
  for (const Kind kind : {Kind::kernel, Kind::tuned}) {
    std::error_code ec;
    std::vector<fs::path> doomed;
    for (fs::directory_iterator it(folder(kind), ec), end; !ec && it != end; it.increment(ec))
      if (is_record(it->path()) || is_temporary(it->path()))
        doomed.push_back(it->path());
    for (const fs::path& p : doomed)
      if (fs::remove(p, ec)) ++removed;
  }
  return removed;
}

}  // namespace epifuse
