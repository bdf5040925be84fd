// hipRTC compiles in a child process (Note [hipRTC in a child process],
// hiprtc.hpp): the parent's posix_spawn and pipes, and the child's main.
//
// The request on the child's stdin:
//   epifuse-hiprtc 1\n  TARGET\n  NAME\n  N\n  N option lines\n  the source to EOF
// The child writes the code object to stdout and hipRTC's log (or an error
// message) to stderr, and exits 0 (compiled), 3 (the source did not compile),
// 2 (a bad request or a refused target) or 4 (no hipRTC).
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <functional>

#include <fmt/format.h>

#include "backend/code_object.hpp"
#include "backend/hiprtc.hpp"

extern char** environ;

#ifndef EPIFUSE_INSTALL_BINDIR  // CMakeLists.txt sets it to CMAKE_INSTALL_FULL_BINDIR
#define EPIFUSE_INSTALL_BINDIR ""
#endif

namespace epifuse::backend {

namespace {

constexpr const char* k_magic = "epifuse-hiprtc 1";

// The worker executable (hiprtc.hpp: compile_hip_isolated, find_hiprtc_worker).
std::string worker_path() {
  if (const char* env = std::getenv("EPIFUSE_HIPRTC_WORKER"); env && *env) return env;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw RuntimeError("hipRTC: cannot find the epifuse executable to compile in (set EPIFUSE_HIPRTC_WORKER)");
  // In a shared library (libepifuse_c.so under Python), the CLI of the same
  // build or install sits beside the library, not beside the interpreter.
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&worker_path), &info) != 0 && info.dli_fname) {
    const std::filesystem::path module = std::filesystem::weakly_canonical(info.dli_fname, ec);
    if (!ec && module != self) {
      try {
        return find_hiprtc_worker(module, EPIFUSE_INSTALL_BINDIR).string();
      } catch (const RuntimeError&) {
        // Not beside the library: beside the executable, whose error names the paths.
      }
    }
  }
  return find_hiprtc_worker(self, EPIFUSE_INSTALL_BINDIR).string();
}

// A pipe whose ends close with it. Close-on-exec: a child spawned meanwhile by
// another thread (the tuner compiles in parallel) must not hold this child's
// stdin open, or this child never sees the end of its request.
struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() {
    if (::pipe2(fd, O_CLOEXEC) != 0) throw RuntimeError(fmt::format("pipe: {}", std::strerror(errno)));
  }
  void close_end(int i) {
    if (fd[i] >= 0) ::close(fd[i]);
    fd[i] = -1;
  }
  ~Pipe() {
    close_end(0);
    close_end(1);
  }
};

using Clock = std::chrono::steady_clock;

