// Bad input files and flag values from issue 10, each run through the real binary: one line naming
// the argument, exit 2, never a hang (FIFOs), a crash (deep nesting) or a silently wrong answer.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "run.hpp"
#include "core/json.hpp"

namespace {

namespace fs = std::filesystem;
using ridge::test::run;
using ridge::test::RunResult;

// A temp folder for one test, removed at the end.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("ridge_cli_input_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name, const std::string& content) const {
    std::ofstream(path / name, std::ios::binary) << content;
    return (path / name).string();
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

void expect_error(const RunResult& r, const std::string& must_mention) {
  EXPECT_EQ(r.code, 2) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  EXPECT_EQ(r.err.rfind("ridge: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(must_mention), std::string::npos) << "expected '" << must_mention << "' in: " << r.err;
  EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << r.err;
}

std::string chip_json(const std::string& memory, const std::string& bf16 = "1e15") {
  return R"({"id": "t", "name": "T", "kind": "gpu", "peak_flops": {"bf16": {"value": )" + bf16 +
         R"(, "source": "s"}}, "memory": [)" + memory + "]}";
}
std::string level(const std::string& l, const std::string& bw) {
  return R"({"level": ")" + l + R"(", "bandwidth": {"value": )" + bw + R"(, "source": "s"}})";
}

std::string snapshot(const std::string& events, const std::string& extra = "") {
  return R"({"format": "ridge-memory-snapshot", "version": 1, "tags": [], )" + extra + R"("events": [)" +
         events + "]}";
}
std::string event(double t, const char* action, const char* addr, const std::string& bytes,
                  const std::string& tag) {
  std::ostringstream s;
  s << R"({"t_us": )" << t << R"(, "action": ")" << action << R"(", "address": ")" << addr
    << R"(", "bytes": )" << bytes << R"(, "tag": ")" << tag << R"("})";
  return s.str();
}

TEST(CliInput, NonRegularFilesAreRefusedWithoutBlocking) {
  TempDir d("special");
  const std::string fifo = d / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const std::string dir = d.path.string();
  // Each of these blocked forever on the FIFO (or read /dev/zero until memory ran out).
  expect_error(run("hw show " + fifo), "FIFO");
  expect_error(run("hw show /dev/zero"), "device");
  expect_error(run("roofline matmul --hw " + fifo), "FIFO");
  expect_error(run("memory show " + fifo), "FIFO");
  expect_error(run("memory show " + dir), "directory");
  expect_error(run("roofline plot --hw h100 --results " + fifo), "--results");
  expect_error(run("bench gemm --shapes " + fifo), "--shapes");
  expect_error(run("bench gemm --shapes " + dir), "directory");
  expect_error(run("bench stream --grid-file " + fifo), "--grid-file");
  expect_error(run("bench stream --grid-file " + dir), "directory");
  expect_error(run("report --this " + fifo + " --no-measure"), "FIFO");
  expect_error(run("memory show " + d / "missing.json"), "no such file");
}

TEST(CliInput, DeepNestingIsOneLineNotACrash) {
  TempDir d("deep");
  const auto f = d.file("deep.json", std::string(60000, '[') + std::string(60000, ']'));
  expect_error(run("hw show " + f + " --json"), "nested deeper");
  expect_error(run("report --this " + f + " --json --no-measure"), "nested deeper");
  expect_error(run("memory show " + f), "nested deeper");
}

TEST(CliInput, JsonErrorsSayWhereAndWhat) {
  TempDir d("json");
  const auto big = d.file("big.json", chip_json(level("hbm", "1e400")));
  expect_error(run("hw show " + big), "1e400");
  const auto r = run("hw show " + big);
  EXPECT_NE(r.err.find("line 1"), std::string::npos) << r.err;
  const auto bad = d.file("bad.json", "{\n  \"id\": \"x\",\n  oops\n}");
  const auto rb = run("hw show " + bad);
  expect_error(rb, "line 3, column 3");
  const auto grid = d.file("grid.json", "{\"n\": [1e400]}");
  expect_error(run("bench stream --grid-file " + grid), "out of range");
  const auto probe_home = d.path / "home";
  fs::create_directories(probe_home);
  std::ofstream(probe_home / "this.json") << "{\"id\": 1e400}";
  expect_error(run("hw show this", "RIDGE_HOME=" + probe_home.string()), "1e400");
}

