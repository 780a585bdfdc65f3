// The JIT and its on-disk cache, with the real system compiler and real files: each test has a cache
// directory of its own; damaged, foreign and planted entries are never loaded; every failure is a
// nullptr and one notice, never a crash. Skipped only where there is no C++ compiler.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/tmpdir.hpp"
#include "ridge/core.hpp"
#include "ridge/jit.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using namespace ridge;
using test::TempDir;

jit::Kernel triple() {
  return {"test_triple", "extern \"C\" int f(int x) { return x * 3 + 1; }\n", {}, "f"};
}
// Another kernel with the same symbol: if get() ever returned it, f(4) would say so.
jit::Kernel foreign() {
  return {"test_foreign", "extern \"C\" int f(int x) { return x * 5; }\n", {}, "f"};
}

int call(void* p, int x) {
  return reinterpret_cast<int (*)(int)>(p)(x);
}

jit::Settings settings_in(const fs::path& cache) {
  jit::Settings s;
  s.enabled = true;
  s.cache_dir = cache.string();
  s.compiler = "c++";
  return s;
}

bool have_compiler() {
  jit::Settings s;
  s.compiler = "c++";
  return !jit::compiler_signature(s).empty();
}

#define RIDGE_SKIP_WITHOUT_COMPILER() \
  if (!have_compiler()) GTEST_SKIP() << "no C++ compiler ('c++' on PATH): the JIT has nothing to build with"

