// The Jit with the disk cache (docs/disk-cache.md), through NVRTC with no GPU:
// a second Jit (a second process, as far as the cache can tell) reads what the
// first compiled; a damaged record is compiled again and replaced; keys hold no
// include path; and the race test: 8 processes x 4 threads x 50 keys in one
// folder, every kernel checked against a cubin compiled with the cache off.
#include <doctest/doctest.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <fmt/format.h>

#include "backend/nvrtc.hpp"
#include "epifuse/jit.hpp"
#include "epifuse/json.hpp"
#include "runtime/cache_records.hpp"
#include "runtime/disk_cache.hpp"
#include "../disk_cache_env.hpp"

extern char** environ;

using namespace epifuse;
namespace fs = std::filesystem;

namespace epifuse::test {

namespace {

bool have_nvrtc() {
  if (backend::nvrtc_or_null()) return true;
  MESSAGE("disk cache tests skipped: " << backend::nvrtc_unavailable_reason());
  return false;
}

KernelSpec add_mul() {
  return load_spec(fs::path(EPIFUSE_SOURCE_DIR) / "examples/chains/add_mul.json");
}

// 50 keys: one chain, 50 elementwise tiles (5 block sizes x 5 vector widths x 2 grids).
std::vector<TileConfig> race_tiles() {
  std::vector<TileConfig> out;
  for (int threads : {64, 128, 256, 512, 1024})
    for (int vec : {1, 2, 4, 8, 16})
      for (int blocks : {0, 2}) out.push_back(ElementwiseTile{threads, vec, blocks});
  return out;
}
constexpr Shape k_race_shape{1000, 1000, 0};

std::uint64_t hash_of(const std::vector<char>& bin) { return XXH3_64bits(bin.data(), bin.size()); }

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

// One process of the race: argv = dir, reference file, worker index. Four
// threads, each with its own Jit (its own memory cache, so every key goes to
// the disk), walk the 50 keys from different starting points and check every
// cubin against the reference. Exit 0 when all match.
int cache_race_worker(int argc, char** argv) {
  if (argc != 3) return 2;
  ::unsetenv("EPIFUSE_CACHE");
  ::setenv("EPIFUSE_CACHE_DIR", argv[0], 1);
  std::vector<std::uint64_t> reference;
  {
    std::ifstream in(argv[1]);
    for (std::uint64_t h; in >> std::hex >> h;) reference.push_back(h);
  }
  const int worker = std::atoi(argv[2]);
  const KernelSpec spec = add_mul();
  const std::vector<TileConfig> tiles = race_tiles();
  if (reference.size() != tiles.size()) return 3;
  std::atomic<int> bad{0}, from_disk{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      Jit jit("sm_90a");
      const std::size_t start = static_cast<std::size_t>(worker * 7 + t * 13);
      for (std::size_t n = 0; n < tiles.size(); ++n) {
        const std::size_t i = (start + n) % tiles.size();
        auto kernel = jit.compile(spec, k_race_shape, tiles[i]);
        if (hash_of(kernel->binary()) != reference[i]) {
          ++bad;
          fmt::print(stderr, "worker {} thread {}: key {} ({}) has another binary\n", worker, t, i,
                     to_string(tiles[i]));
        }
        if (kernel->from_disk()) ++from_disk;
      }
    });
  for (auto& th : threads) th.join();
  fmt::print("worker {}: {} kernels from disk, {} wrong\n", worker, from_disk.load(), bad.load());
  return bad ? 1 : 0;
}

}  // namespace epifuse::test

using namespace epifuse::test;

