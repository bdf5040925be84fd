// .npy reading and writing: round trips, the exact bytes numpy writes, and
// malformed files that must fail with a UserError naming the file.
#include <doctest/doctest.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "epifuse/errors.hpp"
#include "epifuse/npy.hpp"
#include "io/atomic_file.hpp"

using namespace epifuse;
namespace fs = std::filesystem;

namespace {

// A scratch directory removed at the end of each test case.
struct ScratchDir {
  fs::path dir;
  ScratchDir() {
    static int counter = 0;
    dir = fs::temp_directory_path() /
          ("epifuse_test_npy_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  fs::path operator/(const std::string& name) const { return dir / name; }
};

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// An .npy file assembled by hand: magic, version, header length, header, data.
std::string npy_bytes(int major, std::string header, const std::string& data, bool pad = true) {
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  if (pad) {
    header += '\n';
    while ((10 + len_bytes - 2 + header.size()) % 64 != 0) header.insert(header.size() - 1, " ");
  }
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (std::size_t i = 0; i < len_bytes; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <class T>
HostTensor tensor(DType dtype, std::vector<std::int64_t> shape, const std::vector<T>& values) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * sizeof(T));
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

void check_same(const HostTensor& a, const HostTensor& b) {
  CHECK(a.dtype == b.dtype);
  CHECK(a.shape == b.shape);
  CHECK(a.bytes == b.bytes);
}

// The read must fail with a UserError whose message names the file and says `why`.
void check_rejects(const fs::path& p, const std::string& why) {
  CAPTURE(p);
  CAPTURE(why);
  try {
    read_npy(p);
    FAIL("read_npy accepted a malformed file");
  } catch (const UserError& e) {
    const std::string msg = e.what();
    CAPTURE(msg);
    CHECK(msg.find(p.string()) != std::string::npos);
    CHECK(msg.find(why) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("npy: round trip of each dtype and rank") {
  ScratchDir tmp;
  // Bit patterns chosen to include negative zero, NaN and the largest half.
  const auto f32 = tensor<float>(DType::f32, {2, 3}, {1.5f, -2.0f, 0.0f, -0.0f, 3.25e-5f, 1e30f});
  const auto f16 = tensor<std::uint16_t>(DType::f16, {3}, {0x3C00, 0x8000, 0x7BFF});
  const auto bf16 = tensor<std::uint16_t>(DType::bf16, {}, {0x7FC0});
  const auto empty = tensor<float>(DType::f32, {0, 4}, {});
  const auto rank3 = tensor<std::uint16_t>(DType::f16, {2, 1, 2}, {1, 2, 3, 4});
  int i = 0;
  for (const HostTensor* t : {&f32, &f16, &bf16, &empty, &rank3}) {
    const fs::path p = tmp / ("t" + std::to_string(i++) + ".npy");
    write_npy(p, *t);
    check_same(read_npy(p), *t);
    CHECK(fs::file_size(p) % 64 == t->bytes.size() % 64);  // header is 64-byte aligned
  }
}

TEST_CASE("npy: the header is byte for byte what numpy 1.24 writes") {
  // Expected bytes printed by numpy 1.24:
  //   np.lib.format.write_array(buf, np.zeros(shape, dtype), version=(1, 0))
  // for ((2,3), '<f4'), ((3,), '<f2') and ((), '<u2'): 118-byte headers, 128 in all.
  ScratchDir tmp;
  struct Case {
    HostTensor t;
    std::string dict;
  };
  const std::vector<Case> cases = {
      {tensor<float>(DType::f32, {2, 3}, std::vector<float>(6, 0.0f)),
       "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"},
      {tensor<std::uint16_t>(DType::f16, {3}, std::vector<std::uint16_t>(3, 0)),
       "{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }"},
      {tensor<std::uint16_t>(DType::bf16, {}, std::vector<std::uint16_t>(1, 0)),
       "{'descr': '<u2', 'fortran_order': False, 'shape': (), }"},
  };
  for (const Case& c : cases) {
    const fs::path p = tmp / "h.npy";
    write_npy(p, c.t);
    const std::string bytes = read_file(p);
    REQUIRE(bytes.size() == 128 + c.t.bytes.size());
    std::string expected = std::string("\x93NUMPY\x01\x00\x76\x00", 10) + c.dict;
    expected += std::string(127 - expected.size(), ' ') + "\n";
    CHECK(bytes.substr(0, 128) == expected);
    CHECK(bytes.substr(128) == std::string(c.t.bytes.size(), '\0'));
  }
}

TEST_CASE("npy: versions 2.0 and 3.0, double quotes, no trailing comma, 1-d Fortran order") {
  ScratchDir tmp;
  const std::vector<float> v = {1.0f, 2.0f, 3.0f};
  const auto want = tensor<float>(DType::f32, {3}, v);
  const std::vector<std::string> headers = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
      "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (3,)}",
      "{'shape': (3,), 'fortran_order': True, 'descr': '<f4'}",  // 1-d: same bytes either order
      "{'descr':'<f4','fortran_order':False,'shape':(3L,)}",      // Python 2 long
  };
  int i = 0;
  for (int major : {1, 2, 3}) {
    for (const auto& h : headers) {
      const fs::path p = tmp / ("v" + std::to_string(i++) + ".npy");
      write_file(p, npy_bytes(major, h, raw(v)));
      CAPTURE(major);
      CAPTURE(h);
      check_same(read_npy(p), want);
    }
  }
}

TEST_CASE("npy: malformed and unsupported files fail with the file's name") {
  ScratchDir tmp;
  const std::string six_floats = raw(std::vector<float>(6, 1.0f));
  auto file = [&](const std::string& name, const std::string& bytes) {
    const fs::path p = tmp / name;
    write_file(p, bytes);
    return p;
  };
  auto hdr = [](const std::string& descr, const std::string& order, const std::string& shape) {
    return "{'descr': " + descr + ", 'fortran_order': " + order + ", 'shape': " + shape + ", }";
  };
  const std::string good = hdr("'<f4'", "False", "(2, 3)");

  check_rejects(tmp / "missing.npy", "cannot open");
  check_rejects(tmp.dir, "is a directory");
  check_rejects(file("empty.npy", ""), "magic");
  check_rejects(file("text.npy", "hello, world, this is text"), "magic");
  {
    std::string b = npy_bytes(1, good, six_floats);
    b[6] = 4;
    check_rejects(file("v4.npy", b), "version 4.0");
  }
  check_rejects(file("big.npy", npy_bytes(1, hdr("'>f4'", "False", "(2, 3)"), six_floats)), "big-endian");
  check_rejects(file("f8.npy", npy_bytes(1, hdr("'<f8'", "False", "(3,)"), six_floats)), "unsupported dtype '<f8'");
  check_rejects(file("obj.npy", npy_bytes(1, hdr("'|O'", "False", "(3,)"), six_floats)), "unsupported dtype '|O'");
  check_rejects(file("i4.npy", npy_bytes(1, hdr("'<i4'", "False", "(6,)"), six_floats)), "unsupported dtype");
  check_rejects(file("struct.npy", npy_bytes(1, hdr("[('a', '<f4')]", "False", "(6,)"), six_floats)),
                "structured");
  check_rejects(file("fortran.npy", npy_bytes(1, hdr("'<f4'", "True", "(2, 3)"), six_floats)), "Fortran");
  check_rejects(file("short.npy", npy_bytes(1, good, six_floats.substr(0, 23))), "truncated");
  check_rejects(file("long.npy", npy_bytes(1, good, six_floats + "x")), "after the data");
  check_rejects(file("cut_header.npy", npy_bytes(1, good, "").substr(0, 40)), "header length");
  check_rejects(file("cut_prefix.npy", std::string("\x93NUMPY\x02\x00\x10", 9)), "magic");
  check_rejects(file("neg.npy", npy_bytes(1, hdr("'<f4'", "False", "(-2, 3)"), six_floats)), "negative");
  check_rejects(file("huge_dim.npy", npy_bytes(1, hdr("'<f4'", "False", "(1125899906842624,)"), six_floats)),
                "too large");
  check_rejects(file("huge_numel.npy", npy_bytes(1, hdr("'<f4'", "False", "(1048576, 1048576, 1048576)"), "")),
                "too many elements");
  check_rejects(file("overflow.npy", npy_bytes(1, hdr("'<f4'", "False", "(99999999999999999999,)"), "")),
                "tuple of integers");
  check_rejects(file("float_dim.npy", npy_bytes(1, hdr("'<f4'", "False", "(2.5, 3)"), six_floats)), "expected");
  check_rejects(file("no_shape.npy", npy_bytes(1, "{'descr': '<f4', 'fortran_order': False}", six_floats)),
                "must have");
  check_rejects(file("extra_key.npy",
                     npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}", six_floats)),
                "unexpected key 'x'");
  check_rejects(file("bad_bool.npy", npy_bytes(1, hdr("'<f4'", "0", "(6,)"), six_floats)), "True or False");
  check_rejects(file("unterminated.npy", npy_bytes(1, "{'descr: '<f4'}", six_floats)), "");
  check_rejects(file("trailing.npy", npy_bytes(1, good + " junk", six_floats)), "trailing");
}

TEST_CASE("npy: writing into a missing directory is a UserError naming the file") {
  ScratchDir tmp;
  const fs::path p = tmp / "no/such/dir/y.npy";
  const auto t = tensor<float>(DType::f32, {1}, {1.0f});
  CHECK_THROWS_WITH_AS(write_npy(p, t), doctest::Contains(p.string().c_str()), UserError);
}

// --- Note [Atomic output files]: the destination is whole or as it was -------------------

namespace {

// The names in `dir`, sorted: a temporary left behind shows here.
std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A file-size limit of `bytes` for this process while it lives, with SIGXFSZ
// ignored (as the command line ignores it), so that a write past the limit
// fails with EFBIG: the one write error a test can cause without root, a
// tmpfs or a full disk. The previous limit and action come back at the end.
struct FileSizeLimit {
  rlimit old{};
  void (*old_action)(int) = nullptr;
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    old_action = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old;
    small.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_action);
  }
};

}  // namespace

TEST_CASE("npy: a write that fails part-way keeps the previous file and leaves no temporary") {
  ScratchDir tmp;
  const fs::path p = tmp / "y.npy";
  const auto good = tensor<float>(DType::f32, {2}, {1.0f, 2.0f});
  write_npy(p, good);
  const std::string before = read_file(p);
  const auto big = tensor<float>(DType::f32, {64, 64}, std::vector<float>(64 * 64, 3.0f));  // 16 KiB
  std::string message;
  bool runtime_error = false;
  {
    FileSizeLimit limit(4096);
    try {
      write_npy(p, big);
    } catch (const RuntimeError& e) {
      runtime_error = true;
      message = e.what();
    }
  }
  CHECK(runtime_error);
  CHECK(message == p.string() + ": write failed: " + std::strerror(EFBIG));
  CHECK(read_file(p) == before);
  CHECK(listing(tmp.dir) == std::vector<std::string>{"y.npy"});
}

TEST_CASE("npy: a new file that cannot be written completely is not created at all") {
  ScratchDir tmp;
  const auto big = tensor<float>(DType::f32, {64, 64}, std::vector<float>(64 * 64, 3.0f));
  {
    FileSizeLimit limit(4096);
    CHECK_THROWS_AS(write_npy(tmp / "new.npy", big), RuntimeError);
  }
  CHECK(listing(tmp.dir).empty());
}

TEST_CASE("npy: /dev/full fails with the write error and stays a device") {
  // A device cannot be replaced by a rename: it is written in place, and a
  // rename onto it (as root) would have replaced the device with a file.
  if (!fs::is_character_file("/dev/full")) {
    MESSAGE("skipped: no /dev/full here");
    return;
  }
  const auto t = tensor<float>(DType::f32, {2}, {1.0f, 2.0f});
  CHECK_THROWS_WITH_AS(write_npy("/dev/full", t), "/dev/full: write failed: No space left on device", RuntimeError);
  CHECK(fs::is_character_file("/dev/full"));
  CHECK_NOTHROW(write_npy("/dev/null", t));
  CHECK(fs::is_character_file("/dev/null"));
}

TEST_CASE("npy: through a symbolic link, the file it names is replaced and the link kept") {
  ScratchDir tmp;
  fs::create_directories(tmp / "real");
  write_file(tmp / "real/y.npy", "old");
  fs::create_symlink("real/y.npy", tmp / "link.npy");
  const auto t = tensor<float>(DType::f32, {2}, {1.0f, 2.0f});
  write_npy(tmp / "link.npy", t);
  CHECK(fs::is_symlink(tmp / "link.npy"));
  check_same(read_npy(tmp / "real/y.npy"), t);
  CHECK(listing(tmp / "real") == std::vector<std::string>{"y.npy"});
}

TEST_CASE("npy: the file replaced keeps its permissions") {
  ScratchDir tmp;
  const fs::path p = tmp / "private.npy";
  write_file(p, "old");
  fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write);
  write_npy(p, tensor<float>(DType::f32, {1}, {1.0f}));
  CHECK(fs::status(p).permissions() == (fs::perms::owner_read | fs::perms::owner_write));
}

// Root may write any file, so each case runs where it can tell something.
TEST_CASE("npy: a read-only file is refused, as writing into it in place was" * doctest::skip(::geteuid() == 0)) {
  ScratchDir tmp;
  const fs::path p = tmp / "ro.npy";
  write_file(p, "old");
  fs::permissions(p, fs::perms::owner_read);
  CHECK_THROWS_WITH_AS(write_npy(p, tensor<float>(DType::f32, {1}, {1.0f})),
                       (p.string() + ": cannot write: Permission denied").c_str(), UserError);
  CHECK(read_file(p) == "old");
  CHECK(listing(tmp.dir) == std::vector<std::string>{"ro.npy"});
}

TEST_CASE("npy: the file replaced keeps its owner (root)" * doctest::skip(::geteuid() != 0)) {
  ScratchDir tmp;
  const fs::path p = tmp / "theirs.npy";
  write_file(p, "old");
  REQUIRE(::chown(p.c_str(), 12345, 12345) == 0);
  write_npy(p, tensor<float>(DType::f32, {1}, {1.0f}));
  struct stat st{};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  CHECK(st.st_uid == 12345u);
  CHECK(st.st_gid == 12345u);
}

TEST_CASE("atomic file: a directory that cannot take a new file is a UserError naming the file") {
  // /proc takes no new files, for root too (a chmod'ed directory would not stop root).
  CHECK_THROWS_WITH_AS(io::write_file_atomically("/proc/epifuse_test.npy", "x"),
                       doctest::Contains("/proc/epifuse_test.npy: cannot write: "), UserError);
}

TEST_CASE("atomic file: SIGINT during a write removes the temporary and ends the process by SIGINT") {
  ScratchDir tmp;
  const fs::path p = tmp / "y.npy";
  write_file(p, "old");
  std::fflush(nullptr);  // nothing buffered is written twice by the child
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The child must not return into doctest: every path ends in _exit or the signal.
    io::remove_temp_files_on_signal();
    io::AtomicFile f(p);
    f.write("new, but not all of it", 22);
    if (listing(tmp.dir).size() != 2) ::_exit(3);  // the temporary is there beside y.npy
    ::raise(SIGINT);
    ::_exit(4);  // not reached: the handler re-raises with the default action
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK((WIFSIGNALED(status) ? WTERMSIG(status) : -WEXITSTATUS(status)) == SIGINT);
  CHECK(read_file(p) == "old");
  CHECK(listing(tmp.dir) == std::vector<std::string>{"y.npy"});
}

TEST_CASE("atomic file: a signal ignored before stays ignored") {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGTERM, SIG_IGN);  // as nohup or a shell's background job leaves SIGINT
    io::remove_temp_files_on_signal();
    ::raise(SIGTERM);
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
}