std::vector<std::string> names(const fs::path& dir) {
  std::vector<std::string> v;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

int temporaries(const fs::path& dir) {
  int n = 0;
  for (const auto& name : names(dir)) n += name.rfind(".tmp-", 0) == 0;
  return n;
}

// The one entry in `dir` (the test fails when there is not exactly one).
fs::path only_entry(const fs::path& dir) {
  const auto v = names(dir);
  EXPECT_EQ(v.size(), 1u) << "entries: " << testing::PrintToString(v);
  return v.empty() ? dir / "missing" : dir / v.front();
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void put(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// Replaces a file by a new one holding `bytes` (a new inode: a loaded object's mapping stays intact).
void replace(const fs::path& p, const std::string& bytes) {
  put(p.string() + ".new", bytes);
  fs::rename(p.string() + ".new", p);
}

nlohmann::json meta_of(const fs::path& entry) {
  return nlohmann::json::parse(slurp(entry / "meta.json"));
}

void set_meta(const fs::path& entry, const nlohmann::json& j) {
  replace(entry / "meta.json", j.dump(2));
}

// ------------------------------------------------------------------ child processes
// The test binary run again as a child: JitChild.Run does what RIDGE_JIT_TEST_CHILD says, with the
// settings of its environment, and its exit status is gtest's (0 when its checks held).
TEST(JitChild, Run) {
  const char* mode = std::getenv("RIDGE_JIT_TEST_CHILD");
  if (!mode) return;  // only ever does something as a child of the tests below
  const auto s = jit::settings();
  if (std::string(mode) == "get") {
    void* p = jit::get(triple(), s);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(call(p, 4), 13);
  } else if (std::string(mode) == "fail_twice") {
    EXPECT_EQ(jit::get(triple(), s), nullptr);
    EXPECT_EQ(jit::last_source(), jit::Source::none);
    EXPECT_EQ(jit::get(foreign(), s), nullptr);
    EXPECT_EQ(jit::get(triple(), s), nullptr);
  } else {
    FAIL() << "unknown RIDGE_JIT_TEST_CHILD=" << mode;
  }
}

struct Child {
  pid_t pid = -1;
  fs::path err;
};

// Starts this binary filtered to JitChild.Run, with `vars` added to its environment, stderr to a file.
Child start_child(const std::vector<std::string>& vars, const fs::path& err) {
  // This process's environment without the variables set here (getenv would find the first of two).
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    bool replaced = false;
    for (const auto& n : vars) replaced = replaced || v.rfind(n.substr(0, n.find('=') + 1), 0) == 0;
    if (!replaced && v.rfind("RIDGE_JIT", 0) != 0) env.push_back(v);
  }
  env.insert(env.end(), vars.begin(), vars.end());
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string self = fs::read_symlink("/proc/self/exe").string(), filter = "--gtest_filter=JitChild.Run";
  std::vector<char*> argv = {self.data(), filter.data(), nullptr};
  Child c{::fork(), err};
  if (c.pid == 0) {
    const int out = ::open("/dev/null", O_WRONLY);
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || fd < 0) ::_exit(120);
    ::dup2(out, 1);
    ::dup2(fd, 2);
    ::execve(self.c_str(), argv.data(), envp.data());
    ::_exit(121);
  }
  return c;
}

int wait_child(const Child& c) {
  int status = 0;
  while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// ------------------------------------------------------------------ the cache at work

TEST(Jit, CompilesLoadsThenServesFromMemoryThenDisk) {
  RIDGE_SKIP_WITHOUT_COMPILER();
  TempDir t;
  const auto s = settings_in(t.path() / "a" / "b" / "jit");
  jit::forget_in_process();
  void* p = jit::get(triple(), s);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(jit::last_source(), jit::Source::compiled);
  EXPECT_EQ(call(p, 4), 13);
  EXPECT_EQ(call(p, -1), -2);
  EXPECT_EQ(jit::get(triple(), s), p);
  EXPECT_EQ(jit::last_source(), jit::Source::memory);
  jit::forget_in_process();
  void* q = jit::get(triple(), s);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(jit::last_source(), jit::Source::disk);
  EXPECT_EQ(call(q, 4), 13);
  // One entry, named by its key, holding the three files; no temporary; the folders made 0700.
  const fs::path entry = only_entry(s.cache_dir);
  EXPECT_EQ(temporaries(s.cache_dir), 0);
  EXPECT_EQ(entry.filename().string().size(), 64u);
  EXPECT_EQ(names(entry), (std::vector<std::string>{"kernel.cpp", "kernel.so", "meta.json"}));
  EXPECT_EQ(slurp(entry / "kernel.cpp"), triple().source);
  const auto meta = meta_of(entry);
  EXPECT_EQ(meta.at("key"), entry.filename().string());
  EXPECT_EQ(meta.at("name"), "test_triple");
  EXPECT_EQ(meta.at("symbol"), "f");
  EXPECT_EQ(meta.at("so_sha256"), sha256_hex(slurp(entry / "kernel.so")));
  EXPECT_EQ(meta.at("ridge_version"), ridge::version());
  EXPECT_EQ(meta.at("cpu"), jit::cpu_signature());
  EXPECT_EQ(meta.at("compiler"), jit::compiler_signature(s));
  for (const fs::path& d : {t.path() / "a", t.path() / "a" / "b", fs::path(s.cache_dir)})
    EXPECT_EQ(fs::status(d).permissions() & fs::perms::all, fs::perms::owner_all) << d;
  // list() sees it as get() would.
  const auto l = jit::list(s);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].key, entry.filename().string());
  EXPECT_EQ(l[0].name, "test_triple");
  EXPECT_TRUE(l[0].valid) << l[0].why;
  EXPECT_GT(l[0].bytes, 0);
}

TEST(Jit, KeyFollowsSourceAndFlags) {
  RIDGE_SKIP_WITHOUT_COMPILER();
  TempDir t;
  const auto s = settings_in(t.path() / "jit");
  jit::forget_in_process();
  auto k = triple();
  k.flags = {"-DRIDGE_UNUSED=1"};
  ASSERT_NE(jit::get(triple(), s), nullptr);
  void* p = jit::get(k, s);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(jit::last_source(), jit::Source::compiled) << "other flags, another entry";
  EXPECT_EQ(call(p, 2), 7);
  EXPECT_EQ(names(s.cache_dir).size(), 2u);
  EXPECT_NE(jit::cpu_signature().find(cpu::info().vendor), std::string::npos);
  EXPECT_NE(jit::compiler_signature(s).find(" | "), std::string::npos) << jit::compiler_signature(s);
}

TEST(Jit, OffMeansNullptrAndNoFiles) {
  TempDir t;
  auto s = settings_in(t.path() / "jit");
  s.enabled = false;
  EXPECT_EQ(jit::get(triple(), s), nullptr);
  EXPECT_EQ(jit::last_source(), jit::Source::none);
  EXPECT_FALSE(fs::exists(s.cache_dir));
  EXPECT_TRUE(jit::list(s).empty());
  EXPECT_EQ(jit::clear(s), 0);
}