TEST_SUITE("compile") {
  TEST_CASE("disk cache: a second Jit reads what the first compiled, byte for byte" * doctest::test_suite("nvrtc")) {
    if (!have_nvrtc()) return;
    TempDir dir("epifuse-jit-disk");
    DiskCacheOn on(dir.path);
    const KernelSpec spec = add_mul();
    std::vector<char> first;
    {
      Jit jit("sm_90a");
      auto k = jit.compile(spec, {300, 200, 0});
      CHECK_FALSE(k->from_disk());
      first = k->binary();
      CHECK(jit.stats().disk_writes == 1);
      CHECK(jit.key(spec, {300, 200, 0}).options.find("-I") == std::string::npos);
    }
    Jit jit("sm_90a");
    auto k = jit.compile(spec, {300, 200, 0});
    CHECK(k->from_disk());
    CHECK(k->binary() == first);
    CHECK(jit.stats().disk_hits == 1);
    CHECK(jit.stats().compiles == 1);  // the memory cache's build ran, NVRTC did not
    MESSAGE(fmt::format("disk hit: {:.3f} ms (NVRTC compile: see the first Jit)", k->compile_ms()));
    CHECK(k->compile_ms() < 50.0);
    // Another target is another key: compiled, not read.
    Jit other("sm_80");
    CHECK_FALSE(other.compile(spec, {300, 200, 0})->from_disk());
    CHECK(other.disk_entries().size() == 2);
  }

  TEST_CASE("one Jit, two specs of one signature named differently: each kernel binds its own names" *
            doctest::test_suite("nvrtc")) {
    // Note [Binding names]: p - q and, declared the other way round, q - p
    // have one signature; the second's kernel must not bind by the first's names.
    if (!have_nvrtc()) return;
    TempDir dir("epifuse-jit-names");
    DiskCacheOn on(dir.path);
    auto difference = [](const char* first, const char* second, const char* out) {
      KernelSpec s;
      s.mainloop.kind = MainloopKind::elementwise;
      const Value a = s.graph.input(first, DType::f32);
      const Value b = s.graph.input(second, DType::f32);
      s.graph.output(out, s.graph.sub(a, b), DType::f32);
      return s;
    };
    const KernelSpec pq = difference("p", "q", "y"), qp = difference("q", "p", "z");
    REQUIRE(signature_bytes(pq) == signature_bytes(qp));
    Jit jit("sm_90a");
    const Shape shape{64, 64, 0};
    const auto a = jit.compile(pq, shape);
    const auto b = jit.compile(qp, shape);
    CHECK(a->source().inputs == std::vector<std::string>{"p", "q"});
    CHECK(a->source().outputs == std::vector<std::string>{"y"});
    CHECK(b->source().inputs == std::vector<std::string>{"q", "p"});
    CHECK(b->source().outputs == std::vector<std::string>{"z"});
    CHECK(b->source().text == a->source().text);  // one kernel's code
    CHECK(b->from_disk());                        // and one binary: NVRTC ran once
    CHECK(jit.stats().disk_writes == 1);
    CHECK(jit.compile(pq, shape) == a);  // each found again in memory
    CHECK(jit.compile(qp, shape) == b);
  }

  TEST_CASE("disk cache: a damaged record is compiled again and replaced" * doctest::test_suite("nvrtc")) {
    if (!have_nvrtc()) return;
    TempDir dir("epifuse-jit-disk");
    DiskCacheOn on(dir.path);
    const KernelSpec spec = add_mul();
    std::vector<char> good;
    {
      Jit jit("sm_90a");
      good = jit.compile(spec, {64, 64, 0})->binary();
    }
    std::vector<DiskEntry> entries = Jit("sm_90a").disk_entries();
    REQUIRE(entries.size() == 1);
    const std::string bytes = read_all(entries[0].path);
    for (const std::string& damaged : {bytes.substr(0, bytes.size() / 2), std::string(),
                                       bytes.substr(0, 100) + std::string(1, static_cast<char>(bytes[100] ^ 4)) +
                                           bytes.substr(101)}) {
      { std::ofstream(entries[0].path, std::ios::binary | std::ios::trunc) << damaged; }
      Jit jit("sm_90a");
      auto k = jit.compile(spec, {64, 64, 0});
      CHECK_FALSE(k->from_disk());
      CHECK(k->binary() == good);
      CHECK(jit.stats().disk_rejected == 1);
      const std::vector<DiskEntry> now = jit.disk_entries();
      REQUIRE(now.size() == 1);
      CHECK(now[0].valid);
    }
  }

  TEST_CASE("disk cache: a whole record whose binary is not a code object for the target is compiled again" * doctest::test_suite("nvrtc")) {
    if (!have_nvrtc()) return;
    TempDir dir("epifuse-jit-disk");
    DiskCacheOn on(dir.path);
    const KernelSpec spec = add_mul();
    std::vector<char> good;
    {
      Jit jit("sm_90a");
      good = jit.compile(spec, {64, 64, 0})->binary();
    }
    // The record as another writer could have left it: key, source hash and
    // checksum all right, the binary not a cubin (a worker's banner, an AMD object).
    DiskCache cache(dir.path);
    const std::vector<DiskCache::EntryInfo> entries = cache.entries();
    REQUIRE(entries.size() == 1);
    const std::optional<std::string> payload = cache.load(DiskCache::Kind::kernel, entries[0].key);
    REQUIRE(payload);
    std::optional<KernelRecord> record = decode_kernel(*payload);
    REQUIRE(record);
    std::vector<char> amd(good);
    amd[18] = static_cast<char>(224);  // EM_AMDGPU
    for (const std::vector<char>& bad : {std::vector<char>{'h', 'e', 'l', 'l', 'o'}, amd}) {
      record->cubin = bad;
      cache.store(DiskCache::Kind::kernel, entries[0].key, encode_kernel(*record));
      Jit jit("sm_90a");
      auto k = jit.compile(spec, {64, 64, 0});
      CHECK_FALSE(k->from_disk());
      CHECK(k->binary() == good);
      const std::optional<std::string> replaced = cache.load(DiskCache::Kind::kernel, entries[0].key);
      REQUIRE(replaced);
      CHECK(decode_kernel(*replaced)->cubin == good);
    }
  }

  TEST_CASE("disk cache: 8 processes x 4 threads x 50 keys in one folder all get correct kernels" * doctest::test_suite("nvrtc")) {
    if (!have_nvrtc()) return;
    const std::vector<TileConfig> tiles = race_tiles();
    const KernelSpec spec = add_mul();
    TempDir dir("epifuse-jit-disk");
    // The reference: every key compiled with the cache off.
    const fs::path ref = dir.path / "reference.txt";
    {
      Jit jit("sm_90a");
      const auto kernels = jit.compile_all(spec, k_race_shape, tiles);
      std::ofstream out(ref);
      for (const auto& k : kernels) {
        REQUIRE(k);
        out << fmt::format("{:016x}\n", hash_of(k->binary()));
      }
    }
    const int rounds = std::getenv("EPIFUSE_RACE_ROUNDS") ? std::atoi(std::getenv("EPIFUSE_RACE_ROUNDS")) : 1;
    for (int round = 0; round < rounds; ++round) {
      const fs::path cache = dir.path / fmt::format("cache{}", round);
      const std::string exe = fs::read_symlink("/proc/self/exe").string();
      std::vector<pid_t> pids;
      for (int w = 0; w < 8; ++w) {
        const std::string index = std::to_string(w);
        std::vector<std::string> args = {exe, "--cache-race-worker", cache.string(), ref.string(), index};
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        pid_t pid = 0;
        REQUIRE(::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ) == 0);
        pids.push_back(pid);
      }
      int failed = 0;
      for (pid_t pid : pids) {
        int status = 0;
        ::waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
      }
      CAPTURE(round);
      CHECK(failed == 0);
      // 50 whole records and no temporary file left behind.
      ::setenv("EPIFUSE_CACHE_DIR", cache.c_str(), 1);
      ::unsetenv("EPIFUSE_CACHE");
      const std::vector<DiskEntry> entries = Jit("sm_90a").disk_entries();
      ::setenv("EPIFUSE_CACHE", "0", 1);
      CHECK(entries.size() == tiles.size());
      CHECK(std::all_of(entries.begin(), entries.end(), [](const DiskEntry& e) { return e.valid; }));
      std::size_t files = 0;
      for (const auto& f : fs::recursive_directory_iterator(cache)) files += f.is_regular_file();
      CHECK(files == tiles.size());
    }
  }
}
