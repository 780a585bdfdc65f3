// Bad input from issue 10, run through the real binary: environment knobs, sizes whose products
// overflow or exceed the machine, thread counts, and output files that must not lose what the
// user had. Each case: exit 2, nothing on stdout, one line on stderr naming the argument.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "ridge/core.hpp"
#include "run.hpp"

namespace {

namespace fs = std::filesystem;
using namespace ridge;
using test::run;
using test::RunResult;

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

void expect_one_line_error(const RunResult& r, const std::string& must_mention) {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  const auto l = lines(r.err);
  ASSERT_EQ(l.size(), 1u) << r.err;
  EXPECT_EQ(l[0].rfind("ridge: ", 0), 0u) << l[0];
  EXPECT_NE(l[0].find(must_mention), std::string::npos) << l[0];
}

// ---------------------------------------------------------------- environment knobs

TEST(CliInputContract, BadAttentionBlockIsOneLineNamingTheVariable) {
  for (const char* v : {"0", "-1", "abc", "16x", "99999999999", "17"}) {
    SCOPED_TRACE(v);
    for (const char* var : {"RIDGE_ATTENTION_BLOCK_Q", "RIDGE_ATTENTION_BLOCK_K"}) {
      const std::string env = std::string(var) + "=" + v;
      expect_one_line_error(
          run("bench attention --quick --no-torch --no-math --iters 1 --warmup 0 --set seq=64", env), var);
      expect_one_line_error(run("info", env), var);  // checked up front, whatever the command
    }
  }
}

TEST(CliInputContract, BadGemmKnobIsOneLineNamingTheVariable) {
  for (const char* var : {"RIDGE_GEMM_KC", "RIDGE_GEMM_MC", "RIDGE_GEMM_NC"})
    for (const char* v : {"0", "-1", "abc", "16x", "99999999999"})
      expect_one_line_error(run("info", std::string(var) + "=" + v), var);
  for (const char* var : {"RIDGE_GEMM_NO_NARROW", "RIDGE_GEMM_SCALAR_PACK"})
    expect_one_line_error(run("info", std::string(var) + "=yes"), var);
}

TEST(CliInputContract, BadOmpNumThreadsIsOneLine) {
  const std::string args = "bench stream --quick --set n=4k --iters 1 --warmup 0";
  expect_one_line_error(run(args, "OMP_NUM_THREADS=100000"), "OMP_NUM_THREADS");
  expect_one_line_error(run(args, "OMP_NUM_THREADS=1025"), "1 .. 1024");
}

// libgomp reads OMP_NUM_THREADS in its constructor, before main, and warned about these on stderr
// (a blank line and "libgomp: Invalid value ...") before ridge's line; "2,junk" and "4,0" ran with a
// warning and exit 0. ridge takes them out of the environment first (env::before_openmp, run from the
// executable's .preinit_array): one line, ridge's, naming the variable and what is accepted.
TEST(CliInputContract, BadOmpNumThreadsIsRidgesLineAloneBeforeOpenMPWarns) {
  for (const char* v : {"0", "-1", "junk", "abc", "1e3", "12345678901234567890", "2,junk", "4,0", "2,"}) {
    SCOPED_TRACE(v);
    for (const char* args : {"info", "bench stream --quick --set n=4k --iters 1 --warmup 0"}) {
      const RunResult r = run(args, std::string("OMP_NUM_THREADS=") + v);
      expect_one_line_error(r, "ridge: OMP_NUM_THREADS: '" + std::string(v) + "' is ");
      EXPECT_NE(r.err.find("1 .. 1024, or a comma-separated list"), std::string::npos) << r.err;
    }
  }
  // Empty is unset for ridge; libgomp warned about it too. A list ridge accepts runs, silently.
  for (const char* v : {"", "4,2"}) {
    const RunResult r = run("info", std::string("OMP_NUM_THREADS=") + v);
    EXPECT_EQ(r.code, 0) << v << ": " << r.err;
    EXPECT_EQ(r.err, "") << v;
  }
  const RunResult r = run("info", "OMP_NUM_THREADS=3,2");
  EXPECT_NE(r.out.find("ridge uses 3 threads"), std::string::npos) << r.out;
}

TEST(CliInputContract, GoodKnobsStillRun) {
  const RunResult r =
      run("bench attention --no-torch --no-math --iters 1 --warmup 0 --set seq=64 --set head_dim=64 "
          "--set pass=forward --threads 1",
          "RIDGE_ATTENTION_BLOCK_Q=32 RIDGE_ATTENTION_BLOCK_K=48 OMP_NUM_THREADS=2");
  EXPECT_EQ(r.code, 0) << r.err;
}

}  // namespace

