// The ranks of an MPI job agree before their first collective (distributed::agree_to_start): under
// `mpirun -np 1 ridge ... : -np 1 ridge ...` with options that differ between the ranks, and under
// `mpirun -np 2` with an error found before the agreement, the job prints exactly one `ridge:` line
// (rank 0's, or "rank R: ..." for the first rank that failed or differs) naming the option, and every
// rank exits with status 2: no hang (a timeout around every run), no MPI error, no signal. mpirun's own
// banner about the non-zero status follows; it is mpirun's, not ridge's (ridge cannot turn it off: it
// is printed by mpirun from mpirun's own settings, `mpirun -q` or OMPI_MCA_orte_execute_quiet=1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "run.hpp"

#ifdef RIDGE_HAVE_DISTRIBUTED

namespace {

namespace fs = std::filesystem;
using ridge::test::ridge_lines;
using ridge::test::RunResult;

// A hang is ended after 60 s (TERM, then KILL) and shows as status 124 or 137.
const std::string kMpirun = std::string(
                                "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
                                "ASAN_OPTIONS=detect_leaks=0 timeout -k 5 60 ") +
                            RIDGE_MPIEXEC + " --oversubscribe --bind-to none";
const std::string kRidge = std::string(" ") + RIDGE_BINARY + " ";
const std::string kTrain =
    "train --layers 1 --d-model 32 --heads 2 --d-ff 48 --vocab 64 --context 8 --batch 4 --threads 1 ";
const std::string kAllreduce = "bench allreduce --no-progress ";

// `mpirun -np 1 ridge A : -np 1 ridge B`: rank 0 runs A, rank 1 runs B.
RunResult mpmd(const std::string& a, const std::string& b) {
  return ridge::test::run_shell(kMpirun + " -np 1" + kRidge + a + " : -np 1" + kRidge + b);
}
RunResult np2(const std::string& args) {
  return ridge::test::run_shell(kMpirun + " -np 2" + kRidge + args);
}

// Status 2, and exactly one ridge line, which is `want` (or starts with it when prefix is true).
void expect_one_line(const RunResult& r, const std::string& want, bool prefix = true) {
  EXPECT_EQ(r.code, 2) << (r.code == 124 || r.code == 137 ? "a hang, ended by the timeout\n" : "") << r.err;
  const auto lines = ridge_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  if (prefix)
    EXPECT_EQ(lines[0].rfind(want, 0), 0u) << lines[0];
  else
    EXPECT_EQ(lines[0], want);
  EXPECT_EQ(r.err.find("MPI_ERR"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("signal"), std::string::npos) << r.err;
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::temp_directory_path() / name) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

}  // namespace

// Case 2 of issue 20, as reported: two sizes were MPI_ERR_TRUNCATE inside the first all-reduce.
TEST(CliDistAgree, AllreduceSizesThatDifferAreOneLineNamingTheSet) {
  const RunResult r =
      mpmd(kAllreduce + "--set size=1M --set op=allreduce", kAllreduce + "--set size=4M --set op=allreduce");
  expect_one_line(
      r,
      "ridge: rank 1: --set size: '4M' here but '1M' on rank 0 (every MPI rank must be given the same "
      "command line and data)",
      false);
  // The same sweep given in another order, or from a grid file, is the same sweep: it runs.
  TempDir dir("ridge_cli_agree_grid");
  std::ofstream(dir / "g.json") << R"({"op": "allreduce", "size": "1M"})";
  const RunResult ok = mpmd(kAllreduce + "--iters 1 --warmup 0 --json --set op=allreduce --set size=1M",
                            kAllreduce + "--iters 1 --warmup 0 --json --grid-file " + (dir / "g.json"));
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(ridge_lines(ok.err).empty()) << ok.err;
}

// A benchmark's measurement options decide how many collectives run: they must agree too.
TEST(CliDistAgree, BenchOptionsThatDifferAreOneLine) {
  expect_one_line(mpmd(kAllreduce + "--set size=1M --iters 2", kAllreduce + "--set size=1M --iters 3"),
                  "ridge: rank 1: --iters: '3' here but '2' on rank 0");
  expect_one_line(mpmd(kAllreduce + "--set size=1M --trace t.json", kAllreduce + "--set size=1M"),
                  "ridge: rank 1: --trace: not given here but 't.json' on rank 0");
  expect_one_line(mpmd("bench ddp --quick --set layers=1", "bench ddp --quick --set layers=2"),
                  "ridge: rank 1: --set layers: '2' here but '1' on rank 0");
}

// An option that makes one rank run collectives the other does not (the trace merge, the per-rank
// memory snapshot, the checkpoint gathers) or print differently: named, before any of it runs.
TEST(CliDistAgree, TrainOptionGivenToOneRankIsOneLine) {
  TempDir dir("ridge_cli_agree_train");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--trace", "--trace " + (dir / "t.json")},
      {"--memory", "--memory " + (dir / "m.json")},
      {"--checkpoint", "--checkpoint " + (dir / "c.safetensors")},
      {"--json", "--json"},
      {"--log-every", "--log-every 1"},
  };
  for (const auto& [flag, extra] : cases) {
    SCOPED_TRACE(flag);
    const RunResult r = mpmd(kTrain + "--steps 2 --shard-optimizer zero1",
                             kTrain + "--steps 2 --shard-optimizer zero1 " + extra);
    expect_one_line(r, "ridge: rank 1: " + flag + ": ");
    EXPECT_NE(r.err.find("on rank 0 (every MPI rank must be given the same command line and data)"),
              std::string::npos)
        << r.err;
  }
  EXPECT_TRUE(fs::is_empty(dir.path)) << "a rank wrote an output before the ranks agreed";
  // Each rank may use its own thread count.
  const std::string model =
      "train --layers 1 --d-model 32 --heads 2 --d-ff 48 --vocab 64 --context 8 --batch 4 ";
  const RunResult ok = mpmd(model + "--steps 1 --threads 1", model + "--steps 1 --threads 2");
  EXPECT_EQ(ok.code, 0) << ok.err;
}

