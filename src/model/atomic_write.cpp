#include "model/atomic_write.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "ridge/core/error.hpp"
#include "core/check.hpp"

namespace ridge::model::detail {
namespace {

namespace fs = std::filesystem;

std::string errno_text(int e) {
  return std::strerror(e);
}

// Closes and removes the temporary unless released: every early exit (throw) cleans up.
struct TempFile {
  std::string path;
  int fd = -1;
  bool keep = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!keep && !path.empty()) ::unlink(path.c_str());
  }
};

void write_all(int fd, std::span<const std::byte> bytes, const std::string& what, const std::string& tmp) {
  const std::byte* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    // Linux writes at most 0x7ffff000 bytes per call; ask for no more than 1 GiB at a time.
    const size_t chunk = left < (size_t{1} << 30) ? left : (size_t{1} << 30);
    const ssize_t n = ::write(fd, p, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("{}: writing the temporary file '{}' failed: {}", what, tmp, errno_text(errno));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

void write_atomically(const std::string& path, const std::string& what,
                      std::span<const std::span<const std::byte>> pieces) {
  check(!path.empty(), "{}: the path is empty", what);
  const fs::path target(path);
  check(target.has_filename(), "{}: the path names a directory, not a file", what);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fail("{}: '{}' is a directory", what, path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();

  // A name no other writer (thread or process) uses: the pid and a process-wide counter; O_EXCL makes
  // sure an unrelated file that happens to carry the name is never overwritten.
  static std::atomic<unsigned long> counter{0};
  TempFile tmp;
  for (int attempt = 0; attempt < 100 && tmp.fd < 0; ++attempt) {
    std::string name = target.filename().string() + ".tmp." + std::to_string(::getpid()) + "." +
                       std::to_string(counter.fetch_add(1));
    const std::string candidate = (dir / name).string();
    // 0666 before the umask, as any ordinary file the user creates.
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      tmp.fd = fd;
      tmp.path = candidate;
    } else if (errno != EEXIST) {
      fail("{}: cannot create a temporary file in '{}': {}", what, dir.string(), errno_text(errno));
    }
  }
  check(tmp.fd >= 0, "{}: cannot find a free temporary file name in '{}'", what, dir.string());

  for (const auto& piece : pieces) write_all(tmp.fd, piece, what, tmp.path);
  if (::fsync(tmp.fd) != 0) fail("{}: fsync of '{}' failed: {}", what, tmp.path, errno_text(errno));
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) fail("{}: closing '{}' failed: {}", what, tmp.path, errno_text(errno));
  if (::rename(tmp.path.c_str(), path.c_str()) != 0)
    fail("{}: renaming '{}' to '{}' failed: {}", what, tmp.path, path, errno_text(errno));
  tmp.keep = true;
  // Durability of the rename itself; the file is complete either way, so a failure here is not an error.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

ReadMapping map_regular_file(const std::string& path, const std::string& what,
                             const std::function<std::string(size_t)>& size_problem) {
  auto bad = [&](const std::string& why) { return Error(what + ": " + why); };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw bad(std::string("cannot open it: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw bad("not a regular file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw bad(std::string("cannot open it: ") + std::strerror(errno));
  struct stat fst {};
  if (::fstat(fd, &fst) != 0 || !S_ISREG(fst.st_mode)) {
    ::close(fd);
    throw bad("not a regular file");
  }
  const auto bytes = static_cast<size_t>(fst.st_size);
  if (const std::string why = size_problem(bytes); !why.empty()) {
    ::close(fd);
    throw bad(why);
  }
  // Private and read-only: a large file costs no copy. (Truncating it while mapped would fault on
  // access; ridge replaces its own files by rename, never in place.)
  void* m = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (m == MAP_FAILED) throw bad(std::string("cannot map it: ") + std::strerror(map_errno));
  return {m, bytes};
}

}  // namespace ridge::model::detail