TEST(CliInput, ChipFileLevelsMustBeOrderedDistinctAndPlausible) {
  TempDir d("chip");
  // l1 first once became the "outermost" level: ridge point 9.89 instead of 295 FLOP/B.
  expect_error(
      run("hw show " + d.file("order.json", chip_json(level("l1", "1e14") + "," + level("dram", "3e12")))),
      "memory[1].level");
  expect_error(
      run("hw show " + d.file("dup.json", chip_json(level("l2", "1e13") + "," + level("l2", "1e13")))),
      "distinct");
  expect_error(run("hw show " + d.file("tiny.json", chip_json(level("hbm", "3e12"), "5e-324"))),
               "peak_flops.bf16.value");
  const auto ok = run("hw show " +
                      d.file("ok.json", chip_json(level("dram", "1e11") + "," + level("l3", "1e12") + "," +
                                                  level("l1", "1e13"))) +
                      " --json");
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(nlohmann::json::parse(ok.out)["memory"].size(), 3u);
}

TEST(CliInput, MemoryShowRefusesImpossibleSnapshots) {
  TempDir d("snap");
  const std::string big = "4611686018427387904";  // 2^62
  expect_error(run("memory show " + d.file("huge.json", snapshot(event(1, "alloc", "0x1", big, "a") + "," +
                                                                 event(2, "alloc", "0x2", big, "a") + "," +
                                                                 event(3, "alloc", "0x3", big, "a")))),
               "events[0]");
  expect_error(run("memory show " + d.file("twice.json", snapshot(event(1, "alloc", "0x1", "100", "a") + "," +
                                                                  event(2, "alloc", "0x1", "100", "a") + "," +
                                                                  event(3, "free", "0x1", "0", "a")))),
               "again while it is still live");
  expect_error(run("memory show " + d.file("unknown.json", snapshot(event(1, "free", "0x9", "0", "a")))),
               "not live");
  expect_error(run("memory show " + d.file("dur.json", snapshot(event(1, "alloc", "0x1", "1", "a"),
                                                                R"("duration_us": 1e300, )"))),
               "duration_us");
  expect_error(run("memory show " +
                   d.file("max.json", snapshot(event(1, "alloc", "0x1", "18446744073709551615", "a")))),
               "bytes");
  expect_error(run("memory show " + d.file("type.json", snapshot(event(1, "alloc", "0x1", "\"100\"", "a")))),
               "'bytes' must be an integer");
  // With entries dropped, a free whose allocation was dropped is expected and ignored.
  const auto ok =
      run("memory show --json " +
          d.file("dropped.json", snapshot(event(1, "alloc", "0x1", "100", "a") + std::string(",") +
                                              event(2, "free", "0x9", "0", "a"),
                                          R"("dropped": 1, )")));
  ASSERT_EQ(ok.code, 0) << ok.err;
  const auto j = nlohmann::json::parse(ok.out);
  EXPECT_EQ(j["peak_bytes"], 100);
  EXPECT_EQ(j["end_bytes"], 100);
}

// 20,000 distinct tags, each allocation a new peak: the by-tag table at the peak must match an
// independent count (every tag at 100 B), and the run is linear (no timing asserted; the suite's
// timeout bounds it).
TEST(CliInput, MemoryShowManyTagsAtThePeak) {
  TempDir d("tags");
  std::string events;
  for (int i = 0; i < 20000; ++i) {
    char addr[32];
    std::snprintf(addr, sizeof addr, "0x%x", i + 1);
    events += std::string(i ? "," : "") + event(i, "alloc", addr, "100", "tag" + std::to_string(i));
  }
  events += std::string(",") + event(20001, "free", "0x1", "0", "tag0");
  const auto r = run("memory show --json " + d.file("tags.json", snapshot(events)));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["peak_bytes"], 2000000);
  EXPECT_EQ(j["live_at_peak"].size(), 20000u);
  EXPECT_EQ(j["live_at_peak"]["tag19999"], 100);
  EXPECT_EQ(j["live_at_end"].size(), 19999u);
  EXPECT_FALSE(j["live_at_end"].contains("tag0"));
}

TEST(CliInput, ResultsFilesWithNoRowsOrWrongTypes) {
  TempDir d("results");
  expect_error(run("roofline plot --hw h100 --results " + d.path.string()), "directory");
  expect_error(run("roofline plot --hw h100 --results " + d.file("empty.jsonl", "\n\n")),
               "no benchmark rows");
  expect_error(run("roofline plot --hw h100 --results " + d.file("type.jsonl", R"({"gflops": "fast"})"
                                                                               "\n")),
               "'gflops' must be a number");
  expect_error(run("roofline plot --hw h100 --results " + d.file("big.jsonl", R"({"gflops": 1e400})"
                                                                              "\n")),
               "line 1");
}

