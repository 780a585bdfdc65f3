#include "ridge/core/files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "ridge/core/error.hpp"
#include "ridge/core/hash.hpp"
#include "core/check.hpp"

namespace ridge::files {
namespace fs = std::filesystem;
namespace {

// ---- temporaries in flight, removed when a signal ends the process ----
//
// A fixed table a signal handler can walk without allocating or locking: a slot's path is written
// before the slot is marked in use, and only unlink(2) (async-signal-safe) runs in the handler.
constexpr int kSlots = 32;
struct Slot {
  std::atomic<int> used{0};  // 0 free, 1 claimed (path being written), 2 live
  bool folder = false;       // a temporary folder (rmdir), else a file (unlink)
  char path[4096];
};
Slot g_slots[kSlots];
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[3];

void on_signal(int sig) {
  // Files first, then the folders that held them (write_folder's temporary sibling).
  for (auto& s : g_slots)
    if (s.used.load(std::memory_order_acquire) == 2 && !s.folder) ::unlink(s.path);
  for (auto& s : g_slots)
    if (s.used.load(std::memory_order_acquire) == 2 && s.folder) ::rmdir(s.path);
  // Then the signal's previous action (the default: end the process), delivered once this handler
  // returns, so the exit status still says which signal ended it.
  for (int i = 0; i < 3; ++i)
    if (kSignals[i] == sig) ::sigaction(sig, &g_previous[i], nullptr);
  ::raise(sig);
}

// Installs the handler for the signals whose action is still the default. A program that handles a
// signal itself (Python's SIGINT -> KeyboardInterrupt, an MPI launcher's) keeps its handler: it
// returns to the writer, which then finishes or removes its temporary as on any error.
void install_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int i = 0; i < 3; ++i) {
      struct sigaction old {};
      if (::sigaction(kSignals[i], nullptr, &old) != 0 || old.sa_handler != SIG_DFL ||
          (old.sa_flags & SA_SIGINFO))
        continue;
      struct sigaction sa {};
      sa.sa_handler = on_signal;
      sigemptyset(&sa.sa_mask);
      for (int s : kSignals) sigaddset(&sa.sa_mask, s);
      sa.sa_flags = SA_RESTART;
      g_previous[i] = old;
      ::sigaction(kSignals[i], &sa, nullptr);
    }
  });
}

// Holds one temporary (a file, or with `folder` an empty folder): registered for the signal handler
// before it is created, removed on every early exit unless released (renamed into place).
class Temporary {
 public:
  explicit Temporary(const std::string& path, bool folder = false) : path_(path), folder_(folder) {
    install_handlers();
    if (path.size() < sizeof(Slot::path))
      for (auto& s : g_slots) {
        int expected = 0;
        if (s.used.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
          std::memcpy(s.path, path.c_str(), path.size() + 1);
          s.folder = folder;
          s.used.store(2, std::memory_order_release);
          slot_ = &s;
          break;
        }
      }
  }
  ~Temporary() {
    if (fd_ >= 0) ::close(fd_);
    if (!released_) folder_ ? ::rmdir(path_.c_str()) : ::unlink(path_.c_str());
    if (slot_) slot_->used.store(0, std::memory_order_release);
  }
  Temporary(const Temporary&) = delete;
  Temporary& operator=(const Temporary&) = delete;
  int fd_ = -1;
  bool released_ = false;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool folder_ = false;
  Slot* slot_ = nullptr;
};

// What makes a temporary's name unique within this process (with its pid).
std::atomic<unsigned long> g_counter{0};

std::string temporary_name(const std::string& path, const char* kind = "tmp") {
  return path + "." + kind + "." + std::to_string(::getpid()) + "." + std::to_string(g_counter.fetch_add(1));
}

// The longest suffix a temporary adds to a name: ".tmp." + a pid (at most 7 digits on Linux,
// pid_max <= 2^22) + "." + a counter.
constexpr size_t kTempSuffix = 5 + 7 + 1 + 10;

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

