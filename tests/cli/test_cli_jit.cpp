// `ridge jit list` and `ridge jit clear` on the real binary, over a cache made by jit::get in this
// process; a bad RIDGE_JIT is the one-line error of every knob.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../common/tmpdir.hpp"
#include "ridge/core.hpp"
#include "ridge/jit.hpp"
#include "run.hpp"

namespace {

namespace fs = std::filesystem;
using namespace ridge;
using test::run;
using test::RunResult;
using test::TempDir;

std::string env_for(const fs::path& cache) {
  return "RIDGE_JIT_CACHE_DIR=" + cache.string();
}

TEST(CliJit, ListOfAnEmptyCache) {
  TempDir t;
  const fs::path cache = t.path() / "jit";
  RunResult r = run("jit list", env_for(cache));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("cache     " + cache.string() + " (0 entries)"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");
  EXPECT_FALSE(fs::exists(cache)) << "listing creates nothing";
  r = run("jit list --json", env_for(cache));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("cache_dir"), cache.string());
  EXPECT_TRUE(j.at("entries").empty());
  EXPECT_EQ(j.at("enabled"), false);
}

TEST(CliJit, ListThenClearOneEntry) {
  jit::Settings s;
  s.compiler = "c++";
  if (jit::compiler_signature(s).empty()) GTEST_SKIP() << "no C++ compiler ('c++' on PATH)";
  TempDir t;
  s.enabled = true;
  s.cache_dir = (t.path() / "jit").string();
  ASSERT_NE(jit::get({"cli_jit_test", "extern \"C\" int f(int x) { return x + 1; }\n", {}, "f"}, s), nullptr);
  RunResult r = run("jit list", env_for(s.cache_dir));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("(1 entry)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cli_jit_test"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("valid"), std::string::npos) << r.out;
  r = run("jit list --json", env_for(s.cache_dir));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.at("entries").size(), 1u);
  EXPECT_EQ(j["entries"][0].at("name"), "cli_jit_test");
  EXPECT_EQ(j["entries"][0].at("valid"), true) << j.dump();
  EXPECT_EQ(j["entries"][0].at("key").get<std::string>().size(), 64u);
  r = run("jit clear", env_for(s.cache_dir));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "removed 1 entry from " + s.cache_dir + "\n");
  EXPECT_TRUE(fs::is_empty(s.cache_dir));
}

TEST(CliJit, BadSwitchOrCacheIsOneLine) {
  TempDir t;
  RunResult r = run("jit list", "RIDGE_JIT=yes " + env_for(t.path() / "jit"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("ridge: RIDGE_JIT: 'yes' is not a decimal integer", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // A cache path that is a file.
  std::ofstream(t.path() / "file") << "x";
  r = run("jit clear", env_for(t.path() / "file"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("ridge: RIDGE_JIT_CACHE_DIR: cache dir '", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace
