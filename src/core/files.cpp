#include "ridge/core/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "ridge/core/error.hpp"
#include "core/check.hpp"

namespace ridge::files {
namespace fs = std::filesystem;
namespace {

// The file a write lands in: a symlink's final target (so the link itself survives).
fs::path resolve(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_symlink(fs::symlink_status(p, ec))) {
    const fs::path t = fs::weakly_canonical(p, ec);
    if (!ec) return t;
  }
  return p;
}

// Writes all of `text` to an open descriptor; false on any short write.
bool write_all(int fd, const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

void check_writable(const std::string& path, const std::string& what) {
  check_arg(!path.empty(), what, "empty file name");
  const fs::path p = resolve(path);
  std::error_code ec;
  const auto st = fs::status(p, ec);
  check_arg(!fs::is_directory(st), what, "'{}' is a folder (expected a file name)", path);
  if (fs::exists(st) && !fs::is_regular_file(st)) {  // a device or FIFO: it must open for writing
    check_arg(::access(p.c_str(), W_OK) == 0, what, "'{}' is not writable", path);
    if (fs::is_fifo(st)) {
      // A FIFO that no process reads would block the write at the end of the run (or fail it):
      // refused now. One that is read is held open until exit, so its reader does not see the end
      // of the file before the text is written.
      const int fd = ::open(p.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      check_arg(fd >= 0 || errno != ENXIO, what, "'{}' is a FIFO that no process reads", path);
      static std::vector<int> held;
      if (fd >= 0) held.push_back(fd);
    }
    return;
  }
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  check_arg(fs::is_directory(dir, ec), what, "folder '{}' does not exist (for '{}')", dir.string(), path);
  check_arg(::access(dir.c_str(), W_OK) == 0, what, "folder '{}' is not writable", dir.string());
  if (fs::exists(st)) check_arg(::access(p.c_str(), W_OK) == 0, what, "'{}' is not writable", path);
}

void write_text(const std::string& path, const std::string& text, const std::string& what) {
  check_writable(path, what);
  const fs::path p = resolve(path);
  std::error_code ec;
  const auto st = fs::status(p, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) {  // device or FIFO: write in place
    // O_NONBLOCK: a FIFO nobody reads would block the open forever (ENXIO instead); the writes
    // themselves then block as usual.
    const int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK);
    check_arg(fd >= 0 || errno != ENXIO, what, "'{}' is a FIFO that no process reads", path);
    check_arg(fd >= 0, what, "cannot open '{}': {}", path, std::strerror(errno));
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    const bool ok = write_all(fd, text);
    ::close(fd);
    check_arg(ok, what, "error writing '{}'", path);
    return;
  }
  // A regular (or new) file: a temporary beside it, renamed over it only when complete.
  std::string tmp = p.string() + ".tmpXXXXXX";
  const int fd = ::mkstemp(tmp.data());
  check_arg(fd >= 0, what, "cannot write beside '{}': {}", path, std::strerror(errno));
  bool ok = write_all(fd, text) && ::fsync(fd) == 0;
  // Keep an existing file's permissions (mkstemp makes 0600).
  struct stat old {};
  if (::stat(p.c_str(), &old) == 0)
    ok = ok && ::fchmod(fd, old.st_mode & 07777) == 0;
  else
    ok = ok && ::fchmod(
                   fd, 0666 & ~[] {
                     const mode_t m = ::umask(0);
                     ::umask(m);
                     return m;
                   }()) == 0;
  ok = ::close(fd) == 0 && ok;
  if (ok) ok = ::rename(tmp.c_str(), p.c_str()) == 0;
  if (!ok) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail_arg(what, "cannot write '{}': {}", path, std::strerror(err));
  }
}

bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) {
    const bool eq = fs::equivalent(a, b, ec);
    if (!ec) return eq;
  }
  const fs::path ca = fs::weakly_canonical(fs::absolute(a, ec), ec),
                 cb = fs::weakly_canonical(fs::absolute(b, ec), ec);
  return ca == cb;
}

void check_not_an_input(const std::string& output, const std::vector<std::string>& inputs,
                        const std::string& what) {
  for (const auto& in : inputs)
    check_arg(!same_file(output, in), what, "'{}' is also an input ('{}'); writing it would destroy that file",
              output, in);
}

}  // namespace ridge::files
