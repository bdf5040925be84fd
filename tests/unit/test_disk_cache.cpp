// The disk cache's records (docs/disk-cache.md) without NVRTC: round trips,
// every corruption the issue names (truncated, bit-flipped, zero-length, wrong
// format version, another epifuse version's or target's key under the same
// file name), an unwritable folder, and least-recently-used eviction.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <cstring>
#include <string>

#define XXH_INLINE_ALL
#include <xxhash.h>

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
