// files::write_text: nothing the user had is lost, links and devices are written through.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <cstdio>
#include <span>
#include <string>

#include "ridge/core.hpp"

namespace {

namespace fs = std::filesystem;
using namespace ridge;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), {}};
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("ridge_files_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

// The file-size limit (RLIMIT_FSIZE) lowered for a scope, SIGXFSZ ignored: a write past it fails with
// EFBIG, as one on a full disk fails with ENOSPC.
struct FileSizeLimit {
  rlimit old{};
  void (*old_handler)(int) = SIG_DFL;
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old);
    old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit r = old;
    r.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &r);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
  }
};

long entries(const fs::path& dir) {
  return static_cast<long>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

// The message of the ridge::Error `f` throws ("" when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Files, RegularFileIsReplacedWholeAndKeepsItsMode) {
  TempDir d;
  const fs::path f = d.path / "a.json";
  { std::ofstream(f) << "old"; }
  ::chmod(f.c_str(), 0640);
  files::write_text(f.string(), "new text\n", "out");
  EXPECT_EQ(slurp(f), "new text\n");
  struct stat st {};
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_EQ(std::distance(fs::directory_iterator(d.path), fs::directory_iterator()), 1)
      << "no temporary left";
  files::write_text((d.path / "new.json").string(), "x", "out");  // a new file
  EXPECT_EQ(slurp(d.path / "new.json"), "x");
  EXPECT_THROW(files::write_text((d.path / "no" / "new.json").string(), "x", "out"), Error)
      << "no folder is made";
}

TEST(Files, StreamedOutputIsWholeOrNothing) {
  TempDir d;
  const fs::path f = d.path / "t.bin";
  { std::ofstream(f) << "old"; }
  const std::string piece(100000, 'x');
  files::write_streamed(
      f.string(),
      [&](const files::ByteSink& sink) {
        for (int i = 0; i < 5; ++i) sink(std::as_bytes(std::span<const char>(piece)));
      },
      "out");
  EXPECT_EQ(slurp(f), piece + piece + piece + piece + piece);
  // A producer that fails half way: the old file stays, no temporary is left.
  EXPECT_THROW(files::write_streamed(
                   f.string(),
                   [&](const files::ByteSink& sink) {
                     sink(std::as_bytes(std::span<const char>(piece)));
                     throw Error("producer failed");
                   },
                   "out"),
               Error);
  EXPECT_EQ(slurp(f).size(), 5 * piece.size());
  EXPECT_EQ(std::distance(fs::directory_iterator(d.path), fs::directory_iterator()), 1)
      << "no temporary left";
}
TEST(Files, SymlinkIsWrittenThroughAndSurvives) {
  TempDir d;
  const fs::path target = d.path / "target.json", link = d.path / "link.json";
  { std::ofstream(target) << "old"; }
  fs::create_symlink(target, link);
  files::write_text(link.string(), "through", "out");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
  EXPECT_EQ(slurp(target), "through");
}

TEST(Files, DeviceIsWrittenInPlaceNeverReplaced) {
  files::write_text("/dev/null", "discarded", "out");
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null is still a character device";
}

TEST(Files, FolderOrEmptyNameIsAnErrorNamingTheArgument) {
  TempDir d;
  for (const std::string& p : {d.path.string(), std::string()}) {
    try {
      files::write_text(p, "x", "--trace");
      ADD_FAILURE() << "wrote '" << p << "'";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--trace: ", 0), 0u) << e.what();
    }
  }
}

// The reason a write failed is the failing call's own errno (it was read before the write, the order of
// a call's arguments being unspecified: "cannot write 'out.bin': Success").
TEST(Files, AFailedWriteSaysWhyFromTheCallThatFailed) {
  const std::string dev = error_of([] { files::write_text("/dev/full", "x", "out"); });
  EXPECT_NE(dev.find("No space left on device"), std::string::npos) << dev;
  TempDir d;
  const fs::path f = d.path / "big.bin";
  { std::ofstream(f) << "old"; }
  std::string big;
  {
    FileSizeLimit limit(4096);
    big = error_of([&] { files::write_text(f.string(), std::string(100000, 'x'), "out"); });
  }
  EXPECT_EQ(big.rfind("out: cannot write '" + f.string() + "': File too large", 0), 0u) << big;
  EXPECT_EQ(slurp(f), "old");
  EXPECT_EQ(entries(d.path), 1) << "no temporary left";
}