TEST(Jit, MalformedKernelIsAnErrorNamingTheField) {
  TempDir t;
  const auto s = settings_in(t.path() / "jit");
  auto k = triple();
  k.symbol = "f(int)";
  try {
    jit::get(k, s);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("k.symbol: 'f(int)' is not accepted", 0), 0u) << e.what();
  }
  k = triple();
  k.flags = {"-o"};
  EXPECT_THROW(jit::get(k, s), Error);
  k = triple();
  k.source.clear();
  EXPECT_THROW(jit::get(k, s), Error);
}

TEST(Jit, EightProcessesAtOnceShareOneEntry) {
  RIDGE_SKIP_WITHOUT_COMPILER();
  TempDir t;
  const fs::path cache = t.path() / "jit";
  std::vector<Child> kids;
  for (int i = 0; i < 8; ++i)
    kids.push_back(start_child({"RIDGE_JIT_TEST_CHILD=get", "RIDGE_JIT=1",
                                "RIDGE_JIT_CACHE_DIR=" + cache.string(), "RIDGE_JIT_CXX=c++"},
                               t.path() / ("err" + std::to_string(i))));
  for (const auto& c : kids) EXPECT_EQ(wait_child(c), 0) << slurp(c.err);
  only_entry(cache);
  EXPECT_EQ(temporaries(cache), 0) << testing::PrintToString(names(cache));
  const auto l = jit::list(settings_in(cache));
  ASSERT_EQ(l.size(), 1u);
  EXPECT_TRUE(l[0].valid) << l[0].why;
  for (const auto& c : kids) EXPECT_EQ(slurp(c.err), "") << "no notice: every child got its kernel";
}

// ------------------------------------------------------------------ damaged and planted entries

// Builds triple() in `s`, damages its entry with `damage`, and checks that the next get() (from disk)
// rebuilds it rather than loading it: a working kernel, compiled again, one entry, no temporary.
void expect_rebuilt(const jit::Settings& s, const std::function<void(const fs::path& entry)>& damage,
                    const std::string& list_why = "") {
  jit::forget_in_process();
  ASSERT_NE(jit::get(triple(), s), nullptr);
  const fs::path entry = only_entry(s.cache_dir);
  damage(entry);
  if (!list_why.empty()) {
    const auto l = jit::list(s);
    ASSERT_EQ(l.size(), 1u);
    EXPECT_FALSE(l[0].valid);
    EXPECT_NE(l[0].why.find(list_why), std::string::npos) << l[0].why;
  }
  jit::forget_in_process();
  void* p = jit::get(triple(), s);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(jit::last_source(), jit::Source::compiled);
  EXPECT_EQ(call(p, 4), 13) << "the foreign kernel was loaded";
  EXPECT_EQ(only_entry(s.cache_dir), entry);
  EXPECT_EQ(temporaries(s.cache_dir), 0);
  EXPECT_FALSE(fs::is_symlink(entry));
  EXPECT_FALSE(fs::is_symlink(entry / "kernel.so"));
  const auto l = jit::list(s);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_TRUE(l[0].valid) << l[0].why;
}

TEST(Jit, TruncatedKernelIsRebuilt) {
  RIDGE_SKIP_WITHOUT_COMPILER();
  TempDir t;
  expect_rebuilt(
      settings_in(t.path() / "jit"),
      [](const fs::path& e) {
        const auto so = slurp(e / "kernel.so");
        replace(e / "kernel.so", so.substr(0, so.size() / 2));
      },
      "SHA-256");
}