// SIGPIPE blocked in this thread while it writes to a child that may have
// died: the write fails with EPIPE instead of the signal killing the process.
// Per thread, so that the tuner's other threads are left alone; a SIGPIPE this
// raised is taken off the pending set before the mask is restored.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~SigpipeBlocked() {
    if (!was_pending_) {
      const timespec zero{};
      while (sigtimedwait(&pipe_, nullptr, &zero) > 0) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

// Writes `request` to the child's stdin and reads its stdout and stderr to
// their ends, in one poll loop (a child that never reads its input cannot
// block us on a full pipe), until `deadline`. False when the deadline came
// first. The child's stdin is closed once the request is written or the child
// stops reading.
bool exchange(Pipe& in, int out_fd, int err_fd, const std::string& request, std::string& out, std::string& err,
              Clock::time_point deadline) {
  SigpipeBlocked no_sigpipe;
  ::fcntl(in.fd[1], F_SETFL, ::fcntl(in.fd[1], F_GETFL) | O_NONBLOCK);
  std::size_t written = 0;
  if (request.empty()) in.close_end(1);
  pollfd fds[3] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}, {in.fd[1], POLLOUT, 0}};
  std::string* sinks[2] = {&out, &err};
  char buf[65536];
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    fds[2].fd = in.fd[1];
    const int ready = ::poll(fds, 3, static_cast<int>(std::min<long long>(left, 1000 * 60)));
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw RuntimeError(fmt::format("poll: {}", std::strerror(errno)));
    }
    if (fds[2].fd >= 0 && (fds[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t n = ::write(in.fd[1], request.data() + written, request.size() - written);
      if (n > 0) written += static_cast<std::size_t>(n);
      // Done, or the child is gone (EPIPE): its exit status says why.
      if (written == request.size() || (n < 0 && errno != EAGAIN && errno != EINTR)) in.close_end(1);
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        fds[i].fd = -1;
      } else {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  in.close_end(1);
  return true;
}

// Waits for the child until `deadline`; false when it is still running then.
bool wait_until(pid_t pid, int& status, Clock::time_point deadline) {
  while (true) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) return true;  // not our child any more: nothing to wait for
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string read_line(std::FILE* in) {
  std::string s;
  for (int c = std::fgetc(in); c != EOF && c != '\n'; c = std::fgetc(in)) s.push_back(static_cast<char>(c));
  return s;
}

}  // namespace

std::filesystem::path find_hiprtc_worker(const std::filesystem::path& self, const std::filesystem::path& install_bindir) {
  std::vector<std::filesystem::path> candidates;
  const auto add = [&](const std::filesystem::path& p) {
    if (std::find(candidates.begin(), candidates.end(), p) == candidates.end()) candidates.push_back(p);
  };
  if (self.filename() == "epifuse") add(self);
  add(self.parent_path() / "epifuse");
  add((self.parent_path() / ".." / "bin" / "epifuse").lexically_normal());
  if (!install_bindir.empty()) add(install_bindir / "epifuse");
  std::error_code ec;
  for (const std::filesystem::path& p : candidates)
    if (std::filesystem::is_regular_file(p, ec)) return p;
  std::string tried;
  for (const std::filesystem::path& p : candidates) tried += (tried.empty() ? "" : ", ") + p.string();
  throw RuntimeError(fmt::format(
      "hipRTC compiles run in a child `epifuse __hiprtc-compile`, and no epifuse executable was found "
      "(tried {}); install the epifuse CLI there or set EPIFUSE_HIPRTC_WORKER to its path",
      tried));
}

std::string inline_headers(const std::string& source, const std::vector<Header>& headers) {
  std::vector<std::string> done;
  std::function<std::string(const std::string&)> expand = [&](const std::string& text) {
    std::string out;
    std::size_t pos = 0;
    while (pos < text.size()) {
      std::size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(pos, end - pos);
      pos = end + 1;
      const Header* h = nullptr;
      if (line.starts_with("#include \""))
        for (const Header& c : headers) {
          const std::string directive = "#include \"" + c.name + "\"";
          if (!line.starts_with(directive)) continue;
          // Nothing after it but blanks and a comment (`#include "x.cuh"  // why`).
          const std::size_t rest = line.find_first_not_of(" \t", directive.size());
          if (rest == std::string::npos || line.compare(rest, 2, "//") == 0) h = &c;
        }
      if (!h) {
        if (line != "#pragma once") out += line + "\n";
        continue;
      }
      if (std::find(done.begin(), done.end(), h->name) != done.end()) continue;
      done.push_back(h->name);
      out += fmt::format("// ---- {} (inlined)\n", h->name) + expand(h->text);
    }
    return out;
  };
  return expand(source);
}

HiprtcBinary compile_hip_isolated(const std::string& source, const std::string& name, const AmdTarget& target,
                                  const std::vector<std::string>& extra_options) {
  const Hiprtc& rtc = hiprtc();  // RuntimeError without hipRTC, before any child
  if (const std::string why = hiprtc_refusal(rtc, target); !why.empty()) throw UserError(why);
  const double timeout_s = hiprtc_timeout_s();  // UserError for a bad value, before any child
  const auto start = Clock::now();
  std::string request = fmt::format("{}\n{}\n{}\n{}\n", k_magic, target.str(), name, extra_options.size());
  for (const std::string& o : extra_options) request += o + "\n";
  request += source;

  const std::string worker = worker_path();
  Pipe in, out, err;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in.fd[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out.fd[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err.fd[1], 2);
  for (const Pipe* p : {&in, &out, &err})
    for (int fd : p->fd) posix_spawn_file_actions_addclose(&actions, fd);
  std::string arg0 = worker, arg1 = "__hiprtc-compile";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, worker.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw RuntimeError(fmt::format("hipRTC: cannot start {}: {}", worker, std::strerror(rc)));
  in.close_end(0);
  out.close_end(1);
  err.close_end(1);
  std::string code, log;
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  int status = 0;
  HiprtcBinary bin;
  bin.options = rtc.options(target, extra_options);
  bin.compiler = rtc.version_string();
  // A child that hangs (a compiler that never returns, a child stuck at exit),
  // or one we stop talking to, is killed and reaped: no process is left
  // waiting, and no zombie.
  const auto kill_and_reap = [&] {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  };
  bool finished = false;
  try {
    finished = exchange(in, out.fd[0], err.fd[0], request, code, log, deadline) && wait_until(pid, status, deadline);
  } catch (...) {
    kill_and_reap();
    throw;
  }
  if (!finished) {
    kill_and_reap();
    throw CompileError(source,
                       fmt::format("the hipRTC child process ({} __hiprtc-compile) did not finish compiling for {} "
                                   "within {} s and was killed (EPIFUSE_HIPRTC_TIMEOUT_S sets the limit); its "
                                   "output so far:\n{}",
                                   worker, target.str(), timeout_s, log),
                       bin.options, target.str(), bin.compiler);
  }

  bin.log = log;
  if (WIFSIGNALED(status))
    throw CompileError(source,
                       fmt::format("the hipRTC child process ({} __hiprtc-compile) died of signal {} ({}) while "
                                   "compiling for {}; its output:\n{}",
                                   worker, WTERMSIG(status), strsignal(WTERMSIG(status)), target.str(), log),
                       bin.options, target.str(), bin.compiler);
  const int exit = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (exit == 3) throw CompileError(source, log, bin.options, target.str(), bin.compiler);
  if (exit == 2) throw UserError(log.empty() ? "hipRTC: the worker refused the request" : log);
  if (exit != 0)
    throw RuntimeError(fmt::format("hipRTC child process ({}) exited with {}: {}", worker, exit, log));
  // The child's stdout is the code object and nothing else: anything more
  // (a library printing a banner, a wrong worker) is an error here, never a
  // binary handed to the driver or kept in the disk cache.
  if (const std::string problem = code_object_problem(code, target.str()); !problem.empty())
    throw CompileError(source,
                       fmt::format("the hipRTC child process ({} __hiprtc-compile) exited 0 but wrote {} instead "
                                   "of a code object for {}; its log:\n{}",
                                   worker, problem, target.str(), log),
                       bin.options, target.str(), bin.compiler);
  bin.code.assign(code.begin(), code.end());
  bin.compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return bin;
}

double hiprtc_timeout_s() {
  const char* v = std::getenv("EPIFUSE_HIPRTC_TIMEOUT_S");
  if (!v) return k_hiprtc_timeout_s;
  // from_chars, not strtod: the same in every locale ("1.5" where the decimal point is a comma).
  const std::string_view text(v);
  double s = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), s);
  if (!text.empty() && ec == std::errc{} && end == text.data() + text.size() && std::isfinite(s) && s > 0) return s;
  throw UserError(fmt::format("EPIFUSE_HIPRTC_TIMEOUT_S='{}': expected a positive number of seconds (unset: {})", v,
                              k_hiprtc_timeout_s));
}

