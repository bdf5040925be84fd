// The disk cache's records (docs/disk-cache.md) without NVRTC: round trips,
// corruptions (truncated, bit-flipped, zero-length, wrong format version,
// another epifuse version's or target's key under the same file name), things
// that are not files under a record's name (a FIFO, a directory, symlinks, a
// sparse file of terabytes), an unwritable folder, a concurrent clear, a bad
// EPIFUSE_CACHE_MAX_MB, code-object checks, and least-recently-used eviction.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <fmt/format.h>

#include "backend/code_object.hpp"
#include "runtime/cache_records.hpp"
#include "runtime/disk_cache.hpp"
#include "../disk_cache_env.hpp"

using namespace epifuse;
using epifuse::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void write_all(const fs::path& p, const std::string& data) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << data;
}

CacheKey sample_key(std::string target = "sm_90a", std::string version = "0.1.0") {
  CacheKey k;
  k.signature = std::string("\x01\x02sig\x00bytes", 11);
  k.shape_class = "row_aligned/i32";
  k.tile = GemmTile{128, 256, 32, 2, 4, 4, 8};
  k.target = std::move(target);
  k.compiler = "NVRTC 13.0";
  k.options = "-std=c++17 -arch=sm_90a";
  k.templates = 0x1234;
  k.version = std::move(version);
  return k;
}

