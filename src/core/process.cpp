#include "ridge/core/process.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

extern char** environ;

namespace ridge::process {

Result run(const std::vector<std::string>& argv, bool capture) {
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
  pid_t pid = -1;
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (capture) ::close(fds[1]);
  if (rc != 0) {
    if (capture) ::close(fds[0]);
    return r;
  }
  r.started = true;
  if (capture) {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      r.output.append(buf, static_cast<size_t>(n));
    }
    ::close(fds[0]);
  }
  int status = 0;
  rusage ru{};
  while (::wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.max_rss_bytes = static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
  // posix_spawnp reports a missing program as exit 127 from the child on glibc.
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
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