fs::path folder_of(const fs::path& p) {
  return p.has_parent_path() ? p.parent_path() : fs::path(".");
}

// Writes all of `bytes` to an open descriptor: 0, or the errno of the write that failed (EIO for a
// write that wrote nothing). Returned rather than left in errno, which a caller reading it in the same
// argument list as the call would read before the call (the order of arguments is unspecified).
int write_all(int fd, std::span<const std::byte> bytes) {
  const std::byte* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    // Linux writes at most 0x7ffff000 bytes per call; ask for no more than 1 GiB at a time.
    const size_t chunk = left < (size_t{1} << 30) ? left : (size_t{1} << 30);
    const ssize_t n = ::write(fd, p, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n == 0 ? EIO : errno;
    p += n;
    left -= static_cast<size_t>(n);
  }
  return 0;
}

// "NAME.tmp.PID.N" -> PID when `entry` is a temporary of `name`, else 0.
long temporary_pid(const std::string& entry, const std::string& name) {
  const std::string prefix = name + ".tmp.";
  if (entry.size() <= prefix.size() || entry.compare(0, prefix.size(), prefix) != 0) return 0;
  const char* s = entry.c_str() + prefix.size();
  long pid = 0;
  const char* q = s;
  while (*q >= '0' && *q <= '9' && q - s < 10) pid = pid * 10 + (*q++ - '0');
  if (q == s || *q != '.') return 0;
  const char* r = ++q;
  while (*r >= '0' && *r <= '9') ++r;
  return (r == q || *r != '\0') ? 0 : pid;
}

// The folder a set of files is written as: its absolute path, symlinks, "." and ".." resolved (so that
// renaming it moves the folder itself, not a link to it), without a trailing slash.
fs::path folder_target(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  std::error_code ec;
  const fs::path p(d);
  if (fs::exists(p, ec)) {
    fs::path c = fs::canonical(p, ec);
    if (!ec) return c;
  }
  fs::path w = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return ec ? p : w;
}

// Whether `entry` is one of a set's `names`, or a temporary of one (NAME.tmp.PID.N).
bool in_set(const std::string& entry, const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (entry == n || temporary_pid(entry, n) > 0) return true;
  return false;
}

// Removes the files of the set `names` from folder `dir`, then the folder if that left it empty:
// anything else in it (which ridge did not write) stays, and so does the folder.
void remove_set(const std::string& dir, const std::vector<std::string>& names) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  DIR* d = ::fdopendir(dfd);
  if (!d) {
    ::close(dfd);
    return;
  }
  std::vector<std::string> doomed;
  while (const dirent* e = ::readdir(d))
    if (in_set(e->d_name, names)) doomed.push_back(e->d_name);
  for (const auto& n : doomed) ::unlinkat(dfd, n.c_str(), 0);  // a folder of that name stays
  ::closedir(d);
  ::rmdir(dir.c_str());
}