TEST(Jit, EntryOfAnotherVersionIsRebuilt) {
  RIDGE_SKIP_WITHOUT_COMPILER();
  TempDir t;
  const auto s = settings_in(t.path() / "jit");
  expect_rebuilt(
      s,
      [](const fs::path& e) {
        auto m = meta_of(e);
        m["ridge_version"] = "0.0.1-other";
        set_meta(e, m);
      },
      "built by ridge '0.0.1-other'");
  // Its key rewritten as another version would have it.
  expect_rebuilt(
      s,
      [](const fs::path& e) {
        auto m = meta_of(e);
        m["key"] = std::string(64, 'a');
        set_meta(e, m);
      },
      "key");
  expect_rebuilt(
      s, [](const fs::path& e) { replace(e / "meta.json", "{\"key\": "); }, "not a JSON object");
  expect_rebuilt(
      s, [](const fs::path& e) { fs::remove(e / "meta.json"); }, "meta.json");
}

// A kernel.so of another build, valid in every other way (its checksum written into meta.json), is
// refused for being a symlink; so is an entry that is itself a symlink to such a planted folder.
TEST(Jit, SymlinksAreNeverFollowed) {
  RIDGE_SKIP_WITHOUT_COMPILER();
  TempDir t;
  const auto other = settings_in(t.path() / "other");
  jit::forget_in_process();
  void* f = jit::get(foreign(), other);
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(call(f, 4), 20);
  const fs::path foreign_so = only_entry(other.cache_dir) / "kernel.so";
  const std::string foreign_sha = sha256_hex(slurp(foreign_so));
  const auto s = settings_in(t.path() / "jit");
  expect_rebuilt(
      s,
      [&](const fs::path& e) {
        fs::remove(e / "kernel.so");
        fs::create_symlink(foreign_so, e / "kernel.so");
        auto m = meta_of(e);
        m["so_sha256"] = foreign_sha;
        set_meta(e, m);
      },
      "kernel.so is a symlink");
  const fs::path planted = t.path() / "planted";
  expect_rebuilt(
      s,
      [&](const fs::path& e) {
        fs::copy(e, planted);
        fs::copy_file(foreign_so, planted / "kernel.so", fs::copy_options::overwrite_existing);
        auto m = meta_of(planted);
        m["so_sha256"] = foreign_sha;
        set_meta(planted, m);
        fs::remove_all(e);
        fs::create_directory_symlink(planted, e);
      },
      "the entry is a symlink");
  EXPECT_TRUE(fs::exists(foreign_so)) << "removing a symlinked entry never removes what it points to";
  EXPECT_TRUE(fs::exists(planted / "kernel.so"));
  // A file where the entry's folder should be.
  expect_rebuilt(
      s,
      [](const fs::path& e) {
        fs::remove_all(e);
        put(e, "junk");
      },
      "not a directory");
}

// Only root can make an entry belong to someone else; there it must be refused like a symlink.
TEST(Jit, EntryOfAnotherUserIsRebuilt) {
  RIDGE_SKIP_WITHOUT_COMPILER();
  if (::geteuid() != 0) GTEST_SKIP() << "only root can give an entry to another user (chown)";
  TempDir t;
  expect_rebuilt(
      settings_in(t.path() / "jit"),
      [](const fs::path& e) {
        ASSERT_EQ(::chown((e / "kernel.so").c_str(), 65534, 65534), 0);
        ASSERT_EQ(::chown(e.c_str(), 65534, 65534), 0);
      },
      "belongs to uid 65534");
}

// ------------------------------------------------------------------ unusable caches and compilers

TEST(Jit, CachePathThatIsAFileOrSymlinkIsRefused) {
  RIDGE_SKIP_WITHOUT_COMPILER();
  TempDir t;
  jit::forget_in_process();
  put(t.path() / "file", "x");
  EXPECT_EQ(jit::get(triple(), settings_in(t.path() / "file")), nullptr);
  EXPECT_EQ(jit::last_source(), jit::Source::none);
  EXPECT_THROW(jit::list(settings_in(t.path() / "file")), Error);
  jit::forget_in_process();  // each case below on its own: a failure turns the JIT off for the process
  fs::create_directory(t.path() / "real", t.path());
  fs::permissions(t.path() / "real", fs::perms::owner_all);
  fs::create_directory_symlink(t.path() / "real", t.path() / "link");
  EXPECT_EQ(jit::get(triple(), settings_in(t.path() / "link")), nullptr);
  EXPECT_EQ(jit::last_source(), jit::Source::none);
  EXPECT_TRUE(names(t.path() / "real").empty());
  jit::forget_in_process();
  EXPECT_EQ(jit::get(triple(), settings_in(t.path() / "link/")), nullptr)
      << "a trailing slash follows no link";
  jit::forget_in_process();
  // One that others may write into.
  fs::create_directory(t.path() / "open");
  fs::permissions(t.path() / "open", fs::perms::all);
  EXPECT_EQ(jit::get(triple(), settings_in(t.path() / "open")), nullptr);
  EXPECT_TRUE(names(t.path() / "open").empty());
}

