// The JIT's cache (ridge/jit.hpp). Every entry is reached through file descriptors opened with
// O_NOFOLLOW from the cache directory's own descriptor, so what was checked (owner, type, checksum) is
// what gets loaded: the .so is hashed from the descriptor dlopen then maps (/proc/self/fd/N).
#include "ridge/jit.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "ridge/core/cpu.hpp"
#include "ridge/core/env.hpp"
#include "ridge/core/hash.hpp"
#include "ridge/core/process.hpp"
#include "ridge/core/version.hpp"
#include "core/check.hpp"
#include "core/json.hpp"

namespace ridge::jit {
namespace fs = std::filesystem;

namespace {

// Optimised, position-independent, a shared object; -fno-plt because the kernels call nothing
// outside themselves that could be worth lazy binding. A function-local static, so that get() is
// safe to call from another unit's static initialisation.
const std::vector<std::string>& kernel_base_flags() {
  static const std::vector<std::string> flags = {"-O2", "-std=c++20", "-fPIC", "-shared", "-fno-plt"};
  return flags;
}

// meta.json and kernel.cpp are small; anything larger is not ours.
constexpr int64_t kMaxTextBytes = int64_t{16} << 20;

thread_local Source t_last = Source::none;

// A file descriptor closed when it goes out of scope.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd = std::exchange(o.fd, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  int release() { return std::exchange(fd, -1); }
};

std::string err(int e) {
  return std::strerror(e);
}

bool is_key(std::string_view name) {
  return name.size() == 64 && std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// The text on one line: a compiler's message may hold newlines and tabs; the notice is one line.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  if (s.size() > 300) s = s.substr(0, 297) + "...";
  return s;
}

void notice(const std::string& why) {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  const std::string line =
      "ridge: JIT off for this process: " + one_line(why) + "; the ahead-of-time kernels run\n";
  std::fflush(stderr);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

// SHA-256 of the whole file behind `fd`, read from offset 0; "" when it cannot be read.
std::string hash_fd(int fd) {
  Sha256 h;
  char buf[1 << 16];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return "";
    if (n == 0) break;
    h.update(buf, static_cast<size_t>(n));
    at += n;
  }
  return h.hex_digest();
}

// A regular file of ours under `dirfd`, opened without following a symlink. "" or why not.
std::string open_ours(int dirfd, const char* name, Fd& out, struct stat* st_out = nullptr) {
  Fd fd(::openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.fd < 0)
    return errno == ELOOP ? fmt::format("{} is a symlink", name) : fmt::format("{}: {}", name, err(errno));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) return fmt::format("{}: {}", name, err(errno));
  if (!S_ISREG(st.st_mode)) return fmt::format("{} is not a regular file", name);
  if (st.st_uid != ::geteuid())
    return fmt::format("{} belongs to uid {}, not this user ({})", name, st.st_uid, ::geteuid());
  if (st_out) *st_out = st;
  out = std::move(fd);
  return "";
}

std::string read_ours(int dirfd, const char* name, std::string& text, int64_t* bytes = nullptr) {
  Fd fd;
  struct stat st {};
  if (auto why = open_ours(dirfd, name, fd, &st); !why.empty()) return why;
  if (st.st_size > kMaxTextBytes) return fmt::format("{} is larger than {} bytes", name, kMaxTextBytes);
  text.assign(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::pread(fd.fd, text.data() + got, text.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fmt::format("{}: cannot be read", name);
    got += static_cast<size_t>(n);
  }
  if (bytes) *bytes += st.st_size;
  return "";
}

// Creates `name` under `dirfd` (it must not exist) holding `text`, mode 0600.
std::string write_new(int dirfd, const char* name, const std::string& text) {
  Fd fd(::openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.fd < 0) return fmt::format("cannot create {}: {}", name, err(errno));
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd.fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fmt::format("cannot write {}: {}", name, err(errno));
    done += static_cast<size_t>(n);
  }
  if (::close(fd.release()) != 0) return fmt::format("cannot write {}: {}", name, err(errno));
  return "";
}

