#include "model/map_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ridge/core/error.hpp"

namespace ridge::model::detail {

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