TEST(Jit, ReadOnlyCacheIsRefused) {
  RIDGE_SKIP_WITHOUT_COMPILER();
  if (::geteuid() == 0) GTEST_SKIP() << "running as root, which ignores file modes: a 0500 cache is writable";
  TempDir t;
  jit::forget_in_process();
  const fs::path cache = t.path() / "jit";
  fs::create_directory(cache);
  fs::permissions(cache, fs::perms::owner_read | fs::perms::owner_exec);
  EXPECT_EQ(jit::get(triple(), settings_in(cache)), nullptr);
  EXPECT_EQ(jit::last_source(), jit::Source::none);
  EXPECT_TRUE(names(cache).empty());
}

TEST(Jit, FailingOrMissingCompilerIsNullptrAndOneNotice) {
  TempDir t;
  for (const std::string& cxx : {std::string("/bin/false"), (t.path() / "no-such-compiler").string()}) {
    SCOPED_TRACE(cxx);
    jit::forget_in_process();
    auto s = settings_in(t.path() / "jit");
    s.compiler = cxx;
    EXPECT_EQ(jit::get(triple(), s), nullptr);
    EXPECT_EQ(jit::last_source(), jit::Source::none);
    EXPECT_EQ(jit::compiler_signature(s), "");
    // In a process of its own, to see its stderr: three failures, one notice.
    const fs::path err = t.path() / "err";
    const Child c =
        start_child({"RIDGE_JIT_TEST_CHILD=fail_twice", "RIDGE_JIT=1",
                     "RIDGE_JIT_CACHE_DIR=" + (t.path() / "jit").string(), "RIDGE_JIT_CXX=" + cxx},
                    err);
    EXPECT_EQ(wait_child(c), 0) << slurp(err);
    const std::string text = slurp(err);
    EXPECT_EQ(text.rfind("ridge: JIT off for this process: ", 0), 0u) << text;
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
    EXPECT_NE(text.find("; the ahead-of-time kernels run\n"), std::string::npos) << text;
  }
  EXPECT_EQ(temporaries(t.path() / "jit"), 0);
}

TEST(Jit, CompileErrorIsNullptrAndLeavesNothing) {
  RIDGE_SKIP_WITHOUT_COMPILER();
  TempDir t;
  jit::forget_in_process();
  const auto s = settings_in(t.path() / "jit");
  jit::Kernel bad{"test_bad", "extern \"C\" int f(int x) { return x +; }\n", {}, "f"};
  EXPECT_EQ(jit::get(bad, s), nullptr);
  EXPECT_EQ(jit::last_source(), jit::Source::none);
  EXPECT_EQ(jit::get(bad, s), nullptr) << "remembered: no second compile";
  EXPECT_EQ(jit::last_source(), jit::Source::none);
  EXPECT_TRUE(names(s.cache_dir).empty()) << testing::PrintToString(names(s.cache_dir));
  // A symbol the unit does not define: built and cached, but no function. (The failure above turned
  // the JIT off for the process; forgetting it turns it on again.)
  jit::forget_in_process();
  EXPECT_EQ(jit::get({"test_nosym", triple().source, {}, "g"}, s), nullptr);
  EXPECT_EQ(names(s.cache_dir).size(), 1u) << "built, so it was tried";
}