namespace {

// ---------------------------------------------------------------- crashes (issue 10, 1-4 and 6)

TEST(CliInputContract, AttentionSizeProductThatWrapsIsOneLine) {
  const std::string args = "bench attention --no-torch --no-math --iters 1 --threads 1 --set pass=forward ";
  // Each value passes its own limit; the product passes 2^64.
  expect_one_line_error(
      run(args + "--set batch=16777216 --set heads=16777216 --set seq=65536 --set head_dim=64"),
      "--set batch*heads*seq*head_dim");
  // A product that fits 64 bits but not this machine: held against its memory before allocating.
  const RunResult r = run(args + "--set batch=1024 --set heads=64 --set seq=65536 --set head_dim=64");
  expect_one_line_error(r, "--set batch*heads*seq*head_dim");
  EXPECT_NE(r.err.find("memory this machine has available"), std::string::npos) << r.err;
}

TEST(CliInputContract, CountSuffixIsAppliedBeforeTheRangeCheck) {
  expect_one_line_error(
      run("bench gemm-dense --set k=4294967296G --set m=1 --set n=1 --set dtype=fp32 --set peer=0"),
      "--set k");
  expect_one_line_error(run("bench gemm-dense --set k=1G --set m=1G --set n=1 --set dtype=fp32 --set peer=0"),
                        "--set m=1073741824 n=1 k=1073741824");
}

TEST(CliInputContract, HugeKInAShapesFileIsOneLine) {
  const fs::path f = fs::temp_directory_path() / ("ridge_shapes_" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream o(f);
    o << R"({"dense": [{"m": 1, "n": 1, "k": 4611686018427387904}], "grouped_contiguous": [],
             "grouped_masked": [], "decode": []})";
  }
  expect_one_line_error(run("bench gemm --shapes " + f.string() + " --dtype fp32 --set set=dense"), "'k'");
  fs::remove(f);
}

