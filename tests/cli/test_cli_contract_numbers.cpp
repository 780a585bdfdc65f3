// Issue 20: what tools/hostile.py found in the analyzer, bench, probe, report and memory commands,
// run through the real binary. Every number is decimal, finite, in range, or refused (exit 2, one
// line on stderr naming the flag the user typed); an analytic command refuses a model it cannot
// hold before allocating; an output never overwrites an input, never blocks on a FIFO, and a name
// the file system cannot hold is refused before the run.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "run.hpp"

namespace {

namespace fs = std::filesystem;
using ridge::test::run;
using ridge::test::RunResult;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("ridge_cli_numbers_" + name + "_" + std::to_string(::getpid()))) {
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

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Exit 2, nothing on stdout, exactly one line on stderr, starting "ridge: " and naming `flag`.
void expect_refused(const RunResult& r, const std::string& flag) {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  EXPECT_EQ(r.err.rfind("ridge: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(flag), std::string::npos) << "does not name " << flag << ": " << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
}

// A quoted shell word.
std::string q(const std::string& s) {
  return "'" + s + "'";
}

const char* kBench = "bench stream --quick --no-progress --set n=4K --set kernel=copy --iters 1 --warmup 0 ";

// ---------------------------------------------------------------- numbers

TEST(CliContractNumbers, FloatOptionsRefuseNanInfHexJunkAndEmpty) {
  const std::vector<std::string> bad = {"nan", "inf", "-inf", "1e400", "0x10",
                                        "4x",  "abc", "''",   "NaN",   "Infinity"};
  for (const auto& v : bad) {
    SCOPED_TRACE(v);
    expect_refused(run(std::string(kBench) + "--min-time " + v), "--min-time");
    expect_refused(run(std::string(kBench) + "--max-time " + v), "--max-time");
    expect_refused(run("roofline elementwise --flops-per-element " + v), "--flops-per-element");
    expect_refused(run("roofline ddp --link-gbps " + v), "--link-gbps");
    expect_refused(run("roofline ddp --link-latency-us " + v), "--link-latency-us");
    expect_refused(run("roofline ddp --buckets " + (v == "''" ? std::string("1,,") : v)), "--buckets");
    expect_refused(run("probe --quick --max-seconds " + v), "--max-seconds");
  }
}

TEST(CliContractNumbers, BenchTimesAreBoundedByAnHour) {
  for (const char* v : {"99999999999999999999", "1e9", "3601", "-1"}) {
    SCOPED_TRACE(v);
    expect_refused(run(std::string(kBench) + "--min-time " + v), "--min-time");
    expect_refused(run(std::string(kBench) + "--max-time " + v), "--max-time");
  }
}

// One rule for every integer (ridge/core/numbers.hpp): "010" is ten (a leading zero is decimal, as strtol in
// base 10 and Python's int() read it; CLI11 alone would read octal 8), "+10" is ten, and "1e1" is not an
// integer. Before, some options read "010" as ten, others refused it, and the sizes took "1e1".
TEST(CliContractNumbers, OneSpellingOneAnswerOnEveryIntegerOption) {
  const std::vector<std::pair<std::string, std::string>> sized = {
      {"roofline elementwise --json --inputs ", "--inputs"},
      {"roofline matmul --json --b ", "--b"},
      {"roofline ddp --size tiny --json --ranks ", "--ranks"},
      {"bench stream --quick --no-progress --set kernel=copy --iters 1 --warmup 0 --json --set n=",
       "--set n"}};
  for (const auto& [args, flag] : sized) {
    SCOPED_TRACE(args);
    const auto ten = run(args + "10");
    ASSERT_EQ(ten.code, 0) << ten.err;
    for (const char* v : {"010", "+10", "0010"}) {
      const auto r = run(args + v);
      EXPECT_EQ(r.code, 0) << v << ": " << r.err;
      if (flag != "--set n") {  // bench rows carry their timings
        EXPECT_EQ(r.out, ten.out) << v;
      }
    }
    for (const char* v : {"1e1", "0x0a", "10.0"}) expect_refused(run(args + v), flag);
  }
  TempDir t("octal");
  const std::string snap = t / "snap.json";
  ASSERT_EQ(run("bench trace-overhead --quick --no-progress --set calls=10 --memory " + q(snap)).code, 0);
  const auto top = run("memory show " + q(snap) + " --top 2");
  ASSERT_EQ(top.code, 0) << top.err;
  EXPECT_EQ(run("memory show " + q(snap) + " --top 02").out, top.out);
  EXPECT_EQ(run("memory show " + q(snap) + " --top +2").out, top.out);
  expect_refused(run("memory show " + q(snap) + " --top 1e1"), "--top");
  // Options whose run is long: "01" passes their parser and the run stops at a later error, about another
  // flag; "1e1" is refused naming theirs.
  const std::vector<std::pair<std::string, std::string>> parsed = {
      {"probe --quick -o /proc/ridge-no-such-dir/x.json --trials ", "--trials"},
      {"probe --quick -o /proc/ridge-no-such-dir/x.json --threads ", "--threads"},
      {"bench stream --quick --no-progress --set n=4K --set kernel=copy --set nn=1 --iters ", "--iters"},
      {"bench model --quick --no-torch --set bogus=1 --vocab ", "--vocab"},
      {"bench decode --quick --no-llama --no-torch --set bogus=1 --steps ", "--steps"}};
  for (const auto& [args, flag] : parsed) {
    SCOPED_TRACE(args);
    for (const char* v : {"01", "+1", "001"}) {
      const auto r = run(args + v);
      EXPECT_EQ(r.code, 2) << v;
      EXPECT_EQ(r.err.find(flag), std::string::npos) << v << ": " << r.err;
    }
    expect_refused(run(args + "1e1"), flag);
  }
}

TEST(CliContractNumbers, NegativeHexAndHugeCountsAreRefused) {
  for (const char* v : {"-1", "0x10", "99999999999999999999"}) {
    SCOPED_TRACE(v);
    TempDir t("top");
    const std::string snap = t / "snap.json";
    ASSERT_EQ(run("bench trace-overhead --quick --no-progress --set calls=10 --memory " + q(snap)).code, 0);
    expect_refused(run("memory show " + q(snap) + " --top " + v), "--top");
    expect_refused(run("bench model --quick --no-torch --vocab " + std::string(v)), "--vocab");
    expect_refused(run("probe --quick --trials " + std::string(v)), "--trials");
  }
  for (const char* v : {"0", "99999999999999999999", "9223372036854775808"})
    expect_refused(run(std::string(kBench) + "--memory-entries " + v), "--memory-entries");
}

// ---------------------------------------------------------------- sizes before allocation

// `roofline ddp --layers 1000000000` allocated until the kernel killed it (24 GB): the timeline
// lists every layer's gradients, so a layer count past any model's is refused first. Under a 4 GB
// address-space limit an allocation of that size would fail (exit 1, "out of memory").
TEST(CliContractNumbers, RooflineDdpRefusesAHugeLayerCountBeforeAllocating) {
  // A 4 GB address-space limit makes an allocation past it fail at once. AddressSanitizer reserves
  // terabytes of shadow memory up front, so under it the limit is left off (the refusals still hold).
#if defined(__SANITIZE_ADDRESS__)
  const std::string ulimit;
#else
  const std::string ulimit = "ulimit -v 4000000; ";
#endif
  const std::string limited = ulimit + std::string(RIDGE_BINARY) + " roofline ddp ";
  for (const char* v : {"1000000000", "4097", "1099511627776"}) {
    SCOPED_TRACE(v);
    expect_refused(ridge::test::run_shell(limited + "--layers " + v), "--layers");
  }
  // The largest accepted count runs in the same limit; the analytic model command never allocated.
  const auto most = ridge::test::run_shell(limited + "--layers 4096 --json");
  EXPECT_EQ(most.code, 0) << most.err;
  const auto model = ridge::test::run_shell(ulimit + std::string(RIDGE_BINARY) +
                                            " roofline model --layers 1000000000 --brief");
  EXPECT_EQ(model.code, 0) << model.err;
}

// bench model refused a case larger than memory only in the allocator (exit 1, "out of memory"),
// or ran for minutes: now before anything is allocated, naming the --set axes.
TEST(CliContractNumbers, BenchModelRefusesACaseLargerThanMemoryFirst) {
  for (const char* axes : {"--set batch=4294967296", "--set layers=4294967296", "--set d_ff=4294967296"}) {
    SCOPED_TRACE(axes);
    expect_refused(
        run(std::string("bench model --quick --no-torch --no-progress --set size=tiny --set context=16 "
                        "--set pass=forward --set precision=fp32 ") +
            axes),
        "--set");
  }
}

// ---------------------------------------------------------------- messages name the flag

TEST(CliContractNumbers, AnalyzerMessagesNameTheFlagNotTheLibraryArgument) {
  TempDir t("names");
  const std::string dir = t / "adir";
  fs::create_directories(dir);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"roofline matmul --dtype bogus", "--dtype"},
      {"roofline matmul --x-dtype bogus", "--x-dtype"},
      {"roofline matmul --w-dtype 1", "--w-dtype"},
      {"roofline matmul --out-dtype 1", "--out-dtype"},
      {"roofline fp8-gemm --in-dtype 1", "--in-dtype"},
      {"roofline fp8-gemm --in-dtype bf16", "--in-dtype"},
      {"roofline matmul --level l9", "--level"},
      {"roofline critical-batch --link 1", "--link"},
      {"roofline matmul --hw " + q(dir), "--hw"},
      {"roofline split-matmul --d 1", "--d"},
      {"roofline attention --batch 758306549625", "--batch"},
      {"roofline attention --causal --seq 8 --seq-kv 4", "--seq"},
      {"roofline model --size 1", "--size"},
      {"roofline model --precision 1", "--precision"},
      {"roofline model --attention 1", "--attention"},
      {"roofline model --context 4294967296", "--context"},
      {"roofline model --level l9", "--level"},
      {"roofline model --hw " + q(dir), "--hw"},
      {"roofline ddp --d-model 1", "--d-model"},
      {"roofline ddp --hw 1", "--hw"},
      {"roofline ddp --level l9", "--level"},
      {"report --hw " + q(dir) + " --no-measure", "--hw"},
      {"report --this " + q(dir) + " --no-measure", "--this"},
      {"hw show " + q(dir), "chip"},
      {"bench attention --quick --no-torch --no-math --set head_dim=1", "head_dim"},
      {"bench gemm-dense --quick --set out=bogus", "--set out"},
  };
  for (const auto& [args, flag] : cases) {
    SCOPED_TRACE(args);
    expect_refused(run(args), flag);
  }
}

// ---------------------------------------------------------------- output files

// --trace and --memory naming an input of the same benchmark (--grid-file, --shapes), in any
// spelling: refused before the run, the input byte for byte as it was.
TEST(CliContractNumbers, BenchOutputNamingAnInputIsRefusedAndTheInputKept) {
  TempDir t("inputs");
  const std::string grid = t.file("grid.json", R"({"n": ["4K"], "kernel": ["copy"]})");
  const std::string shapes =
      t.file("shapes.json", R"({"dense": [{"name": "t", "m": 16, "n": 16, "k": 128}]})");
  fs::create_directories(t.path / "sub");
  fs::create_symlink(grid, t / "link.json");
  const std::string before = slurp(grid), shapes_before = slurp(shapes);
  const std::string stream = "bench stream --quick --no-progress --iters 1 --warmup 0 --grid-file " + q(grid);
  for (const char* flag : {"--trace", "--memory"})
    for (const std::string& spelling : {grid, t / "sub/../grid.json", t / "link.json"}) {
      SCOPED_TRACE(std::string(flag) + " " + spelling);
      expect_refused(run(stream + " " + flag + " " + q(spelling)), flag);
      EXPECT_EQ(slurp(grid), before);
    }
  expect_refused(run("bench gemm --quick --no-progress --iters 1 --warmup 0 --set set=dense --set dtype=fp32 "
                     "--set peer=0 --shapes " +
                     q(shapes) + " --trace " + q(shapes)),
                 "--trace");
  EXPECT_EQ(slurp(shapes), shapes_before);
}

// A name longer than NAME_MAX was found only when the output was written, after the run (and its
// lines on stderr); a FIFO nobody reads blocked the write forever.
TEST(CliContractNumbers, UnwritableOutputNamesAreRefusedBeforeTheRun) {
  TempDir t("outputs");
  const std::string long_name = t / std::string(300, 'x');
  expect_refused(run(std::string(kBench) + "--trace " + q(long_name)), "--trace");
  expect_refused(run(std::string(kBench) + "--memory " + q(long_name)), "--memory");
  expect_refused(run("probe --quick --threads 1 --max-seconds 0.1 --max-bytes 1MiB -o " + q(long_name)),
                 "-o");
  const std::string chip = t / "chip.json";
  ASSERT_EQ(run("hw show h100 --json > " + q(chip)).code, 0);
  expect_refused(run("roofline plot --hw " + q(chip) + " --out " + q(long_name)), "--out");
  const std::string fifo = t / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_refused(
      ridge::test::run_shell("timeout 60 " + std::string(RIDGE_BINARY) + " " + kBench + "--trace " + q(fifo)),
      "--trace");
  expect_refused(
      ridge::test::run_shell("timeout 60 " + std::string(RIDGE_BINARY) +
                             " probe --quick --threads 1 --max-seconds 0.1 --max-bytes 1MiB -o " + q(fifo)),
      "-o");
}

// `ridge probe -o NAME` with no folder in NAME failed ("cannot create folder : No such file or
// directory"); a folder that does not exist is made, one that is a file is refused.
TEST(CliContractNumbers, ProbeWritesABareFileName) {
  TempDir t("probe");
  const auto r =
      ridge::test::run_shell("cd " + q(t.path.string()) + " && " + RIDGE_BINARY +
                             " probe --quick --threads 1 --max-seconds 0.1 --max-bytes 1MiB -o p.json");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_regular_file(t.path / "p.json"));
  const std::string file = t.file("a.txt", "keep");
  expect_refused(
      run("probe --quick --threads 1 --max-seconds 0.1 --max-bytes 1MiB -o " + q(file + "/p.json")), "-o");
  EXPECT_EQ(slurp(file), "keep");
}

}  // namespace