TEST(CliInput, ReportKeepsBothColumnsWhenIdsMatch) {
  const auto r = run("report --this " + std::string(RIDGE_SOURCE_DIR) +
                     "/hardware/h100.json --hw h100 --no-measure --json --out /dev/null/x");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const std::string key = j["this_key"];
  EXPECT_NE(key, "h100");
  const auto& row = j["shapes"][0];
  ASSERT_TRUE(row.contains(key));
  ASSERT_TRUE(row.contains("h100"));
  // The same chip twice: both columns carry the same bound.
  EXPECT_GT(row["h100"]["t_lower_s"].get<double>(), 0);
  EXPECT_EQ(row[key]["t_lower_s"], row["h100"]["t_lower_s"]);
}

TEST(CliInput, FlagsOnceAcceptedAndIgnored) {
  expect_error(run("roofline matmul --link bogus"), "--link");
  expect_error(run("roofline send --chips -1"), "--chips");
  expect_error(run("bench stream --set n=4k --threads -1"), "--threads");
  expect_error(run("bench stream --set n=4k --threads 0x10"), "--threads");
  expect_error(run("bench stream --set n=4k --iters -1"), "--iters");
  expect_error(run("bench stream --set n=4k --warmup -1"), "--warmup");
  expect_error(run("bench stream --set n=4k --memory-entries -1"), "--memory-entries");
  expect_error(run("probe --quick --max-seconds nan"), "--max-seconds");
  expect_error(run("probe --quick -o ''"), "--output");
  expect_error(run("bench gemm --dtype ''"), "--dtype");
  expect_error(run("bench gemm-dense --set peer=maybe"), "peer");
  expect_error(run("bench gemm --set peer=maybe --set set=decode"), "peer");
}

TEST(CliInput, UnknownSubcommandsAreNamed) {
  const auto r = run("roofline bogus");
  expect_error(r, "'bogus' is not a ridge roofline subcommand");
  EXPECT_NE(r.err.find("matmul"), std::string::npos) << r.err;
  const auto b = run("bench bogus");
  expect_error(b, "'bogus' is not a ridge bench subcommand");
  EXPECT_NE(b.err.find("gemm-dense"), std::string::npos) << b.err;
}

TEST(CliInput, MemoryPlotChecksTheOutputPathFirst) {
  TempDir d("mplot");
  const auto snap = d.file("s.json", snapshot(event(1, "alloc", "0x1", "100", "a")));
  expect_error(run("memory plot " + snap + " -o " + d / "no/such/dir/x.png"), "does not exist");
  expect_error(run("memory plot " + snap + " -o " + d / "x.txt"), ".png");
  // A RIDGE_TOOLS_DIR whose name is past NAME_MAX is one line naming it, not an internal error (the
  // hostile harness, 2026-11-28: filesystem::exists threw).
  const auto r =
      run("memory plot " + snap + " -o " + d / "x.png", "RIDGE_TOOLS_DIR=" + d / std::string(300, 'x'));
  expect_error(r, "RIDGE_TOOLS_DIR");
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
}

// --python names a program, never a shell command line: "echo X; false" is not run by a shell.
TEST(CliInput, PythonIsStartedWithoutAShell) {
  TempDir d("python");
  const std::string marker = d / "ran";
  const auto r =
      run("bench attention --no-math --no-progress --iters 1 --warmup 0 --set seq=64 --set head_dim=64 "
          "--set pass=forward --set dtype=fp32 --set causal=false --json --python 'touch " +
          marker + "; false'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists(marker)) << "--python was run by a shell";
  EXPECT_NE(r.out.find("cannot run"), std::string::npos) << r.out;
}

TEST(CliInput, CorruptProbeCacheIsReported) {
  TempDir d("cache");
  const auto home = d.path / "home";
  fs::create_directories(home);
  std::ofstream(home / "this.json") << "{broken";
  const auto r =
      run("bench gemm-dense --no-progress --iters 1 --warmup 0 --set m=8 --set n=8 --set k=8 "
          "--set dtype=fp32 --set peer=0 --json",
          "RIDGE_HOME=" + home.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("warning"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find((home / "this.json").string()), std::string::npos) << r.err;
}

TEST(CliInput, ShapesFileMayOmitSets) {
  TempDir d("shapes");
  const auto f = d.file("shapes.json", R"({"decode": [{"m": 1, "n": 16, "k": 64}]})");
  const auto r = run("bench gemm --shapes " + f +
                     " --set set=decode --dtype fp32 --set peer=0 --iters 1 --warmup 0 "
                     "--no-progress --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto row = nlohmann::json::parse(r.out.substr(0, r.out.find('\n')));
  EXPECT_EQ(row["case"]["n"], 16);
  EXPECT_EQ(run("bench gemm --shapes " + f +
                " --set set=dense --dtype fp32 --set peer=0 --iters 1 --no-progress "
                "--json")
                .code,
            0);
}

}  // namespace