TEST(CliInputContract, ProbeMaxBytesTooSmallOrBeyondMemoryIsOneLine) {
  const fs::path out = fs::temp_directory_path() / ("ridge_probe_" + std::to_string(::getpid()) + ".json");
  for (const char* v : {"1", "8KiB", "1000"}) {
    const RunResult r = run("probe --quick --max-bytes " + std::string(v) + " -o " + out.string());
    expect_one_line_error(r, "--max-bytes");
    EXPECT_NE(r.err.find("at least"), std::string::npos) << "names the minimum: " << r.err;
  }
  const RunResult r = run("probe --quick --max-bytes 1EiB -o " + out.string());
  expect_one_line_error(r, "--max-bytes");
  EXPECT_NE(r.err.find("memory this machine has available"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

TEST(CliInputContract, StreamBeyondMemoryIsOneLine) {
  // 2^31 doubles x 3 arrays = 48 GiB; a machine with that much free has no test to fail here.
  if (memory::available_bytes() > (int64_t{48} << 30)) GTEST_SKIP() << "this machine has 48 GiB free";
  expect_one_line_error(run("bench stream --set n=2G --iters 1"), "--set n=2147483648");
}

TEST(CliInputContract, ThreadCountBeyondTheLimitIsOneLine) {
  expect_one_line_error(run("bench stream --set n=4k --threads 100000"), "--threads");
  expect_one_line_error(run("bench stream --set n=4k --threads 1025"), "1 .. 1024");
}

}  // namespace

namespace {

// ---------------------------------------------------------------- files the user had

struct Dir {
  fs::path path = fs::temp_directory_path() / ("ridge_cli_files_" + std::to_string(::getpid()));
  Dir() { fs::create_directories(path); }
  ~Dir() { fs::remove_all(path); }
  std::string file(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

std::string slurp(const std::string& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(CliInputContract, FailedRunKeepsTheOldTraceAndSnapshot) {
  Dir d;
  const auto t = d.file("t.json", "OLD TRACE"), m = d.file("m.json", "OLD SNAPSHOT");
  for (const char* bad : {"--set kernel=bogus", "--set n=0"}) {
    expect_one_line_error(run(std::string("bench stream ") + bad + " --trace " + t + " --memory " + m),
                          "--set");
    EXPECT_EQ(slurp(t), "OLD TRACE");
    EXPECT_EQ(slurp(m), "OLD SNAPSHOT");
  }
  expect_one_line_error(run("bench attention --no-torch --set head_dim=8 --trace " + t), "head");
  EXPECT_EQ(slurp(t), "OLD TRACE");
  // A run that succeeds replaces it.
  const RunResult ok = run("bench stream --quick --set n=4k --iters 1 --no-progress --trace " + t);
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(slurp(t).find("traceEvents"), std::string::npos);
}

TEST(CliInputContract, TraceAndMemoryNamingOneFileIsAnError) {
  Dir d;
  const auto f = d.file("both.json", "KEEP");
  expect_one_line_error(
      run("bench stream --quick --set n=4k --trace " + f + " --memory " + d.path.string() + "/./both.json"),
      "--trace and --memory");
  EXPECT_EQ(slurp(f), "KEEP");
}

TEST(CliInputContract, PlotNeverWritesOverAnInput) {
  Dir d;
  const std::string chip = slurp(std::string(RIDGE_SOURCE_DIR) + "/hardware/h100.json");
  ASSERT_FALSE(chip.empty());
  const auto rows = d.file("rows.json", "{\"benchmark\": \"x\"}\n"), mine = d.file("mine.json", chip);
  const std::string base = d.path.string() + "/";
  const RunResult a = run("roofline plot --hw h100 --results " + rows + " --out " + base + "rows");
  expect_one_line_error(a, "--out");
  EXPECT_NE(a.err.find("rows.json"), std::string::npos) << a.err;
  expect_one_line_error(run("roofline plot --hw " + mine + " --out " + base + "mine"), "--out");
  expect_one_line_error(run("report --this " + mine + " --out " + base + "mine --no-measure"), "--out");
  expect_one_line_error(run("report --this " + mine + " --out " + base + "mine.png --no-measure"), "--out");
  EXPECT_EQ(slurp(rows), "{\"benchmark\": \"x\"}\n");
  EXPECT_EQ(slurp(mine), chip);
}

TEST(CliInputContract, FailedPlotKeepsTheOldSpec) {
  Dir d;
  const auto spec = d.file("p.json", "OLD SPEC");
  // A plot script that fails: the plot fails after the spec is made, and p.json stays as it was.
  d.file("plot_roofline.py", "import sys\nsys.exit('broken plot')\n");
  const RunResult r =
      run("roofline plot --hw h100 --out " + d.path.string() + "/p", "RIDGE_TOOLS_DIR=" + d.path.string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("broken plot"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(spec), "OLD SPEC");
}

}  // namespace

namespace {

// probe -o through a symlink writes its target and keeps the link; /dev/null stays a device.
TEST(CliInputContract, ProbeOutputThroughLinksAndDevices) {
  Dir d;
  const auto target = d.file("target.json", "OLD");
  const fs::path link = d.path / "link.json";
  fs::create_symlink(target, link);
  const RunResult r = run("probe --quick --max-seconds 2 --max-bytes 1MiB -o " + link.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
  EXPECT_NE(slurp(target).find("\"memory\""), std::string::npos) << slurp(target);
  const RunResult n = run("probe --quick --max-seconds 2 --max-bytes 1MiB -o /dev/null");
  ASSERT_EQ(n.code, 0) << n.err;
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null was replaced";
}

}  // namespace
