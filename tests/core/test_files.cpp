// files::write_text: nothing the user had is lost, links and devices are written through.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

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