// The temporary folders of dead processes beside `target` (NAME.tmp.PID.N: a set written by a process
// killed before it finished, or the old set it had not yet removed), removed as remove_set removes.
void remove_stale_folders(const fs::path& target, const std::vector<std::string>& names) {
  const std::string name = target.filename().string(), parent = target.parent_path().string();
  DIR* d = ::opendir(parent.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  const long self = static_cast<long>(::getpid());
  while (const dirent* e = ::readdir(d)) {
    const long pid = temporary_pid(e->d_name, name);
    if (pid <= 0 || pid == self) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    stale.push_back(parent + "/" + e->d_name);
  }
  ::closedir(d);
  for (const auto& s : stale) {
    struct stat st {};
    if (::lstat(s.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) remove_set(s, names);
  }
}

bool protected_by_owner(const fs::path& p) {
  std::error_code ec;
  return ::access(p.c_str(), W_OK) != 0 ||
         (fs::status(p, ec).permissions() &
          (fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write)) == fs::perms::none;
}

std::string listed(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}

}  // namespace

void check_writable(const std::string& path, const std::string& what) {
  check_arg(!path.empty(), what, "empty file name");
  check_name_fits(path, what);
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
  const fs::path dir = folder_of(p);
  check_arg(fs::is_directory(dir, ec), what, "folder '{}' does not exist (for '{}')", dir.string(), path);
  check_arg(::access(dir.c_str(), W_OK) == 0, what, "folder '{}' is not writable", dir.string());
  // A file without write permission is one its owner protected: refused even for root, whom access(2)
  // would let through.
  if (fs::exists(st))
    check_arg(::access(p.c_str(), W_OK) == 0 &&
                  (fs::status(p, ec).permissions() & (fs::perms::owner_write | fs::perms::group_write |
                                                      fs::perms::others_write)) != fs::perms::none,
              what, "'{}' is read-only; ridge does not replace a file its owner made read-only", path);
}

void check_name_fits(const std::string& path, const std::string& what) {
  // Linux's limits (NAME_MAX 255 bytes a name, PATH_MAX 4096 with the terminating zero): a longer path
  // makes stat fail with ENAMETOOLONG, which would read as "does not exist".
  constexpr size_t kNameMax = 255, kPathMax = 4095;
  const std::string shown = path.size() > 40 ? path.substr(0, 40) + "..." : path;
  check_arg(path.size() <= kPathMax, what, "'{}' is too long a path ({} bytes; at most {})", shown,
            path.size(), kPathMax);
  const size_t last = path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1;
  for (size_t start = 0; start < last;) {
    const size_t end = path.find('/', start);
    check_arg(end - start <= kNameMax, what, "'{}' has a folder name of {} bytes; a name is at most {}",
              shown, end - start, kNameMax);
    start = end + 1;
  }
  const size_t name = path.size() - last;
  check_arg(
      name + kTempSuffix <= kNameMax, what,
      "the file name is {} bytes; this file system holds names of at most {} bytes and ridge first writes "
      "a temporary NAME.tmp.PID.N beside the file, so use a name of at most {} bytes",
      name, kNameMax, kNameMax - kTempSuffix);
}

int remove_stale_temporaries(const std::string& path) {
  const fs::path p(path);
  const std::string name = p.filename().string();
  if (name.empty()) return 0;
  DIR* d = ::opendir(folder_of(p).c_str());
  if (!d) return 0;
  int removed = 0;
  const long self = static_cast<long>(::getpid());
  while (const dirent* e = ::readdir(d)) {
    const long pid = temporary_pid(e->d_name, name);
    if (pid <= 0 || pid == self) continue;
    // Only a process that no longer exists (ESRCH): a live writer's temporary is its own business.
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (::unlinkat(::dirfd(d), e->d_name, 0) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

void write_streamed(const std::string& path, const std::function<void(const ByteSink&)>& produce,
                    const std::string& what) {
  check_writable(path, what);
  const fs::path p = resolve(path);
  std::error_code ec;
  const auto st = fs::status(p, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    // A device or FIFO: written in place. O_NONBLOCK so that a FIFO nobody reads is an error (ENXIO),
    // not a hang; the writes themselves then block as usual.
    const int fd = ::open(p.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    const int open_errno = errno;
    check_arg(fd >= 0, what, "cannot open '{}': {}", path,
              open_errno == ENXIO ? "no process reads from it" : std::strerror(open_errno));
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    produce([&](std::span<const std::byte> piece) {
      if (const int e = write_all(fd, piece)) fail_arg(what, "cannot write '{}': {}", path, std::strerror(e));
    });
    return;
  }
  remove_stale_temporaries(p.string());
  // A regular (or new) file: a temporary beside it, renamed over it only when complete. Its name is
  // unique to this process and call (pid and a counter); O_EXCL never overwrites a file that happens
  // to carry the name.
  std::optional<Temporary> tmp;
  for (int attempt = 0; attempt < 100; ++attempt) {
    tmp.emplace(temporary_name(p.string()));
    tmp->fd_ = ::open(tmp->path().c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);  // less the umask
    if (tmp->fd_ >= 0) break;
    const int err = errno;
    tmp->released_ = true;  // nothing of ours to remove
    check_arg(err == EEXIST, what, "cannot create a temporary file beside '{}': {}", path,
              std::strerror(err));
  }
  check_arg(tmp && tmp->fd_ >= 0, what, "cannot find a free temporary file name beside '{}'", path);
  // A failed write, or an exception from the producer, unwinds through `tmp`, which removes the temporary.
  produce([&](std::span<const std::byte> piece) {
    if (const int e = write_all(tmp->fd_, piece))
      fail_arg(what, "cannot write '{}': {}", path, std::strerror(e));
  });
  // Each step's errno is kept at the step that failed: a later call may change it.
  int err = ::fsync(tmp->fd_) == 0 ? 0 : errno;
  // Keep an existing file's permissions.
  struct stat old {};
  if (!err && ::stat(p.c_str(), &old) == 0 && ::fchmod(tmp->fd_, old.st_mode & 07777) != 0) err = errno;
  const int fd = std::exchange(tmp->fd_, -1);
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && ::rename(tmp->path().c_str(), p.c_str()) != 0) err = errno;
  if (err) fail_arg(what, "cannot write '{}': {}", path, std::strerror(err));
  tmp->released_ = true;
  // Durability of the rename itself; the file is complete either way, so a failure here is not an error.
  const int dfd = ::open(folder_of(p).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_bytes(const std::string& path, std::span<const std::span<const std::byte>> pieces,
                 const std::string& what) {
  write_streamed(
      path,
      [&](const ByteSink& sink) {
        for (const auto& piece : pieces) sink(piece);
      },
      what);
}

void write_text(const std::string& path, const std::string& text, const std::string& what) {
  const std::span<const std::byte> piece(reinterpret_cast<const std::byte*>(text.data()), text.size());
  write_bytes(path, std::span<const std::span<const std::byte>>(&piece, 1), what);
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
    check_arg(!same_file(output, in), what,
              "'{}' is also an input ('{}'); writing it would destroy that file", output, in);
}

void check_distinct(const NamedPaths& outputs, const NamedPaths& inputs, const NamedPaths& may_share) {
  const auto shared = [&](const std::string& out_arg, const std::string& in_arg) {
    return std::find(may_share.begin(), may_share.end(), std::pair(out_arg, in_arg)) != may_share.end();
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto& [arg, out] = outputs[i];
    if (out.empty()) continue;
    for (const auto& [in_arg, in] : inputs)
      check_arg(in.empty() || shared(arg, in_arg) || !same_file(out, in), arg,
                "'{}' is read as {} ('{}'); writing it would destroy that input, so choose another path", out,
                in_arg, in);
    for (size_t j = 0; j < i; ++j)
      check_arg(outputs[j].second.empty() || !same_file(out, outputs[j].second), arg,
                "'{}' is also the output of {} ('{}'); give each output its own file", out, outputs[j].first,
                outputs[j].second);
  }
}

std::string contents_id(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || !std::filesystem::is_regular_file(path, ec)) return {};
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return {};
  constexpr uintmax_t kPart = uintmax_t{512} << 20;
  uint64_t h = fnv1a(nullptr, 0);
  std::vector<char> buf(size_t{1} << 20);
  auto hash_range = [&](uintmax_t from, uintmax_t bytes) {
    if (fseeko(f, static_cast<off_t>(from), SEEK_SET) != 0) return false;
    while (bytes > 0) {
      const size_t want = static_cast<size_t>(std::min<uintmax_t>(bytes, buf.size()));
      const size_t got = std::fread(buf.data(), 1, want, f);
      if (got == 0) return false;
      h = fnv1a(buf.data(), got, h);
      bytes -= got;
    }
    return true;
  };
  const bool ok =
      size <= 2 * kPart ? hash_range(0, size) : hash_range(0, kPart) && hash_range(size - kPart, kPart);
  std::fclose(f);
  return ok ? fmt::format("{} bytes, fnv1a {:016x}", size, h) : std::string();
}

void check_folder_writable(const std::string& dir, const std::vector<std::string>& names,
                           const std::string& what) {
  check_arg(!dir.empty(), what, "empty folder name");
  std::string trimmed = dir;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  check_name_fits(trimmed, what);  // the temporary sibling NAME.tmp.PID.N must fit too
  std::error_code ec;
  const auto lst = fs::symlink_status(trimmed, ec), st = fs::status(trimmed, ec);
  const fs::path t = folder_target(dir);
  const fs::path parent = t.has_parent_path() ? t.parent_path() : fs::path(".");
  if (!fs::exists(lst) && !fs::exists(st)) {
    check_arg(fs::is_directory(parent, ec), what, "folder '{}' does not exist (for '{}')", parent.string(),
              dir);
    check_arg(::access(parent.c_str(), W_OK) == 0, what, "folder '{}' is not writable", parent.string());
    return;
  }
  check_arg(fs::is_directory(st), what, "'{}' exists and is not a folder (a folder of {} is written there)",
            dir, listed(names));
  // The set replaces the folder as a whole: a new folder is renamed over it, the old one removed.
  check_arg(t != t.root_path() && t.has_parent_path(), what, "'{}' is the root folder; name a folder in it",
            dir);
  struct stat a {
  }, b{};
  check_arg(::stat(t.c_str(), &a) != 0 || ::stat(parent.c_str(), &b) != 0 || a.st_dev == b.st_dev, what,
            "'{}' is a mount point, which cannot be replaced; name a folder in it", dir);
  check_arg(t != fs::current_path(ec), what,
            "'{}' is the current folder, which ridge would replace with a new one; name it from outside "
            "(../{})",
            dir, t.filename().string());
  check_arg(::access(parent.c_str(), W_OK) == 0, what, "folder '{}' is not writable (for '{}')",
            parent.string(), dir);
  check_arg(!protected_by_owner(t), what,
            "'{}' is read-only; ridge does not replace a folder its owner made read-only", dir);
  fs::directory_iterator it(t, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    check_arg(
        in_set(name, names), what,
        "'{}' holds '{}', which is not one of {}; the folder is replaced as a whole (no reader ever sees "
        "a mix of two versions), so name a new or empty folder or one holding only those files",
        dir, name, listed(names));
    std::error_code eq;
    const auto es = it->symlink_status(eq);
    check_arg(!fs::is_directory(es), what, "'{}' holds a folder '{}' where a file is written", dir, name);
    if (fs::is_regular_file(es))
      check_arg(!protected_by_owner(it->path()), what,
                "'{}' is read-only; ridge does not replace a file its owner made read-only",
                (fs::path(trimmed) / name).string());
  }
  check_arg(!ec, what, "cannot list the folder '{}': {}", dir, ec.message());
}

void write_folder(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& contents,
                  const std::string& what) {
  std::vector<std::string> names;
  for (const auto& c : contents) names.push_back(c.first);
  check_folder_writable(dir, names, what);
  const fs::path target = folder_target(dir);
  const std::string t = target.string();
  remove_stale_folders(target, names);
  struct stat old {};
  const bool existed = ::stat(t.c_str(), &old) == 0;
  const auto shown = [&](const std::string& name) { return (fs::path(dir) / name).string(); };

  // The new set, whole, in a temporary sibling NAME.tmp.PID.N (the same file system, so that a rename
  // moves it); removed on any failure and on SIGINT/SIGTERM/SIGHUP, files first.
  std::optional<Temporary> folder;
  bool made = false;
  for (int attempt = 0; attempt < 100 && !made; ++attempt) {
    folder.emplace(temporary_name(t), true);
    made = ::mkdir(folder->path().c_str(), 0777) == 0;  // less the umask
    const int err = errno;
    if (made) break;
    folder->released_ = true;  // nothing of ours to remove
    check_arg(err == EEXIST, what, "cannot create a temporary folder beside '{}': {}", dir,
              std::strerror(err));
  }
  check_arg(made, what, "cannot find a free temporary folder name beside '{}'", dir);
  std::vector<std::unique_ptr<Temporary>> written;  // destroyed before `folder`
  for (const auto& [name, bytes] : contents) {
    auto file = std::make_unique<Temporary>(folder->path() + "/" + name);
    file->fd_ = ::open(file->path().c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (file->fd_ < 0) {
      const int err = errno;
      file->released_ = true;
      fail_arg(what, "cannot write '{}': {}", shown(name), std::strerror(err));
    }
    int err = write_all(file->fd_, std::as_bytes(std::span(bytes.data(), bytes.size())));
    if (!err && ::fsync(file->fd_) != 0) err = errno;
    // An existing file's permissions are kept.
    struct stat was {};
    if (!err && existed && ::stat((t + "/" + name).c_str(), &was) == 0 && S_ISREG(was.st_mode) &&
        ::fchmod(file->fd_, was.st_mode & 07777) != 0)
      err = errno;
    if (::close(std::exchange(file->fd_, -1)) != 0 && !err) err = errno;
    if (err) fail_arg(what, "cannot write '{}': {}", shown(name), std::strerror(err));
    written.push_back(std::move(file));
  }
  int err = 0;
  if (existed && ::chmod(folder->path().c_str(), old.st_mode & 07777) != 0) err = errno;
  if (!err) {
    const int dfd = ::open(folder->path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || ::fsync(dfd) != 0) err = errno;
    if (dfd >= 0) ::close(dfd);
  }
  if (err) fail_arg(what, "cannot write '{}': {}", dir, std::strerror(err));

  // Into place in one step. Over an existing folder, RENAME_EXCHANGE swaps the two atomically: the
  // path names the old set, then the new one, never neither nor a mix; the old set, now under the
  // temporary's name, is removed (by the signal handler too, should one arrive meanwhile). Where the
  // file system cannot exchange, the old folder is first renamed aside (NAME.old.PID.N, which nothing
  // removes but this call: a crash between the two renames leaves the old set whole there).
  std::string old_at;
  if (!existed) {
    if (::rename(folder->path().c_str(), t.c_str()) != 0) {
      err = errno;
      fail_arg(what, "cannot write '{}': {}", dir, std::strerror(err));
    }
  } else if (::renameat2(AT_FDCWD, folder->path().c_str(), AT_FDCWD, t.c_str(), RENAME_EXCHANGE) == 0) {
    old_at = folder->path();
  } else {
    err = errno;
    check_arg(err == EINVAL || err == ENOSYS || err == EOPNOTSUPP, what, "cannot write '{}': {}", dir,
              std::strerror(err));
    const std::string aside = temporary_name(t, "old");
    if (::rename(t.c_str(), aside.c_str()) != 0) {
      err = errno;
      fail_arg(what, "cannot write '{}': {}", dir, std::strerror(err));
    }
    if (::rename(folder->path().c_str(), t.c_str()) != 0) {
      err = errno;
      ::rename(aside.c_str(), t.c_str());
      fail_arg(what, "cannot write '{}': {}", dir, std::strerror(err));
    }
    old_at = aside;
  }
  if (!old_at.empty()) remove_set(old_at, names);
  for (auto& w : written) w->released_ = true;
  folder->released_ = true;
  const int pfd = ::open(target.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (pfd >= 0) {
    ::fsync(pfd);
    ::close(pfd);
  }
}

}  // namespace ridge::files