// The cache directory, opened: a directory of this user's that no one else can write, reached
// without following a symlink at its last component. `create` makes it (and missing parents) 0700.
// Returns "" or why it cannot serve as the cache; `missing` when it does not exist and !create.
std::string open_cache_dir(std::string path, bool create, Fd& out, bool* missing = nullptr) {
  if (path.empty()) return "no cache directory (RIDGE_JIT_CACHE_DIR, XDG_CACHE_HOME and HOME are all unset)";
  // "dir/" would make lstat follow a symlink named dir.
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (create) {
    for (size_t at = path.find('/', 1); at != std::string::npos; at = path.find('/', at + 1))
      ::mkdir(path.substr(0, at).c_str(), 0700);
    ::mkdir(path.c_str(), 0700);
  }
  const std::string q = "cache dir '" + path + "'";
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT && missing) *missing = true;
    return fmt::format("{}: {}", q, err(errno));
  }
  if (S_ISLNK(st.st_mode)) return q + " is a symlink (expected a directory of this user's)";
  if (!S_ISDIR(st.st_mode)) return q + " is not a directory";
  if (st.st_uid != ::geteuid())
    return fmt::format("{} belongs to uid {}, not this user ({})", q, st.st_uid, ::geteuid());
  if ((st.st_mode & 022) != 0)
    return fmt::format("{} can be written by other users (mode {:o}; expected 700 or 755)", q,
                       st.st_mode & 07777);
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st2 {};
  if (fd.fd < 0 || ::fstat(fd.fd, &st2) != 0) return fmt::format("{}: {}", q, err(errno));
  if (st2.st_ino != st.st_ino || st2.st_dev != st.st_dev) return q + " changed while it was checked";
  out = std::move(fd);
  return "";
}

// The names in a directory, sorted.
std::vector<std::string> names_in(int dirfd) {
  std::vector<std::string> v;
  const int d = ::dup(dirfd);
  if (d < 0) return v;
  DIR* dir = ::fdopendir(d);
  if (!dir) {
    ::close(d);
    return v;
  }
  ::rewinddir(dir);
  while (const dirent* e = ::readdir(dir)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") v.push_back(n);
  }
  ::closedir(dir);
  std::sort(v.begin(), v.end());
  return v;
}

