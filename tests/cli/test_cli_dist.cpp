// `ridge train` under `mpirun -np 2`: the real binary, with a timeout around every run so a hang fails
// the test instead of blocking the suite.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "run.hpp"
#include "core/json.hpp"

#ifdef RIDGE_HAVE_DIST

namespace {

using ridge::test::RunResult;

// OpenMPI refuses root without these, and this machine has fewer cores than some runs want ranks.
// OpenMPI's plugins leak at exit (from dlopen'ed modules LeakSanitizer cannot name, so no suppression
// file can match them): under the sanitizer build, leak checking is off for MPI runs only.
const std::string kMpirun = std::string(
                                "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
                                "ASAN_OPTIONS=detect_leaks=0 timeout 120 ") +
                            RIDGE_MPIEXEC + " --oversubscribe --bind-to none";
const std::string kModel =
    " train --layers 2 --d-model 32 --heads 2 --d-ff 48 --vocab 64 --context 8 --threads 1 "
    "--seed 5 --lr 3e-3 --warmup 0 --log-every 1 ";

// A shell command line (mpirun's own lines go to stderr, with the ranks' stderr).
RunResult sh(const std::string& cmd) {
  std::string err_path = (std::filesystem::temp_directory_path() / "ridge_cli_dist_err.XXXXXX").string();
  const int fd = ::mkstemp(err_path.data());
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  ::close(fd);
  RunResult r;
  std::FILE* p = ::popen((cmd + " 2>" + err_path).c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  std::remove(err_path.c_str());
  return r;
}

std::vector<double> losses(const std::string& out) {
  std::vector<double> l;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') l.push_back(nlohmann::json::parse(line).at("loss").get<double>());
  return l;
}

// Lines of stderr that ridge printed (mpirun adds its own framed notice).
std::vector<std::string> ridge_lines(const std::string& err) {
  std::vector<std::string> v;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("ridge: ", 0) == 0) v.push_back(line);
  return v;
}

}  // namespace

// Every mode trains like one process on the whole batch: the logged loss (the mean over ranks of each
// rank's mean over its equal share of tokens) equals the single process's up to the reassociated sums
// (relative 1e-5 leaves a wide margin over the ~1e-6 parameter differences the library test bounds).
TEST(CliDist, EveryModeMatchesOneProcess) {
  const RunResult one = ridge::test::run(kModel + "--batch 4 --steps 3 --json", "OMP_NUM_THREADS=1");
  ASSERT_EQ(one.code, 0) << one.err;
  const auto want = losses(one.out);
  ASSERT_EQ(want.size(), 3u);
  for (const std::string mode :
       {"--ddp naive", "--ddp flat", "--ddp overlap", "--ddp bucketed --bucket-mb 0.02",
        "--shard-optimizer cs336 --ddp overlap", "--shard-optimizer zero1"}) {
    SCOPED_TRACE(mode);
    const RunResult r =
        sh(kMpirun + " -np 2 " + RIDGE_BINARY + kModel + "--batch 4 --steps 3 --json " + mode);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto got = losses(r.out);
    ASSERT_EQ(got.size(), want.size()) << "only rank 0 prints: " << r.out;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << "step " << i + 1;
  }
}

TEST(CliDist, ShardedCheckpointResumesInOneProcess) {
  const auto dir = std::filesystem::temp_directory_path() / "ridge_cli_dist_ckpt";
  std::filesystem::create_directories(dir);
  const std::string ck = (dir / "zero1.safetensors").string();
  const RunResult r = sh(kMpirun + " -np 2 " + RIDGE_BINARY + kModel +
                         "--batch 4 --steps 2 --shard-optimizer zero1 --checkpoint " + ck);
  ASSERT_EQ(r.code, 0) << r.err;
  const RunResult one =
      ridge::test::run(kModel + "--batch 4 --steps 3 --json --resume " + ck, "OMP_NUM_THREADS=1");
  EXPECT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(losses(one.out).size(), 1u);  // steps 3 of 3: only the last one ran
  std::filesystem::remove_all(dir);
}

TEST(CliDist, BatchThatDoesNotDivideIsOneLine) {
  const RunResult r = sh(kMpirun + " -np 2 " + RIDGE_BINARY + kModel + "--batch 3 --steps 2 --ddp flat");
  EXPECT_EQ(r.code, 2);
  const auto lines = ridge_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;  // rank 0 prints; rank 1 exits quietly
  EXPECT_NE(lines[0].find("--batch: the global batch 3 does not divide among 2 ranks"), std::string::npos);
}

TEST(CliDist, MismatchedConfigurationEndsBothRanks) {
  const RunResult r =
      sh(kMpirun + " -np 1 " + RIDGE_BINARY + kModel + "--batch 4 --steps 2 --ddp flat : -np 1 " +
         RIDGE_BINARY + kModel + "--batch 4 --steps 3 --ddp flat");
  EXPECT_EQ(r.code, 2);
  const auto lines = ridge_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("rank 1 has a different configuration"), std::string::npos) << lines[0];
}

TEST(CliDist, SetupErrorOnOneRankIsReportedOnceByRankZero) {
  const RunResult r = sh(kMpirun + " -np 1 " + RIDGE_BINARY + kModel + "--batch 4 --ddp flat : -np 1 " +
                         RIDGE_BINARY + kModel + "--batch 4 --ddp flat --data /nonexistent/tokens.bin");
  EXPECT_EQ(r.code, 2);
  const auto lines = ridge_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("ridge: rank 1: --data:", 0), 0u) << lines[0];
}

TEST(CliDist, ARankThatDiesEndsTheOther) {
  // Rank 1 is killed a moment after it starts; rank 0 would wait in its all-reduce forever.
  const std::string train = std::string(RIDGE_BINARY) + kModel + "--batch 4 --steps 100000000 --ddp overlap";
  const RunResult r = sh(kMpirun +
                         " -np 2 sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then (sleep 2; kill -9 $$) & "
                         "fi; exec " +
                         train + "'");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.code, 124) << "timed out: the surviving rank hung";
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
}

TEST(CliDist, BadModeNamesTheChoices) {
  const RunResult r = ridge::test::run(kModel + "--ddp ring");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(
      r.err,
      "ridge: --ddp: mode: 'ring' is not a data-parallel mode (accepted: naive, flat, overlap, bucketed)\n");
}

#endif