TEST(Jit, HangingCompilerIsKilledAtTheTimeout) {
  RIDGE_SKIP_WITHOUT_COMPILER();
  TempDir t;
  jit::forget_in_process();
  // Answers --version like a compiler, then hangs in a grandchild (sleep holds the output pipe): the
  // whole process group has to go.
  const fs::path cxx = t.path() / "hang-c++";
  put(cxx, "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'hang 1.0'; exit 0; fi\nsleep 30\n");
  fs::permissions(cxx, fs::perms::owner_all);
  auto s = settings_in(t.path() / "jit");
  s.compiler = cxx.string();
  s.compile_timeout_s = 1;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(jit::get(triple(), s), nullptr);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 5.0);
  EXPECT_EQ(jit::last_source(), jit::Source::none);
  EXPECT_TRUE(names(s.cache_dir).empty()) << testing::PrintToString(names(s.cache_dir));
  // One that hangs on --version as well.
  put(cxx, "#!/bin/sh\nsleep 30\n");
  jit::forget_in_process();
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(jit::get(foreign(), s), nullptr);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 5.0);
}

// A compiler (RIDGE_JIT_CXX) that answers --version and then hangs: the first kernel costs one
// deadline, and the JIT is then off for the process, as its notice says, so no later kernel starts a
// compile (before, each kernel waited out its own deadline: four kernels of `generate` took 241 s).
// Counted through the file the script appends to, not timed.
TEST(Jit, AHangingCompilerCostsOneDeadlineThenTheJitIsOff) {
  TempDir t;
  jit::forget_in_process();
  const fs::path cxx = t.path() / "hang-c++", calls = t.path() / "calls";
  put(cxx, "#!/bin/sh\nif [ \"$1\" = --version ]; then echo version >> '" + calls.string() +
               "'; echo 'hang 1.0'; exit 0; fi\necho compile >> '" + calls.string() + "'\nexec sleep 30\n");
  fs::permissions(cxx, fs::perms::owner_all);
  auto s = settings_in(t.path() / "jit");
  s.compiler = cxx.string();
  s.compile_timeout_s = 1;
  const jit::Kernel kernels[] = {
      triple(), foreign(), {"test_third", "extern \"C\" int f(int x) { return x; }\n", {}, "f"}};
  for (const auto& k : kernels) {
    EXPECT_EQ(jit::get(k, s), nullptr) << k.name;
    EXPECT_EQ(jit::last_source(), jit::Source::none);
  }
  EXPECT_EQ(slurp(calls), "version\ncompile\n") << "one compile for the process, not one per kernel";
  EXPECT_TRUE(names(s.cache_dir).empty()) << testing::PrintToString(names(s.cache_dir));
  // Asked again: still off, still no compile.
  EXPECT_EQ(jit::get(triple(), s), nullptr);
  EXPECT_EQ(slurp(calls), "version\ncompile\n");
  jit::forget_in_process();
}

// A compiler whose driver leaves a process behind that holds its output (`sleep &` inheriting stdout
// and stderr) and then compiles: the kernel is served. Before, ridge read the pipe until every writer
// had closed it, so the successful compile ran into the deadline and was reported as a hang.
TEST(Jit, ACompilerThatLeavesAChildHoldingItsOutputStillServes) {
  RIDGE_SKIP_WITHOUT_COMPILER();
  TempDir t;
  jit::forget_in_process();
  const fs::path cxx = t.path() / "fork-c++", pid = t.path() / "pid";
  put(cxx, "#!/bin/sh\nif [ \"$1\" = --version ]; then exec c++ --version; fi\nsleep 60 &\necho $! > '" +
               pid.string() + "'\nexec c++ \"$@\"\n");
  fs::permissions(cxx, fs::perms::owner_all);
  auto s = settings_in(t.path() / "jit");
  s.compiler = cxx.string();
  s.compile_timeout_s = 20;
  void* p = jit::get(triple(), s);
  const std::string child = slurp(pid);
  if (!child.empty()) ::kill(std::stoi(child), SIGKILL);  // the test's own leftover
  ASSERT_NE(p, nullptr) << "the compile succeeded; the process it left behind is not the compiler";
  EXPECT_EQ(jit::last_source(), jit::Source::compiled);
  EXPECT_EQ(call(p, 4), 13);
  jit::forget_in_process();
}