// A folder of files read as one (a tokenizer) is written as one: a new folder, or the old one replaced
// whole; a failure part-way leaves the old set whole; what is not ridge's to replace is refused first.
TEST(Files, FolderIsWrittenAsOneSet) {
  TempDir d;
  const fs::path tok = d.path / "tok";
  using Set = std::vector<std::pair<std::string, std::string>>;
  const Set one = {{"a.json", "1a"}, {"b.txt", "1b"}}, two = {{"a.json", "2a"}, {"b.txt", "2b"}};
  files::write_folder(tok.string(), one, "out");
  EXPECT_EQ(slurp(tok / "a.json"), "1a");
  EXPECT_EQ(slurp(tok / "b.txt"), "1b");
  ::chmod(tok.c_str(), 0750);
  ::chmod((tok / "b.txt").c_str(), 0600);
  files::write_folder(tok.string() + "/", two, "out");
  EXPECT_EQ(slurp(tok / "a.json"), "2a");
  EXPECT_EQ(slurp(tok / "b.txt"), "2b");
  struct stat st {};
  ASSERT_EQ(::stat(tok.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0750u) << "the folder's mode is kept";
  ASSERT_EQ(::stat((tok / "b.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "a file's mode is kept";
  EXPECT_EQ(entries(d.path), 1) << "no temporary and no old set left";
  EXPECT_EQ(entries(tok), 2);

  // A symlink to the folder survives and names the new set.
  fs::create_directory_symlink(tok, d.path / "link");
  files::write_folder((d.path / "link").string(), one, "out");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(d.path / "link")));
  EXPECT_EQ(slurp(tok / "a.json"), "1a");
  EXPECT_EQ(slurp(d.path / "link" / "b.txt"), "1b");

  // The second file fails (past the file-size limit, as on a full disk): the old set stays whole.
  std::string e;
  {
    FileSizeLimit limit(4096);
    e = error_of([&] {
      files::write_folder(tok.string(), {{"a.json", "3a"}, {"b.txt", std::string(100000, '3')}}, "out");
    });
  }
  EXPECT_EQ(e, "out: cannot write '" + (tok / "b.txt").string() + "': File too large");
  EXPECT_EQ(slurp(tok / "a.json"), "1a");
  EXPECT_EQ(slurp(tok / "b.txt"), "1b");
  EXPECT_EQ(entries(d.path), 2) << "no temporary left";

  // Refused before anything is written.
  const auto refused = [&](const fs::path& dir, const std::string& words) {
    const std::string m = error_of([&] { files::write_folder(dir.string(), two, "-o"); });
    EXPECT_EQ(m.rfind("-o: ", 0), 0u) << m;
    EXPECT_NE(m.find(words), std::string::npos) << m;
  };
  { std::ofstream(tok / "notes.txt") << "mine"; }
  refused(tok, "holds 'notes.txt', which is not one of a.json, b.txt");
  EXPECT_EQ(slurp(tok / "notes.txt"), "mine");
  fs::remove(tok / "notes.txt");
  ::chmod((tok / "b.txt").c_str(), 0400);
  refused(tok, "'" + (tok / "b.txt").string() + "' is read-only");
  ::chmod((tok / "b.txt").c_str(), 0600);
  fs::create_directories(d.path / "t2" / "a.json");
  refused(d.path / "t2", "holds a folder 'a.json'");
  { std::ofstream(d.path / "file") << "f"; }
  refused(d.path / "file", "exists and is not a folder");
  refused(d.path / "no" / "tok", "does not exist");
  EXPECT_EQ(slurp(tok / "a.json"), "1a");
  EXPECT_EQ(slurp(tok / "b.txt"), "1b");
}

// The temporary folder of a writer killed outright is removed by the next write of the folder, unless
// it holds a file that is not of the set (never ridge's to remove).
TEST(Files, TemporaryFoldersOfDeadWritersAreRemovedByTheNextWrite) {
  TempDir d;
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // a pid that no longer runs
  const fs::path stale = d.path / ("tok.tmp." + std::to_string(child) + ".0"),
                 kept = d.path / ("tok.tmp." + std::to_string(child) + ".1");
  fs::create_directories(stale);
  fs::create_directories(kept);
  { std::ofstream(stale / "a.json") << "partial"; }
  { std::ofstream(kept / "mine.txt") << "mine"; }
  files::write_folder((d.path / "tok").string(), {{"a.json", "1"}}, "out");
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_EQ(slurp(kept / "mine.txt"), "mine");
  EXPECT_EQ(slurp(d.path / "tok" / "a.json"), "1");
}

TEST(Files, SameFileSeesThroughSpellingsAndLinks) {
  TempDir d;
  const fs::path f = d.path / "x.json";
  { std::ofstream(f) << "x"; }
  fs::create_symlink(f, d.path / "l.json");
  EXPECT_TRUE(files::same_file(f.string(), (d.path / "." / "x.json").string()));
  EXPECT_TRUE(files::same_file(f.string(), (d.path / "l.json").string()));
  EXPECT_TRUE(
      files::same_file((d.path / "new.json").string(), (d.path / "sub" / ".." / "new.json").string()));
  EXPECT_FALSE(files::same_file(f.string(), (d.path / "y.json").string()));
  EXPECT_FALSE(files::same_file(f.string(), ""));
  EXPECT_THROW(files::check_not_an_input(f.string(), {"h100", f.string()}, "--out"), Error);
  EXPECT_NO_THROW(files::check_not_an_input(f.string(), {"h100", ""}, "--out"));
}

}  // namespace

// contents_id names a file by its size and the FNV-1a hash of its bytes (computed here by the
// algorithm's definition, byte by byte); a file that cannot be read has no id.
TEST(Files, ContentsIdIsSizeAndFnv1aOfTheBytes) {
  TempDir t;
  const std::string path = (t.path / "id.bin").string();
  std::string bytes;
  for (int i = 0; i < 70000; ++i) bytes.push_back(static_cast<char>((i * 131) % 251));
  std::ofstream(path, std::ios::binary) << bytes;
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  EXPECT_EQ(ridge::files::contents_id(path), "70000 bytes, fnv1a " + std::string(hex));
  std::filesystem::remove(path);
  EXPECT_EQ(ridge::files::contents_id(path), "");
  EXPECT_EQ(ridge::files::contents_id(t.path.string()), "");  // a folder
}