// Runs `f` on another thread and waits at most `seconds`; false when it did
// not return by then. `unblock` then runs (to end a read stuck on a FIFO), and
// the thread is waited for.
template <class F, class U>
bool finishes_within(int seconds, F f, U unblock) {
  std::atomic<bool> done{false};
  std::thread t([&] {
    f();
    done = true;
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!done && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool in_time = done;
  if (!in_time) unblock();
  t.join();
  return in_time;
}

// std::cerr's text while this object lives.
struct CaptureCerr {
  std::ostringstream text;
  std::streambuf* old = std::cerr.rdbuf(text.rdbuf());
  ~CaptureCerr() { std::cerr.rdbuf(old); }
  std::size_t count(const std::string& what) const {
    const std::string s = text.str();
    std::size_t n = 0;
    for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  }
};

std::size_t temporaries_in(const fs::path& dir) {
  std::size_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    n += it->path().filename().string().starts_with(".tmp.");
  return n;
}

// A 64-bit little-endian ELF header with this machine and e_flags.
std::string elf_header(std::uint16_t machine, std::uint32_t flags) {
  std::string h(64, '\0');
  h[0] = 0x7f, h[1] = 'E', h[2] = 'L', h[3] = 'F', h[4] = 2, h[5] = 1, h[6] = 1;
  std::memcpy(h.data() + 18, &machine, 2);
  std::memcpy(h.data() + 48, &flags, 4);
  return h;
}

}  // namespace

TEST_CASE("disk cache: records round-trip, and a miss is a miss") {
  TempDir dir;
  DiskCache cache(dir.path);
  const std::string key = key_bytes(sample_key());
  CHECK_FALSE(cache.load(DiskCache::Kind::kernel, key));
  const std::string payload = encode_kernel({0xabcdef, 123.5, {'\x7f', 'E', 'L', 'F', '\0', 'x'}});
  cache.store(DiskCache::Kind::kernel, key, payload);
  const auto got = cache.load(DiskCache::Kind::kernel, key);
  REQUIRE(got);
  CHECK(*got == payload);
  const auto rec = decode_kernel(*got);
  REQUIRE(rec);
  CHECK(rec->source_hash == 0xabcdef);
  CHECK(rec->compile_ms == 123.5);
  CHECK(rec->cubin.size() == 6);
  // The same key as a tuned record is another file and another kind.
  CHECK_FALSE(cache.load(DiskCache::Kind::tuned, key));
  const DiskCache::Stats s = cache.stats();
  CHECK(s.hits == 1);
  CHECK(s.misses == 2);
  CHECK(s.writes == 1);
  CHECK(s.files == 1);
  CHECK(s.bytes == DiskCache::encode(DiskCache::Kind::kernel, key, payload).size());
}

TEST_CASE("disk cache: keys differ in every field, tiles and tuned records round-trip") {
  const std::string base = key_bytes(sample_key());
  CacheKey k = sample_key();
  k.path = KernelPath::general;
  CHECK(key_bytes(k) != base);
  k = sample_key();
  k.tile = GemmTile{128, 256, 32, 2, 4, 4, 8, 2};
  CHECK(key_bytes(k) != base);
  CHECK(key_bytes(sample_key("sm_90")) != base);
  CHECK(key_bytes(sample_key("sm_90a", "0.1.1")) != base);
  // Length prefixes: moving a byte from one field to the next changes the bytes.
  CacheKey a = sample_key(), b = sample_key();
  a.shape_class = "ab";
  a.target = "c";
  b.shape_class = "a";
  b.target = "bc";
  CHECK(key_bytes(a) != key_bytes(b));

  for (const TileConfig& t : {TileConfig{ElementwiseTile{512, 8, 4}}, TileConfig{GemmTile{32, 32, 64, 2, 2, 4, 8, 1}},
                              TileConfig{GemmTile{64, 128, 32, 2, 2, 6, 8, 4}}, TileConfig{WgmmaTile{256, 128, 64, 4, 16}},
                              TileConfig{WgmmaTile{128, 128, 64, 5, 8, 2, 1}}, TileConfig{RowTile{512, 4, 3, 0}}}) {
    const auto back = tile_from_bytes(tile_bytes(t));
    REQUIRE(back);
    CHECK(*back == t);
    const auto tuned = decode_tuned(encode_tuned({t, 0.25}));
    REQUIRE(tuned);
    CHECK(tuned->tile == t);
    CHECK(tuned->ms == 0.25);
  }
  CHECK_FALSE(tile_from_bytes(""));
  CHECK_FALSE(tile_from_bytes(tile_bytes(ElementwiseTile{}) + "x"));
  CHECK_FALSE(decode_kernel("short"));
}

TEST_CASE("disk cache: truncated, bit-flipped, zero-length and wrong-format records are rejected, then replaced") {
  TempDir dir;
  DiskCache cache(dir.path);
  const std::string key = key_bytes(sample_key());
  const std::string payload = encode_kernel({7, 1.0, std::vector<char>(4000, 'c')});
  cache.store(DiskCache::Kind::kernel, key, payload);
  const fs::path file = cache.path_of(DiskCache::Kind::kernel, key);
  const std::string good = read_all(file);
  REQUIRE(good.size() > 4000);

  REQUIRE(DiskCache::encode(DiskCache::Kind::kernel, key, payload) == good);  // the encoder is what the file holds
  // Format 2 with a checksum that matches: rejected for the format itself.
  std::string wrong_format = good;
  wrong_format[8] = 2;
  const std::uint64_t sum = XXH3_64bits(wrong_format.data(), wrong_format.size() - 8);
  std::memcpy(wrong_format.data() + wrong_format.size() - 8, &sum, 8);
  struct Case {
    const char* name;
    std::string data;
  };
  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x10;
  std::string flipped_checksum = good;
  flipped_checksum.back() ^= 0x01;
  const Case cases[] = {{"truncated", good.substr(0, good.size() - 100)},
                        {"truncated inside the header", good.substr(0, 20)},
                        {"bit flip in the payload", flipped},
                        {"bit flip in the checksum", flipped_checksum},
                        {"zero length", ""},
                        {"wrong format version", wrong_format},
                        {"bytes appended", good + "extra"}};
  std::uint64_t rejected = cache.stats().rejected;
  for (const Case& c : cases) {
    CAPTURE(c.name);
    write_all(file, c.data);
    CHECK_FALSE(cache.load(DiskCache::Kind::kernel, key));
    CHECK(cache.stats().rejected == ++rejected);
    cache.store(DiskCache::Kind::kernel, key, payload);  // what the Jit does after compiling
    const auto again = cache.load(DiskCache::Kind::kernel, key);
    REQUIRE(again);
    CHECK(*again == payload);
  }
  // `entries` reports a damaged record as not whole.
  write_all(file, good.substr(0, 50));
  const auto listed = cache.entries();
  REQUIRE(listed.size() == 1);
  CHECK_FALSE(listed[0].valid);
}

TEST_CASE("disk cache: a record for another target or epifuse version is never loaded, even under the same name") {
  TempDir dir;
  DiskCache cache(dir.path);
  const std::string mine = key_bytes(sample_key("sm_90a", "0.1.0"));
  for (const std::string other : {key_bytes(sample_key("sm_80", "0.1.0")), key_bytes(sample_key("sm_90a", "0.2.0"))}) {
    // A whole, checksummed record of the other key, placed where mine would be
    // (a hash collision, or a file copied between machines).
    fs::create_directories(cache.path_of(DiskCache::Kind::kernel, mine).parent_path());
    write_all(cache.path_of(DiskCache::Kind::kernel, mine),
              DiskCache::encode(DiskCache::Kind::kernel, other, encode_kernel({1, 1.0, {'x'}})));
    CHECK_FALSE(cache.load(DiskCache::Kind::kernel, mine));
  }
  CHECK(cache.stats().rejected == 2);
}

TEST_CASE("disk cache: a folder that cannot be written degrades to memory only with one warning") {
  TempDir dir;
  // A regular file where the cache folder would go: creating it fails, even for root.
  write_all(dir.path / "file", "not a folder");
  DiskCache cache(dir.path / "file" / "cache");
  const std::string key = key_bytes(sample_key());
  CHECK_NOTHROW(cache.store(DiskCache::Kind::kernel, key, "payload"));
  CHECK_NOTHROW(cache.store(DiskCache::Kind::kernel, key, "payload"));  // no second warning, no throw
  CHECK_FALSE(cache.stats().writable);
  CHECK(cache.stats().writes == 0);
  CHECK_FALSE(cache.load(DiskCache::Kind::kernel, key));
}

TEST_CASE("disk cache: least recently used records are evicted past the size limit") {
  TempDir dir;
  const std::string payload(1000, 'p');
  const std::size_t record = DiskCache::encode(DiskCache::Kind::kernel, key_bytes(sample_key("t0")), payload).size();
  DiskCache cache(dir.path, 5 * record);  // room for five
  auto key = [](int i) { return key_bytes(sample_key("t" + std::to_string(i))); };
  const auto base = fs::file_time_type::clock::now() - std::chrono::hours(10);
  for (int i = 0; i < 5; ++i) {
    cache.store(DiskCache::Kind::kernel, key(i), payload);
    // Distinct ages, oldest first (file times are too coarse to rely on the clock).
    fs::last_write_time(cache.path_of(DiskCache::Kind::kernel, key(i)), base + std::chrono::minutes(i));
  }
  REQUIRE(cache.stats().files == 5);
  CHECK(cache.load(DiskCache::Kind::kernel, key(0)));  // a hit makes record 0 the most recent
  cache.store(DiskCache::Kind::kernel, key(5), payload);  // six records: over the limit, down to 80% (four)
  CHECK(cache.stats().files == 4);
  CHECK(cache.stats().evicted == 2);
  CHECK(cache.load(DiskCache::Kind::kernel, key(0)));
  CHECK_FALSE(cache.load(DiskCache::Kind::kernel, key(1)));
  CHECK_FALSE(cache.load(DiskCache::Kind::kernel, key(2)));
  CHECK(cache.load(DiskCache::Kind::kernel, key(5)));
  CHECK(cache.clear() == 4);
  CHECK(cache.stats().files == 0);
}

TEST_CASE("disk cache: a FIFO, a directory, symlinks and a huge sparse file under a record's name are misses, then replaced") {
  TempDir dir;
  DiskCache cache(dir.path);
  const std::string key = key_bytes(sample_key());
  const std::string payload = encode_kernel({7, 1.0, std::vector<char>(100, 'c')});
  const fs::path file = cache.path_of(DiskCache::Kind::kernel, key);
  fs::create_directories(file.parent_path());
  // A whole record of this very key, outside the cache: reached only through a symlink.
  const fs::path outside = dir.path / "outside.bin";
  write_all(outside, DiskCache::encode(DiskCache::Kind::kernel, key, payload));
  struct Case {
    const char* name;
    std::function<void()> make;
  };
  const Case cases[] = {
      {"a FIFO", [&] { REQUIRE(::mkfifo(file.c_str(), 0644) == 0); }},
      {"an empty directory", [&] { fs::create_directory(file); }},
      {"a directory with files in it",
       [&] {
         fs::create_directories(file / "sub");
         write_all(file / "sub" / "f", "x");
       }},
      {"a symlink to a record", [&] { fs::create_symlink(outside, file); }},
      {"a file just over the size cap",
       [&] { write_all(file, std::string(DiskCache::k_max_record_bytes + 1, 'x')); }},
      {"a sparse file of 4 TiB",
       [&] {
         const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
         REQUIRE(fd >= 0);
         REQUIRE(::ftruncate(fd, off_t{4} << 40) == 0);
         ::close(fd);
       }},
      {"a symlink to /dev/zero", [&] { fs::create_symlink("/dev/zero", file); }},
  };
  // A FIFO blocks a reader until a writer comes: one is opened if a read hangs.
  const auto open_a_writer = [&] { ::close(::open(file.c_str(), O_WRONLY | O_NONBLOCK)); };
  for (const Case& c : cases) {
    INFO(std::string(c.name));
    c.make();
    const std::uint64_t rejected = cache.stats().rejected;
    std::optional<std::string> got = std::string("not run");
    CHECK(finishes_within(10, [&] { got = cache.load(DiskCache::Kind::kernel, key); }, open_a_writer));
    CHECK_FALSE(got);
    CHECK(cache.stats().rejected == rejected + 1);
    // list, stats and clear see it without hanging or following it.
    std::vector<DiskCache::EntryInfo> listed;
    CHECK(finishes_within(10, [&] { listed = cache.entries(); }, open_a_writer));
    REQUIRE(listed.size() == 1);
    CHECK_FALSE(listed[0].valid);
    CHECK(cache.stats().files == 1);
    // The next store replaces it, and the cache stays writable.
    cache.store(DiskCache::Kind::kernel, key, payload);
    CHECK(cache.stats().writable);
    const auto again = cache.load(DiskCache::Kind::kernel, key);
    REQUIRE(again);
    CHECK(*again == payload);
    CHECK(fs::is_regular_file(fs::symlink_status(file)));
    // Put it back, and clear removes it whatever it is.
    fs::remove(file);
    c.make();
    CHECK(cache.clear() == 1);
    CHECK_FALSE(fs::exists(fs::symlink_status(file)));
  }
  CHECK(fs::exists(outside));  // a symlink's target is never removed
}

TEST_CASE("disk cache: clear removes only temporary files old enough to be a dead writer's") {
  TempDir dir;
  DiskCache cache(dir.path);
  const std::string key = key_bytes(sample_key());
  cache.store(DiskCache::Kind::kernel, key, "payload");
  const fs::path folder = cache.path_of(DiskCache::Kind::kernel, key).parent_path();
  const fs::path young = folder / ".tmp.young.1.0.0", old = folder / ".tmp.old.1.0.0";
  write_all(young, "half a rec");
  write_all(old, "half a rec");
  fs::last_write_time(old, fs::file_time_type::clock::now() - DiskCache::k_stale_temporary_age - std::chrono::minutes(5));
  CHECK(cache.clear() == 2);  // the record and the old temporary
  CHECK(fs::exists(young));
  CHECK_FALSE(fs::exists(old));
}

TEST_CASE("disk cache: a clear in another process while a store writes: the store lands, the cache stays on") {
  TempDir dir;
  DiskCache writer(dir.path), other(dir.path);  // two processes, as far as the folder can tell
  const std::string key = key_bytes(sample_key());
  writer.before_rename_for_testing = [&](const fs::path&) { other.clear(); };
  CaptureCerr err;
  writer.store(DiskCache::Kind::kernel, key, "payload");
  CHECK(writer.stats().writable);
  CHECK(writer.stats().writes == 1);
  CHECK(writer.load(DiskCache::Kind::kernel, key) == std::optional<std::string>("payload"));
  CHECK(err.text.str().empty());
}

TEST_CASE("disk cache: a store whose temporary file vanished is skipped with one warning; later stores still write") {
  TempDir dir;
  DiskCache cache(dir.path);
  const std::string a = key_bytes(sample_key("t_a")), b = key_bytes(sample_key("t_b")), c = key_bytes(sample_key("t_c"));
  cache.before_rename_for_testing = [](const fs::path& tmp) { fs::remove(tmp); };
  CaptureCerr err;
  cache.store(DiskCache::Kind::kernel, a, "pa");
  cache.store(DiskCache::Kind::kernel, b, "pb");
  CHECK(err.count("warning") == 1);
  CHECK(err.text.str().find("cannot rename") != std::string::npos);
  CHECK(cache.stats().writable);
  CHECK_FALSE(cache.load(DiskCache::Kind::kernel, a));
  cache.before_rename_for_testing = nullptr;
  cache.store(DiskCache::Kind::kernel, c, "pc");
  CHECK(cache.load(DiskCache::Kind::kernel, c) == std::optional<std::string>("pc"));
  CHECK(err.count("warning") == 1);
  CHECK(temporaries_in(cache.path_of(DiskCache::Kind::kernel, c).parent_path()) == 0);
}

TEST_CASE("disk cache: tuned tiles appear whole or not at all (a temporary file, then a rename)") {
  TempDir dir;
  DiskCache cache(dir.path);
  const std::string key = "tuned|" + key_bytes(sample_key());
  const std::string payload = encode_tuned({GemmTile{128, 128, 32, 2, 2, 4, 8, 1}, 0.5});
  const fs::path final_path = cache.path_of(DiskCache::Kind::tuned, key);
  bool checked = false;
  cache.before_rename_for_testing = [&](const fs::path& tmp) {
    // Written whole beside the final name, which does not exist yet.
    CHECK(tmp.parent_path() == final_path.parent_path());
    CHECK(tmp.filename().string().starts_with(".tmp."));
    CHECK(read_all(tmp) == DiskCache::encode(DiskCache::Kind::tuned, key, payload));
    CHECK_FALSE(fs::exists(final_path));
    checked = true;
  };
  cache.store(DiskCache::Kind::tuned, key, payload);
  CHECK(checked);
  CHECK(cache.load(DiskCache::Kind::tuned, key) == std::optional<std::string>(payload));
  CHECK(temporaries_in(final_path.parent_path()) == 0);
  // A rename that fails leaves neither a partial record nor the temporary file.
  fs::remove(final_path);
  cache.before_rename_for_testing = [](const fs::path& tmp) { fs::remove(tmp); };
  CaptureCerr err;
  cache.store(DiskCache::Kind::tuned, key, payload);
  CHECK_FALSE(fs::exists(final_path));
  CHECK(temporaries_in(final_path.parent_path()) == 0);
}

TEST_CASE("disk cache: a bad EPIFUSE_CACHE_MAX_MB is one warning naming it and the default, never an error") {
  for (const char* bad : {"abc", "-5", "12x", "1e999", "", "0", " 12", "+12", "99999999999999999999999"}) {
    INFO(std::string(bad));
    std::string warning;
    CHECK(DiskCache::max_bytes_from(bad, &warning) == DiskCache::k_default_max_bytes);
    CHECK(warning.find(fmt::format("EPIFUSE_CACHE_MAX_MB='{}'", bad)) != std::string::npos);
    CHECK(warning.find("using the default, 512 MiB") != std::string::npos);
  }
  std::string warning;
  CHECK(DiskCache::max_bytes_from("12", &warning) == std::uint64_t{12} << 20);
  CHECK(warning.empty());
  // Through the environment: printed on stderr, and the cache still works.
  TempDir dir;
  epifuse::test::DiskCacheOn on(dir.path);
  ::setenv("EPIFUSE_CACHE_MAX_MB", "12x", 1);
  CaptureCerr err;
  const std::unique_ptr<DiskCache> cache = DiskCache::from_environment();
  ::unsetenv("EPIFUSE_CACHE_MAX_MB");
  REQUIRE(cache);
  CHECK(err.count("epifuse: warning: EPIFUSE_CACHE_MAX_MB='12x'") == 1);
  cache->store(DiskCache::Kind::kernel, "k", "p");
  CHECK(cache->load(DiskCache::Kind::kernel, "k"));
}

TEST_CASE("disk cache: a record's key names its target; list --target reads it back") {
  CHECK(target_of_key(key_bytes(sample_key("sm_80"))) == std::optional<std::string>("sm_80"));
  CHECK(target_of_key("tuned|" + key_bytes(sample_key("gfx90a:xnack-"))) == std::optional<std::string>("gfx90a:xnack-"));
  CHECK_FALSE(target_of_key("not a key"));
  CHECK_FALSE(target_of_key(""));
  TempDir dir;
  DiskCache cache(dir.path);
  cache.store(DiskCache::Kind::kernel, key_bytes(sample_key("sm_90a")), "p");
  const auto listed = cache.entries();
  REQUIRE(listed.size() == 1);
  CHECK(target_of_key(listed[0].key) == std::optional<std::string>("sm_90a"));
}

TEST_CASE("code objects: an ELF for the target's machine and, on AMD, its gfx architecture; anything else says why") {
  using backend::code_object_problem;
  CHECK(code_object_problem(elf_header(190, 0x5a), "sm_90a").empty());
  CHECK(code_object_problem(elf_header(224, 0x03f), "gfx90a").empty());
  CHECK(code_object_problem(elf_header(224, 0x03f | 0x300), "gfx90a:xnack-").empty());  // feature bits aside
  CHECK(code_object_problem(elf_header(224, 0x036), "gfx1030").empty());
  CHECK(code_object_problem(elf_header(224, 0x04c), "gfx942:sramecc+").empty());
  CHECK(code_object_problem("hello from a banner\n", "gfx90a").find("not an ELF file (\"hello from a banner") !=
        std::string::npos);
  CHECK(code_object_problem("", "sm_90a").find("0 bytes") != std::string::npos);
  CHECK(code_object_problem(elf_header(224, 0x03f), "sm_90a").find("machine 224, not 190") != std::string::npos);
  CHECK(code_object_problem(elf_header(190, 0), "gfx90a").find("not 224") != std::string::npos);
  CHECK(code_object_problem(elf_header(224, 0x036), "gfx90a").find("not gfx90a") != std::string::npos);
  std::string elf32 = elf_header(224, 0x03f);
  elf32[4] = 1;
  CHECK_FALSE(code_object_problem(elf32, "gfx90a").empty());
}

TEST_CASE("disk cache: a record too big to ever load is evicted first, not the least recently used good ones") {
  TempDir dir;
  const std::string payload(1000, 'p');
  const std::size_t record = DiskCache::encode(DiskCache::Kind::kernel, key_bytes(sample_key("t0")), payload).size();
  DiskCache cache(dir.path, 5 * record);
  auto key = [](int i) { return key_bytes(sample_key("t" + std::to_string(i))); };
  const auto base = fs::file_time_type::clock::now() - std::chrono::hours(10);
  for (int i = 0; i < 3; ++i) {
    cache.store(DiskCache::Kind::kernel, key(i), payload);
    fs::last_write_time(cache.path_of(DiskCache::Kind::kernel, key(i)), base + std::chrono::minutes(i));
  }
  // A sparse file of 4 TiB under another record's name, the most recently written.
  const fs::path huge = cache.path_of(DiskCache::Kind::kernel, key(9));
  const int fd = ::open(huge.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, off_t{4} << 40) == 0);
  ::close(fd);
  cache.store(DiskCache::Kind::kernel, key(3), payload);  // over the limit only because of the huge file
  CHECK_FALSE(fs::exists(huge));
  for (int i = 0; i < 4; ++i) CHECK(cache.load(DiskCache::Kind::kernel, key(i)));
  CHECK(cache.stats().evicted == 1);
}