TEST(Jit, ProcessRunDoesNotWaitForAProcessItsProgramLeftBehind) {
  TempDir t;
  const fs::path pid = t.path() / "pid";
  // The program ends at once; its child keeps the output pipe open for a minute.
  const std::string script = "sleep 60 & echo $! > '" + pid.string() + "'; echo hi; exit 3";
  auto kill_child = [&] {
    const std::string child = slurp(pid);
    if (!child.empty()) ::kill(std::stoi(child), SIGKILL);
  };
  const auto r = process::run({"/bin/sh", "-c", script}, true, 20);
  kill_child();
  const auto q = process::run({"/bin/sh", "-c", script}, true, 0);  // no limit: the same
  kill_child();
  EXPECT_TRUE(r.started);
  EXPECT_FALSE(r.timed_out) << "the program ended; its leftover child is not waited for";
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.output, "hi\n");
  EXPECT_FALSE(q.timed_out);
  EXPECT_EQ(q.exit_code, 3);
  EXPECT_EQ(q.output, "hi\n");
}

TEST(Jit, ProcessRunTimeoutKillsTheGroup) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = process::run({"/bin/sh", "-c", "sleep 30; echo late"}, true, 1);
  EXPECT_TRUE(r.started);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_EQ(r.output.find("late"), std::string::npos);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  const auto q = process::run({"/bin/sh", "-c", "sleep 30"}, false, 1);
  EXPECT_TRUE(q.timed_out);
  const auto ok = process::run({"/bin/sh", "-c", "echo hi"}, true, 10);
  EXPECT_FALSE(ok.timed_out);
  EXPECT_EQ(ok.exit_code, 0);
  EXPECT_EQ(ok.output, "hi\n");
}

// ------------------------------------------------------------------ list, clear, settings

TEST(Jit, ClearRemovesEntriesAndStaleTemporaries) {
  RIDGE_SKIP_WITHOUT_COMPILER();
  TempDir t;
  jit::forget_in_process();
  const auto s = settings_in(t.path() / "jit");
  ASSERT_NE(jit::get(triple(), s), nullptr);
  // A build killed mid-way (its pid no longer runs), and a file that is not ridge's.
  fs::create_directory(fs::path(s.cache_dir) / ".tmp-999999999-abcdef");
  put(fs::path(s.cache_dir) / "README", "mine");
  EXPECT_EQ(jit::list(s).size(), 1u);
  EXPECT_EQ(jit::clear(s), 2);
  EXPECT_EQ(names(s.cache_dir), std::vector<std::string>{"README"});
  EXPECT_TRUE(jit::list(s).empty());
}

TEST(Jit, SettingsComeFromTheEnvironment) {
  auto keep = [](const char* n) {
    const char* v = std::getenv(n);
    return std::pair<std::string, bool>(v ? v : "", v != nullptr);
  };
  const auto dir = keep("RIDGE_JIT_CACHE_DIR"), xdg = keep("XDG_CACHE_HOME"), home = keep("HOME"),
             cxx = keep("RIDGE_JIT_CXX");
  ::setenv("RIDGE_JIT_CACHE_DIR", "/x/jit", 1);
  ::setenv("RIDGE_JIT_CXX", "clang++", 1);
  EXPECT_EQ(jit::settings().cache_dir, "/x/jit");
  EXPECT_EQ(jit::settings().compiler, "clang++");
  ::unsetenv("RIDGE_JIT_CACHE_DIR");
  ::unsetenv("RIDGE_JIT_CXX");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(jit::settings().cache_dir, "/xdg/ridge/jit");
  EXPECT_EQ(jit::settings().compiler, "c++");
  ::setenv("XDG_CACHE_HOME", "relative", 1);  // the XDG spec says to ignore a relative one
  EXPECT_EQ(jit::settings().cache_dir, "/home/u/.cache/ridge/jit");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(jit::settings().cache_dir, "/home/u/.cache/ridge/jit");
  EXPECT_EQ(jit::settings().compile_timeout_s, 60);
  for (const auto& [name, v] : {std::pair{"RIDGE_JIT_CACHE_DIR", dir}, std::pair{"XDG_CACHE_HOME", xdg},
                                std::pair{"HOME", home}, std::pair{"RIDGE_JIT_CXX", cxx}}) {
    if (v.second)
      ::setenv(name, v.first.c_str(), 1);
    else
      ::unsetenv(name);
  }
}

}  // namespace