// A build's temporary is ".tmp-PID-XXXXXX"; one whose process is gone (killed mid-build) is stale.
bool stale_temporary(const std::string& name) {
  if (name.rfind(".tmp-", 0) != 0) return false;
  const size_t dash = name.find('-', 5);
  const std::string digits = name.substr(5, dash == std::string::npos ? std::string::npos : dash - 5);
  if (digits.empty() || digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
    return true;
  const pid_t pid = static_cast<pid_t>(std::stol(digits));
  return pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH;
}

// Removes `name` under the cache directory `dir`, a tree or a symlink (never what a symlink points to).
bool remove_entry(const std::string& dir, const std::string& name) {
  std::error_code ec;
  fs::remove_all(fs::path(dir) / name, ec);
  return !ec;
}

int64_t sweep_stale_temporaries(int dirfd, const std::string& dir) {
  int64_t n = 0;
  for (const auto& name : names_in(dirfd))
    if (stale_temporary(name) && remove_entry(dir, name)) ++n;
  return n;
}

// What the key holds besides the kernel itself.
struct Context {
  std::string cpu, compiler, compiler_path;
};

std::string cache_key(const std::string& source, const std::vector<std::string>& flags, const Context& c) {
  // Every field length-prefixed, so no two different inputs hash the same text.
  Sha256 h;
  auto field = [&](std::string_view tag, std::string_view v) {
    const uint64_t n = v.size();
    h.update(tag);
    h.update(&n, sizeof n);
    h.update(v);
  };
  field("source", source);
  for (const auto& f : kernel_base_flags()) field("base_flag", f);
  for (const auto& f : flags) field("flag", f);
  field("compiler", c.compiler);
  field("cpu", c.cpu);
  field("ridge", ridge::version());
  return h.hex_digest();
}

// The program `name` names: itself when it holds a '/', else the first match on PATH; canonical
// (symlinks resolved, so switching /usr/bin/c++'s alternative changes the signature); "" when none.
std::string resolve_program(const std::string& name) {
  if (name.empty()) return "";
  std::vector<std::string> candidates;
  if (name.find('/') != std::string::npos) {
    candidates.push_back(name);
  } else {
    const std::string path = env::text("PATH");
    for (size_t at = 0; at <= path.size();) {
      size_t end = path.find(':', at);
      if (end == std::string::npos) end = path.size();
      const std::string d = path.substr(at, end - at);
      candidates.push_back((d.empty() ? std::string(".") : d) + "/" + name);
      at = end + 1;
    }
  }
  for (const auto& c : candidates) {
    struct stat st {};
    if (::stat(c.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || ::access(c.c_str(), X_OK) != 0) continue;
    std::error_code ec;
    const auto canon = fs::canonical(c, ec);
    return ec ? fs::absolute(c).string() : canon.string();
  }
  return "";
}

// compiler_signature with the reason when it is "" (the notice says it). Remembered per program file
// (path, inode, size, mtime), so a warm process runs `--version` once per compiler.
std::string probe_compiler(const Settings& s, std::string& path, std::string& why) {
  path = resolve_program(s.compiler);
  if (path.empty()) {
    why = s.compiler.empty()
              ? "no compiler given (RIDGE_JIT_CXX is empty)"
              : fmt::format("compiler '{}' not found (RIDGE_JIT_CXX names it, else c++ on PATH)", s.compiler);
    return "";
  }
  struct stat st {};
  ::stat(path.c_str(), &st);
  const std::string memo_key =
      fmt::format("{}\n{}\n{}\n{}.{}", path, st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  static std::mutex m;
  static std::unordered_map<std::string, std::pair<std::string, std::string>> memo;  // signature, why
  {
    std::lock_guard lock(m);
    if (const auto it = memo.find(memo_key); it != memo.end()) {
      why = it->second.second;
      return it->second.first;
    }
  }
  const auto r = process::run({path, "--version"}, true, s.compile_timeout_s);
  std::string first = r.output.substr(0, r.output.find('\n'));
  while (!first.empty() && (first.back() == '\r' || first.back() == ' ')) first.pop_back();
  std::string sig;
  if (r.timed_out)
    why = fmt::format("'{} --version' ran past {} s", path, s.compile_timeout_s);
  else if (!r.started)
    why = fmt::format("compiler '{}' could not be started", path);
  else if (r.exit_code != 0 || first.empty())
    why = fmt::format("'{} --version' failed (exit {}), so it is not a compiler ridge can use", path,
                      r.exit_code);
  else
    sig = path + " | " + first;
  std::lock_guard lock(m);
  memo[memo_key] = {sig, why};
  return sig;
}

std::string str(const nlohmann::json& j, const char* k) {
  return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
}

// One entry checked as get() loads it. On success `so` is the open kernel.so whose bytes matched
// meta.json's checksum.
struct Checked {
  bool ok = false, absent = false;
  std::string why;
  Fd so;
  nlohmann::json meta;
  int64_t bytes = 0;
};

Checked check_entry(int cachefd, const std::string& key, const Context& c, bool check_contents) {
  Checked r;
  auto bad = [&r](std::string why) {
    r.why = std::move(why);
    r.so.reset();
    return std::move(r);
  };
  struct stat st {};
  if (::fstatat(cachefd, key.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    r.absent = errno == ENOENT;
    r.why = err(errno);
    return r;
  }
  if (S_ISLNK(st.st_mode)) return bad("the entry is a symlink");
  if (!S_ISDIR(st.st_mode)) return bad("the entry is not a directory");
  if (st.st_uid != ::geteuid())
    return bad(fmt::format("the entry belongs to uid {}, not this user ({})", st.st_uid, ::geteuid()));
  Fd dir(::openat(cachefd, key.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st2 {};
  if (dir.fd < 0 || ::fstat(dir.fd, &st2) != 0) return bad("the entry: " + err(errno));
  if (st2.st_ino != st.st_ino || st2.st_dev != st.st_dev) return bad("the entry changed while checked");

  std::string text;
  if (auto why = read_ours(dir.fd, "meta.json", text, &r.bytes); !why.empty()) return bad(why);
  try {
    r.meta = input::parse_json(text, "meta.json");  // its depth limit: the file may have been planted
  } catch (const Error&) {
    return bad("meta.json is not a JSON object");
  }
  if (!r.meta.is_object()) return bad("meta.json is not a JSON object");
  if (str(r.meta, "key") != key) return bad("meta.json's key is not the entry's name");
  if (const auto v = str(r.meta, "ridge_version"); v != ridge::version())
    return bad(fmt::format("built by ridge '{}' (this is {})", v, ridge::version()));
  if (str(r.meta, "cpu") != c.cpu) return bad("built for another CPU");
  if (c.compiler.empty()) return bad("no compiler here to check it against");
  if (str(r.meta, "compiler") != c.compiler) return bad("built by another compiler");
  const std::string want = str(r.meta, "so_sha256");
  if (!is_key(want)) return bad("meta.json has no so_sha256");

  struct stat so_st {};
  if (auto why = open_ours(dir.fd, "kernel.so", r.so, &so_st); !why.empty()) return bad(why);
  r.bytes += so_st.st_size;
  if (hash_fd(r.so.fd) != want) return bad("kernel.so's SHA-256 is not meta.json's (truncated or changed)");
  // list(): the key must also be what the entry's own source and flags hash to here (get() computed
  // the name from its request, so there it holds by construction).
  if (check_contents) {
    std::string source;
    if (auto why = read_ours(dir.fd, "kernel.cpp", source, &r.bytes); !why.empty()) return bad(why);
    std::vector<std::string> flags;
    bool flags_ok = r.meta.contains("flags") && r.meta["flags"].is_array();
    if (flags_ok)
      for (const auto& f : r.meta["flags"]) {
        flags_ok = flags_ok && f.is_string();
        if (f.is_string()) flags.push_back(f.get<std::string>());
      }
    if (!flags_ok) return bad("meta.json has no flags list");
    if (cache_key(source, flags, c) != key)
      return bad("its key is not what kernel.cpp and its flags hash to");
  }
  r.ok = true;
  return r;
}

// Moves a bad entry out of the way (a rename, so no other process sees it half removed) and removes it.
void discard_entry(int cachefd, const std::string& dir, const std::string& key) {
  static std::atomic<int> n{0};
  const std::string aside = fmt::format(".tmp-{}-old-{}", ::getpid(), n++);
  if (::renameat(cachefd, key.c_str(), cachefd, aside.c_str()) == 0) remove_entry(dir, aside);
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The in-process state: requests already served (or failed), and every loaded object by its file.
// The descriptor each was loaded through stays open for the process's life: glibc's dlopen answers a
// name it has seen before (a loaded object's name, or one it recorded as an alias when the same file
// came back under another name) with that object, so /proc/self/fd/N must never name a second file.
// Hence also: a file already loaded is never passed to dlopen again.
struct Request {
  std::string name, source, symbol, cache_dir, compiler;
  std::vector<std::string> flags;
};
struct Slot {
  Request req;
  void* fn = nullptr;
};
struct State {
  std::mutex m;  // map, off
  std::unordered_map<uint64_t, std::vector<Slot>> map;
  // Set by the first failure (no compiler, a compile that failed or ran past its deadline, an unusable
  // cache): from then on the JIT is off for the process, as the notice says, and no request starts
  // another compile. A compiler that hangs thus costs one deadline, not one per kernel.
  bool off = false;
  std::mutex build;  // one build at a time in this process; warm lookups never wait for it
  std::map<std::pair<uint64_t, uint64_t>, void*> loaded;  // (st_dev, st_ino) of each loaded .so
};
State& state() {
  static State* s = new State;  // never destroyed: a kernel may run during another static's destructor
  return *s;
}

uint64_t request_hash(const Kernel& k, const Settings& s) {
  uint64_t h = kFnv1aBasis;
  auto field = [&](const std::string& v) {
    const uint64_t n = v.size();
    h = fnv1a(&n, sizeof n, h);
    h = fnv1a(v.data(), v.size(), h);
  };
  field(k.name);
  field(k.source);
  field(k.symbol);
  field(s.cache_dir);
  field(s.compiler);
  for (const auto& f : k.flags) field(f);
  return h;
}

// Compared field by field with the request as given, so a warm lookup copies nothing.
const Slot* find(State& st, uint64_t h, const Kernel& k, const Settings& s) {
  const auto it = st.map.find(h);
  if (it == st.map.end()) return nullptr;
  for (const auto& slot : it->second) {
    const Request& r = slot.req;
    if (r.source == k.source && r.name == k.name && r.symbol == k.symbol && r.flags == k.flags &&
        r.cache_dir == s.cache_dir && r.compiler == s.compiler)
      return &slot;
  }
  return nullptr;
}

// Loads the checked kernel.so (its descriptor) and finds the symbol; "" or why not.
std::string load(Checked& e, const std::string& symbol, void*& fn) {
  auto& loaded = state().loaded;  // under the build mutex
  struct stat st {};
  if (::fstat(e.so.fd, &st) != 0) return "kernel.so: " + err(errno);
  const std::pair<uint64_t, uint64_t> id{st.st_dev, st.st_ino};
  void* h = nullptr;
  if (const auto it = loaded.find(id); it != loaded.end()) {
    // Loaded before (a disk hit after forget_in_process): its mapping keeps the inode, so the id
    // still names that file. No dlopen, which would record this descriptor's name as an alias.
    h = it->second;
    e.so.reset();
  } else {
    const std::string path = "/proc/self/fd/" + std::to_string(e.so.fd);
    h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* d = ::dlerror();
      return fmt::format("dlopen of a cached kernel failed: {}", d ? d : "unknown error");
    }
    e.so.release();  // its number names the object now: never closed, never reused
    for (const auto& [other, handle] : loaded)
      if (handle == h) return "dlopen handed back an object loaded before (a reused /proc/self/fd name)";
    loaded.emplace(id, h);
  }
  fn = ::dlsym(h, symbol.c_str());
  if (!fn) return fmt::format("the kernel does not define '{}'", symbol);
  return "";
}

// Compiles `k` into a temporary directory and renames it to `key`. "" or why not; `lost` when another
// process renamed its own build there first.
std::string build(int cachefd, const std::string& dir, const Kernel& k, const std::string& key,
                  const Context& c, const Settings& s) {
  sweep_stale_temporaries(cachefd, dir);
  std::string tmp = fmt::format("{}/.tmp-{}-XXXXXX", dir, ::getpid());
  if (!::mkdtemp(tmp.data()))
    return fmt::format("cannot create a build directory in cache dir '{}': {}", dir, err(errno));
  const std::string tmp_name = fs::path(tmp).filename().string();
  bool keep = false;
  struct Cleanup {
    const std::string& dir;
    const std::string& name;
    const bool& keep;
    ~Cleanup() {
      if (!keep) remove_entry(dir, name);
    }
  } cleanup{dir, tmp_name, keep};

  Fd tfd(::openat(cachefd, tmp_name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (tfd.fd < 0) return fmt::format("cannot open the build directory '{}': {}", tmp, err(errno));
  if (auto why = write_new(tfd.fd, "kernel.cpp", k.source); !why.empty()) return why;
  std::vector<std::string> argv = {c.compiler_path};
  argv.insert(argv.end(), kernel_base_flags().begin(), kernel_base_flags().end());
  argv.insert(argv.end(), k.flags.begin(), k.flags.end());
  argv.insert(argv.end(), {"-o", tmp + "/kernel.so", tmp + "/kernel.cpp"});
  const auto r = process::run(argv, true, s.compile_timeout_s);
  if (r.timed_out) return fmt::format("compiling '{}' ran past {} s (killed)", k.name, s.compile_timeout_s);
  if (!r.started) return fmt::format("compiler '{}' could not be started", c.compiler_path);
  if (r.exit_code != 0) {
    // The first error line says what went wrong; the last is usually "compilation terminated."
    std::string line = process::last_line(r.output);
    for (size_t at = 0; at < r.output.size();) {
      const size_t end = std::min(r.output.find('\n', at), r.output.size());
      const std::string l = r.output.substr(at, end - at);
      if (l.find("error") != std::string::npos) {
        line = l;
        break;
      }
      at = end + 1;
    }
    return fmt::format("compiling '{}' failed (exit {}): {}", k.name, r.exit_code,
                       line.empty() ? "no output" : line);
  }
  Fd so;
  if (auto why = open_ours(tfd.fd, "kernel.so", so); !why.empty())
    return "the compiler wrote no usable " + why;
  const std::string so_sha = hash_fd(so.fd);
  if (so_sha.empty()) return "kernel.so cannot be read back";
  const nlohmann::json meta = {
      {"key", key},       {"name", k.name},         {"symbol", k.symbol},
      {"flags", k.flags}, {"so_sha256", so_sha},    {"ridge_version", ridge::version()},
      {"cpu", c.cpu},     {"compiler", c.compiler}, {"created", now_utc()}};
  if (auto why = write_new(tfd.fd, "meta.json", meta.dump(2) + "\n"); !why.empty()) return why;
  if (::renameat(cachefd, tmp_name.c_str(), cachefd, key.c_str()) == 0) {
    keep = true;
    return "";
  }
  if (errno == EEXIST || errno == ENOTEMPTY)
    return "";  // another process won; ours goes, theirs is checked next
  return fmt::format("cannot rename the build into cache dir '{}': {}", dir, err(errno));
}

void check_kernel(const Kernel& k) {
  check_arg(!k.source.empty(), "k.source", "empty (expected a complete C++ translation unit)");
  const bool ident = !k.symbol.empty() && !std::isdigit(static_cast<unsigned char>(k.symbol[0])) &&
                     std::all_of(k.symbol.begin(), k.symbol.end(), [](char ch) {
                       return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
                     });
  check_arg(ident, "k.symbol", "'{}' is not accepted (expected a C identifier, the extern \"C\" function)",
            k.symbol);
  for (const auto& f : k.flags)
    check_arg(f.size() > 1 && f[0] == '-' && f != "-o", "k.flags",
              "'{}' is not accepted (expected a compiler flag such as -mavx2)", f);
}

// The cold path of get(): the cache directory, the key, the disk entry or a build.
void* obtain(const Kernel& k, const Settings& s, Source& src, std::string& why) {
  Fd cache;
  if (why = open_cache_dir(s.cache_dir, true, cache); !why.empty()) return nullptr;
  Context c;
  c.cpu = cpu_signature();
  // One deadline covers the compiler's first `--version` (remembered afterwards) and the compile, so a
  // compiler that answers slowly and then hangs still costs one deadline, not two.
  const auto t0 = std::chrono::steady_clock::now();
  c.compiler = probe_compiler(s, c.compiler_path, why);
  if (c.compiler.empty()) return nullptr;
  Settings left = s;
  const auto spent = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0);
  if (s.compile_timeout_s > 0)
    left.compile_timeout_s = std::max(1, s.compile_timeout_s - static_cast<int>(spent.count()));
  const std::string key = cache_key(k.source, k.flags, c);
  void* fn = nullptr;
  Checked e = check_entry(cache.fd, key, c, false);
  if (e.ok) {
    src = Source::disk;
    why = load(e, k.symbol, fn);
    return fn;
  }
  if (!e.absent) discard_entry(cache.fd, s.cache_dir, key);  // never loaded: moved aside and removed
  if (why = build(cache.fd, s.cache_dir, k, key, c, left); !why.empty()) return nullptr;
  e = check_entry(cache.fd, key, c, false);
  if (!e.ok) {
    why = "the entry just built (or another process's) failed its check: " + e.why;
    return nullptr;
  }
  src = Source::compiled;
  why = load(e, k.symbol, fn);
  return fn;
}

}  // namespace

Settings settings() {
  Settings s;
  s.enabled = env::knobs().jit;
  s.cache_dir = env::text("RIDGE_JIT_CACHE_DIR");
  if (s.cache_dir.empty()) {
    // XDG says a relative XDG_CACHE_HOME is to be ignored.
    std::string base = env::text("XDG_CACHE_HOME");
    if (base.empty() || base[0] != '/') {
      const std::string home = env::text("HOME");
      base = home.empty() ? "" : home + "/.cache";
    }
    if (!base.empty()) s.cache_dir = base + "/ridge/jit";
  }
  s.compiler = env::text("RIDGE_JIT_CXX");
  if (s.compiler.empty()) s.compiler = "c++";
  return s;
}

void* get(const Kernel& k, const Settings& s) {
  check_kernel(k);
  if (!s.enabled) {
    t_last = Source::none;
    return nullptr;
  }
  auto& st = state();
  const uint64_t h = request_hash(k, s);
  {
    std::lock_guard lock(st.m);
    if (const Slot* slot = find(st, h, k, s)) {
      t_last = slot->fn ? Source::memory : Source::none;
      return slot->fn;
    }
  }
  std::lock_guard build_lock(st.build);
  {
    std::lock_guard lock(st.m);
    if (const Slot* slot = find(st, h, k, s)) {  // another thread built it while this one waited
      t_last = slot->fn ? Source::memory : Source::none;
      return slot->fn;
    }
    if (st.off) {  // an earlier failure turned the JIT off: no new compile, no new notice
      st.map[h].push_back({Request{k.name, k.source, k.symbol, s.cache_dir, s.compiler, k.flags}, nullptr});
      t_last = Source::none;
      return nullptr;
    }
  }
  Source src = Source::none;
  std::string why;
  void* fn = nullptr;
  try {
    fn = obtain(k, s, src, why);
  } catch (const std::exception& e) {
    fn = nullptr;
    why = e.what();
  }
  if (!fn) {
    src = Source::none;
    notice(why.empty() ? "unknown failure" : why);
  }
  {
    std::lock_guard lock(st.m);
    st.map[h].push_back({Request{k.name, k.source, k.symbol, s.cache_dir, s.compiler, k.flags}, fn});
    if (!fn) st.off = true;
  }
  t_last = src;
  return fn;
}

void* get(const Kernel& k) {
  return get(k, settings());
}

const char* source_name(Source s) {
  switch (s) {
    case Source::memory:
      return "memory";
    case Source::disk:
      return "disk";
    case Source::compiled:
      return "compiled";
    case Source::none:
      break;
  }
  return "none";
}

Source last_source() {
  return t_last;
}

void forget_in_process() {
  auto& st = state();
  std::lock_guard lock(st.m);
  st.map.clear();
  st.off = false;
}

std::vector<Entry> list(const Settings& s) {
  Fd cache;
  bool missing = false;
  if (auto why = open_cache_dir(s.cache_dir, false, cache, &missing); !why.empty()) {
    if (missing) return {};
    fail_arg("s.cache_dir", "{}", why);
  }
  Context c;
  c.cpu = cpu_signature();
  std::string no_compiler;
  c.compiler = probe_compiler(s, c.compiler_path, no_compiler);
  std::vector<Entry> out;
  for (const auto& name : names_in(cache.fd)) {
    if (!is_key(name)) continue;
    Checked e = check_entry(cache.fd, name, c, true);
    Entry en;
    en.key = name;
    en.path = (fs::path(s.cache_dir) / name).string();
    en.name = str(e.meta, "name");
    en.bytes = e.bytes;
    en.valid = e.ok;
    en.why = e.ok                                                                    ? ""
             : c.compiler.empty() && e.why == "no compiler here to check it against" ? no_compiler
                                                                                     : e.why;
    out.push_back(std::move(en));
  }
  return out;
}

int64_t clear(const Settings& s) {
  Fd cache;
  bool missing = false;
  if (auto why = open_cache_dir(s.cache_dir, false, cache, &missing); !why.empty()) {
    if (missing) return 0;
    fail_arg("s.cache_dir", "{}", why);
  }
  int64_t n = sweep_stale_temporaries(cache.fd, s.cache_dir);
  for (const auto& name : names_in(cache.fd))
    if (is_key(name) && remove_entry(s.cache_dir, name)) ++n;
  return n;
}

std::string cpu_signature() {
  const auto& in = cpu::info();
  const auto& f = in.features;
  std::string s = fmt::format("{} family {} model {}:", in.vendor, in.family, in.model);
  auto features = cpu::feature_list(f);
  for (auto os :
       {std::pair<const char*, bool>{"os_avx", f.os_avx}, {"os_avx512", f.os_avx512}, {"os_amx", f.os_amx}})
    features.push_back(os);
  for (const auto& [name, on] : features)
    if (on) s += std::string(" ") + name;
  return s;
}

std::string compiler_signature(const Settings& s) {
  std::string path, why;
  return probe_compiler(s, path, why);
}

const std::vector<std::string>& base_flags() {
  return kernel_base_flags();
}

}  // namespace ridge::jit
