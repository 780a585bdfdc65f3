#include "ridge/core/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

extern char** environ;

namespace ridge::process {

Result run(const std::vector<std::string>& argv, bool capture, int timeout_s) {
  Result r;
  if (argv.empty() || argv[0].empty()) return r;
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int fds[2] = {-1, -1};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (capture) {
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      posix_spawn_file_actions_destroy(&fa);
      return r;
    }
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  }
  // With a limit the child leads a new process group (pgid = its pid), so one kill(-pid) reaches
  // everything it started.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (timeout_s > 0) {
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
  }
  pid_t pid = -1;
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + std::chrono::seconds(timeout_s);
  const int rc = ::posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  if (capture) ::close(fds[1]);
  if (rc != 0) {
    if (capture) ::close(fds[0]);
    return r;
  }
  r.started = true;
  auto ms_left = [&] {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
  };
  auto kill_group = [&] {
    ::kill(-pid, SIGKILL);
    r.timed_out = true;
  };
  int status = 0;
  rusage ru{};
  bool reaped = false;
  // Reaps the program if it has ended (never blocks); true once it has.
  auto reap = [&] {
    if (reaped) return true;
    for (;;) {
      const pid_t w = ::wait4(pid, &status, WNOHANG, &ru);
      if (w < 0 && errno == EINTR) continue;
      reaped = w != 0;  // its pid, or an error (no such child): either way there is nothing to wait for
      return reaped;
    }
  };
  if (capture) {
    // Reads until the pipe's end, or until the program itself has ended: a process it left behind (a
    // compiler driver's daemon, `sleep &`) may hold the pipe's write end for ever, and its output is
    // not the program's. Polled in slices of 50 ms so that the end is seen without the pipe closing.
    char buf[4096];
    for (;;) {
      const int slice = timeout_s > 0 ? std::min(50, ms_left()) : 50;
      pollfd p{fds[0], POLLIN, 0};
      const int n = ::poll(&p, 1, slice);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        const ssize_t got = ::read(fds[0], buf, sizeof buf);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;  // the pipe's end: every writer closed it
        r.output.append(buf, static_cast<size_t>(got));
      }
      if (reap()) {
        // What the program wrote before it ended is in the pipe already: take it without waiting.
        ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
        for (size_t drained = 0; drained < (size_t{1} << 20);) {
          const ssize_t got = ::read(fds[0], buf, sizeof buf);
          if (got < 0 && errno == EINTR) continue;
          if (got <= 0) break;
          r.output.append(buf, static_cast<size_t>(got));
          drained += static_cast<size_t>(got);
        }
        break;
      }
      if (timeout_s > 0 && ms_left() == 0) {
        // Past the limit: kill the group and stop reading.
        kill_group();
        break;
      }
    }
    ::close(fds[0]);
  }
  while (!reaped) {
    // Without a pipe to wait on, a limited run polls for the child's end every few milliseconds.
    const int options = timeout_s > 0 && !r.timed_out ? WNOHANG : 0;
    const pid_t w = ::wait4(pid, &status, options, &ru);
    if (w < 0 && errno == EINTR) continue;
    if (w != 0) break;
    if (ms_left() == 0) {
      kill_group();
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.max_rss_bytes = static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
  // posix_spawnp reports a missing program as exit 127 from the child on glibc.
  if (WIFEXITED(status) && !r.timed_out) r.exit_code = WEXITSTATUS(status);
  if (r.exit_code == 127 && r.output.empty()) r.started = false;
  return r;
}

std::string last_line(const std::string& output) {
  size_t end = output.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return {};
  const size_t start = output.rfind('\n', end);
  return output.substr(start == std::string::npos ? 0 : start + 1,
                       end - (start == std::string::npos ? 0 : start + 1) + 1);
}

}  // namespace ridge::process