// The same path holding other data on each rank's machine (here: each rank's working directory): a
// text, a checkpoint to resume. Every input is byte-identical afterwards.
TEST(CliDistAgree, DataThatDiffersUnderTheSamePathIsNamed) {
  TempDir dir("ridge_cli_agree_data");
  fs::create_directories(dir.path / "a");
  fs::create_directories(dir.path / "b");
  std::ofstream(dir / "a/text.txt") << std::string(200, 'a');
  std::ofstream(dir / "b/text.txt") << std::string(200, 'b');
  const std::string model =
      "train --layers 1 --d-model 32 --heads 2 --d-ff 48 --context 8 --batch 4 --threads 1 ";
  auto both = [&](const std::string& args) {
    return ridge::test::run_shell(kMpirun + " -np 1 -wdir " + (dir / "a") + kRidge + args +
                                  " : -np 1 -wdir " + (dir / "b") + kRidge + args);
  };
  expect_one_line(both(model + "--steps 1 --text text.txt"),
                  "ridge: rank 1: --text (contents): 200 bytes, fnv1a ");
  // Two checkpoints of the same model from other seeds, one in each directory.
  for (const auto& [sub, seed] : {std::pair{"a", "1"}, std::pair{"b", "2"}}) {
    const RunResult w = ridge::test::run(model + "--vocab 64 --steps 1 --seed " + seed + " --checkpoint " +
                                         (dir / (std::string(sub) + "/c.safetensors")));
    ASSERT_EQ(w.code, 0) << w.err;
  }
  auto bytes = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string ca = bytes(dir / "a/c.safetensors"), cb = bytes(dir / "b/c.safetensors");
  ASSERT_NE(ca, cb);
  expect_one_line(both(model + "--vocab 64 --steps 2 --resume c.safetensors"),
                  "ridge: rank 1: --resume (contents): ");
  EXPECT_EQ(bytes(dir / "a/c.safetensors"), ca);
  EXPECT_EQ(bytes(dir / "b/c.safetensors"), cb);
  EXPECT_EQ(bytes(dir / "a/text.txt"), std::string(200, 'a'));
}

TEST(CliDistAgree, CommandThatDiffersIsNamed) {
  expect_one_line(mpmd(kTrain + "--steps 1", kAllreduce + "--set size=1M"),
                  "ridge: rank 1: command: 'ridge bench allreduce' here but 'ridge train' on rank 0");
  // A command that is not an MPI one still takes part: rank 1 does not wait for it forever.
  expect_one_line(mpmd("info", kTrain + "--steps 1"),
                  "ridge: rank 1: command: 'ridge train' here but 'ridge info' on rank 0");
}

// Case 9 of issue 20: an error found before the ranks agree (a bad value, a parse error, an error in
// the checks before MPI starts) is one line for the job: rank 0's, or the first failing rank's with
// its rank; help on every rank is printed once, on one rank only is a difference.
TEST(CliDistAgree, ErrorBeforeTheAgreementIsOneLinePerJob) {
  expect_one_line(np2(kTrain + "--steps 0"),
                  "ridge: --steps: '0' is out of range (accepted: a decimal integer >= 1)");
  expect_one_line(mpmd(kTrain + "--steps 2", kTrain + "--steps 0"),
                  "ridge: rank 1: --steps: '0' is out of range (accepted: a decimal integer >= 1)");
  expect_one_line(mpmd(kTrain + "--steps 2", kTrain + "--steps 2 --bogus"),
                  "ridge: rank 1: The following argument was not expected: --bogus");
  expect_one_line(np2(kTrain + "--ddp ring"), "ridge: --ddp: mode: 'ring' is not a data-parallel mode");
  expect_one_line(np2(kAllreduce + "--set op=ring"), "ridge: bench allreduce: op 'ring'");
  expect_one_line(
      mpmd(kAllreduce + "--set size=1M", kAllreduce + "--set size=1M --iters 0"),
      "ridge: rank 1: --iters: '0' is out of range (accepted: a decimal integer 1 .. 2147483647)");
  expect_one_line(mpmd(kTrain + "--steps 2", kTrain + "--steps 2 --help"),
                  "ridge: rank 1: --help: given here but not given on rank 0");
  const RunResult help = np2(kTrain + "--help");
  EXPECT_EQ(help.code, 0) << help.err;
  size_t usages = 0;
  for (size_t at = help.out.find("Usage: ridge train"); at != std::string::npos;
       at = help.out.find("Usage: ridge train", at + 1))
    ++usages;
  EXPECT_EQ(usages, 1u) << help.out;
}

