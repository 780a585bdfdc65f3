// The fuzz tests' runner: ridge started without a shell (fork + execv, arguments passed as they are,
// even empty or 5,000 bytes long), in a folder of its own with HOME, RIDGE_HOME and TMPDIR inside it,
// stdin and stdout on /dev/null, stderr read back, killed after a timeout. RIDGE_FUZZ_BINARY=PATH runs
// another build of ridge.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "ridge/build_paths.h"  // RIDGE_BINARY (generated)

namespace ridge::test {

struct Outcome {
  int code = -1;   // exit status, or -1
  int signal = 0;  // the signal that ended it, or 0
  bool timed_out = false;
  std::string err;  // stderr
};

inline Outcome run_ridge(const std::vector<std::string>& args, const std::filesystem::path& dir,
                         double timeout_s) {
  const std::filesystem::path err_path = dir / "stderr.txt";
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::chdir(dir.c_str()) != 0) ::_exit(121);
    const int out = ::open("/dev/null", O_WRONLY);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in = ::open("/dev/null", O_RDONLY);
    if (out < 0 || err < 0 || in < 0) ::_exit(122);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    const std::string home = (dir / "home").string();
    ::setenv("HOME", home.c_str(), 1);
    ::setenv("RIDGE_HOME", home.c_str(), 1);
    ::setenv("TMPDIR", dir.c_str(), 1);
    ::setenv("OMP_NUM_THREADS", "1", 1);
    std::vector<char*> argv;
    const char* other = std::getenv("RIDGE_FUZZ_BINARY");
    std::string bin = other && *other ? other : RIDGE_BINARY;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(123);
  }
  Outcome o;
  if (pid < 0) return o;
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      o.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!o.timed_out) {
    if (WIFEXITED(status)) o.code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) o.signal = WTERMSIG(status);
  }
  std::ifstream e(err_path);
  o.err.assign(std::istreambuf_iterator<char>(e), {});
  return o;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

inline void spit(const std::filesystem::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

}  // namespace ridge::test
