#include "io/atomic_file.hpp"

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "epifuse/errors.hpp"

namespace epifuse::io {

namespace fs = std::filesystem;

namespace {

// --- the temporaries a signal handler removes ----------------------------------------
//
// Fixed slots of plain bytes and atomic states, so that the handler only reads
// memory and calls unlink (both async-signal-safe): no allocation, no lock.
// A slot is free, being filled (the handler skips it), or armed.
constexpr int k_free = 0, k_filling = 1, k_armed = 2;
constexpr std::size_t k_slots = 16;  // files written at once; one at a time is the usual case
constexpr std::size_t k_max_path = 4096;

struct Slot {
  std::atomic<int> state{k_free};
  char path[k_max_path];
};
std::array<Slot, k_slots> g_slots;
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free atomics");

// The slot now holding `path`, or -1 when every slot is taken or the path is
// too long to keep: that temporary is then left behind by a signal, which
// costs a stray file, never a damaged destination.
int register_temp(const std::string& path) {
  if (path.size() >= k_max_path) return -1;
  for (std::size_t i = 0; i < k_slots; ++i) {
    int expected = k_free;
    if (!g_slots[i].state.compare_exchange_strong(expected, k_filling)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(k_armed, std::memory_order_release);
    return static_cast<int>(i);
  }
  return -1;
}

void unregister_temp(int slot) {
  if (slot >= 0) g_slots[static_cast<std::size_t>(slot)].state.store(k_free, std::memory_order_release);
}

void remove_temps_and_reraise(int sig) {
  const int saved_errno = errno;
  for (Slot& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == k_armed) ::unlink(s.path);
  // SA_RESETHAND put the default action back on entry; the signal is blocked
  // until this returns, and then ends the process as it would have without us.
  ::raise(sig);
  errno = saved_errno;
}

// --- where the bytes go ---------------------------------------------------------------

// A name for the temporary beside `target`: hidden, and telling what it was
// for. The destination's name is cut so that the whole stays within NAME_MAX.
fs::path temp_name(const fs::path& target) {
  static std::atomic<unsigned> counter{0};
  const std::string base = target.filename().string().substr(0, 128);
  return target.parent_path() / fmt::format(".{}.{}-{}.epifuse-tmp", base, ::getpid(), counter.fetch_add(1));
}

}  // namespace

// The symbolic links of the last component are followed (a link to a link
// ...), so that the rename replaces the file and keeps the links. A relative
// link is relative to the directory holding it. Stops after 40 as the kernel
// does (ELOOP); what is left then fails when it is opened.
fs::path replaced_file(const fs::path& path) {
  fs::path p = path;
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(p, ec))) return p;
    const fs::path link = fs::read_symlink(p, ec);
    if (ec) return p;
    p = link.is_absolute() ? link : p.parent_path() / link;
  }
  return p;
}

AtomicFile::AtomicFile(fs::path destination) : destination_(std::move(destination)) {
  target_ = replaced_file(destination_);
  struct stat st{};
  const bool exists = ::stat(target_.c_str(), &st) == 0;
  const auto cannot_write = [this](int error) {
    return UserError(fmt::format("{}: cannot write: {}", destination_.string(), std::strerror(error)));
  };
  if (exists && !S_ISREG(st.st_mode)) {
    // A device or a FIFO: there is nothing to replace, only to write to.
    fd_ = ::open(destination_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd_ < 0) throw cannot_write(errno);
    return;
  }
  // A rename would replace a file its owner made read-only, which writing
  // into it in place never did: that stays refused.
  if (exists && ::access(target_.c_str(), W_OK) != 0) throw cannot_write(errno);
  // The temporary's mode follows the file it replaces (a 0600 file stays
  // private); a new file gets what open() would have given it.
  const mode_t mode = exists ? (st.st_mode & 07777) : 0666;
  for (unsigned attempt = 0; fd_ < 0; ++attempt) {
    temp_ = temp_name(target_);
    // Armed before the file exists, so that no signal finds it unregistered
    // (unlinking a name not made yet is harmless).
    slot_ = register_temp(temp_.string());
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd_ >= 0) break;
    const int error = errno;
    unregister_temp(slot_);
    slot_ = -1;
    if (error != EEXIST || attempt == 100) throw cannot_write(error);
  }
  // The file replaced keeps its owner where we may give it (root may), and
  // its mode, which open() narrowed by the umask; chmod after chown, which
  // may clear set-id bits. Failing either leaves a file of ours: no error.
  if (exists) {
    (void)::fchown(fd_, st.st_uid, st.st_gid);
    (void)::fchmod(fd_, mode);
  }
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
  unregister_temp(slot_);
  slot_ = -1;
}

void AtomicFile::fail(int error) {
  if (error_ == 0) error_ = error ? error : EIO;
  discard();
  throw RuntimeError(fmt::format("{}: write failed: {}", destination_.string(), std::strerror(error_)));
}

void AtomicFile::write(const void* data, std::size_t size) {
  if (error_ != 0 || fd_ < 0) fail(error_);
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    // A short write is not an error: the next one reports why (ENOSPC, or
    // EFBIG at a file-size limit, with SIGXFSZ ignored).
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(errno);
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

void AtomicFile::commit() {
  if (error_ != 0 || fd_ < 0) fail(error_);
  // EINVAL: a device or FIFO written in place cannot be synced, and need not be.
  if (::fsync(fd_) != 0 && errno != EINVAL) fail(errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(errno);
  if (!temp_.empty() && ::rename(temp_.c_str(), target_.c_str()) != 0) fail(errno);
  committed_ = true;
  unregister_temp(slot_);
  slot_ = -1;
}

void write_file_atomically(const fs::path& path, std::string_view bytes) {
  AtomicFile file(path);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

void remove_temp_files_on_signal() {
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old{};
    if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler == SIG_IGN) continue;
    struct sigaction sa{};
    sa.sa_handler = remove_temps_and_reraise;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    ::sigaction(sig, &sa, nullptr);
  }
}

}  // namespace epifuse::io