int hiprtc_worker_main(std::FILE* in, std::FILE* out, std::FILE* log) {
  if (read_line(in) != k_magic) {
    std::fprintf(log, "epifuse __hiprtc-compile: not a request from epifuse (it starts this itself)\n");
    return 2;
  }
  try {
    const AmdTarget target = parse_amd_target(read_line(in));
    const std::string name = read_line(in);
    const long count = std::strtol(read_line(in).c_str(), nullptr, 10);
    std::vector<std::string> options;
    for (long i = 0; i < count; ++i) options.push_back(read_line(in));
    std::string source;
    char buf[65536];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, in)) > 0;) source.append(buf, n);
    const Hiprtc* rtc = hiprtc_or_null();
    if (!rtc) {
      std::fprintf(log, "%s\n", hiprtc_unavailable_reason().c_str());
      return 4;
    }
    const HiprtcBinary bin = rtc->compile_in_process(source, name, target, options);
    std::fwrite(bin.log.data(), 1, bin.log.size(), log);
    std::fwrite(bin.code.data(), 1, bin.code.size(), out);
    std::fflush(out);
    return 0;
  } catch (const CompileError& e) {
    std::fwrite(e.log().data(), 1, e.log().size(), log);
    return 3;
  } catch (const UserError& e) {
    std::fprintf(log, "%s\n", e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(log, "%s\n", e.what());
    return 4;
  }
}

}  // namespace epifuse::backend