// Random per-rank mismatches of one or two options of `ridge train` (a tiny model, few steps) and of
// `ridge bench allreduce`: each gives status 2 and one line naming one of the options that differ. The
// seed is printed; RIDGE_FUZZ_SEED replays a run.
TEST(CliDistAgree, FuzzPerRankMismatches) {
  uint64_t seed = 20;
  if (const char* s = std::getenv("RIDGE_FUZZ_SEED")) seed = std::strtoull(s, nullptr, 10);
  std::cout << "RIDGE_FUZZ_SEED=" << seed << "\n";
  std::mt19937_64 rng(seed);
  TempDir dir("ridge_cli_agree_fuzz");
  struct Opt {
    std::string flag;
    std::vector<std::string> values;  // "" as a value: the flag given alone (a switch)
  };
  const std::vector<Opt> train = {
      {"--steps", {"1", "2"}},
      {"--seed", {"1", "7"}},
      {"--lr", {"1e-3", "0.002"}},
      {"--batch", {"2", "4"}},
      {"--context", {"4", "8"}},
      {"--precision", {"fp32", "bf16"}},
      {"--attention", {"flash", "math"}},
      {"--warmup", {"0", "1"}},
      {"--clip", {"1", "0.5"}},
      {"--log-every", {"1", "2"}},
      {"--ddp", {"flat", "naive", "overlap"}},
      {"--shard-optimizer", {"cs336", "zero1"}},
      {"--bucket-mb", {"1", "25"}},
      {"--json", {""}},
      {"--trace", {dir / "t.json"}},
      {"--memory", {dir / "m.json"}},
      {"--checkpoint", {dir / "c.safetensors"}},
      {"--lr-min", {"0", "1e-4"}},
      {"--eps", {"1e-8", "1e-6"}},
      {"--weight-decay", {"0.1", "0"}},
      {"--beta2", {"0.95", "0.99"}},
  };
  const std::vector<Opt> bench = {
      {"--set size", {"2M", "4M"}},
      {"--set op", {"allgather", "reducescatter", "allreduce,allgather"}},
      {"--iters", {"1", "2"}},
      {"--warmup", {"0", "1"}},
      {"--quick", {""}},
      {"--json", {""}},
      {"--csv", {""}},
      {"--min-time", {"0", "0.001"}},
      {"--max-time", {"1", "2"}},
      {"--trace", {dir / "b.json"}},
  };
  auto word = [](const Opt& o, const std::string& v) {
    if (o.flag.rfind("--set ", 0) == 0) return "--set " + o.flag.substr(6) + "=" + v + " ";
    return o.flag + (v.empty() ? "" : " " + v) + " ";
  };
  const int kCases = 24;
  for (int i = 0; i < kCases; ++i) {
    const bool is_train = i % 3 != 2;
    const auto& opts = is_train ? train : bench;
    std::string a = is_train ? kTrain : kAllreduce + "--set size=1M --set op=allreduce ";
    std::string b = a;
    // One or two options; each given with distinct values, or on one rank only (either one).
    std::vector<std::string> differ;
    const int n = 1 + static_cast<int>(rng() % 3 == 0);
    for (int k = 0; k < n; ++k) {
      const Opt& o = opts[rng() % opts.size()];
      if (std::find(differ.begin(), differ.end(), o.flag) != differ.end()) continue;
      // Choices: not given, or one of the values; two distinct ones.
      const size_t choices = o.values.size() + 1;
      const size_t x = rng() % choices, y = (x + 1 + rng() % (choices - 1)) % choices;
      if (x > 0) a += word(o, o.values[x - 1]);
      if (y > 0) b += word(o, o.values[y - 1]);
      differ.push_back(o.flag);
    }
    // --set size and op are in the base command (1M, allreduce): a second --set of the key replaces it.
    SCOPED_TRACE("case " + std::to_string(i) + ": rank 0: " + a + "| rank 1: " + b);
    const RunResult r = mpmd(a, b);
    EXPECT_EQ(r.code, 2) << (r.code == 124 || r.code == 137 ? "a hang, ended by the timeout\n" : "") << r.err;
    const auto lines = ridge_lines(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    bool named = false;
    for (const auto& f : differ) named = named || lines[0].find(f + ":") != std::string::npos;
    EXPECT_TRUE(named) << lines[0];
    EXPECT_EQ(r.err.find("MPI_ERR"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(dir / "t.json") || fs::exists(dir / "c.safetensors") || fs::exists(dir / "b.json"))
      << "a rank wrote an output before the ranks agreed";
}

#endif
