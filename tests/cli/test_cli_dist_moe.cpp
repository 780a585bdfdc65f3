// `ridge train --expert-parallel` under `mpirun -np 2`: an MoE model's experts sharded over the ranks,
// against one process and against plain data parallelism; its refusals, one line on every rank; the
// trace rows of the exchange. The library's equivalence (weights within the DDP bound, checkpoints bit
// for bit) is tests/distributed/test_expert_parallel.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/json.hpp"
#include "mpirun.hpp"
#include "run.hpp"

#ifdef RIDGE_HAVE_DISTRIBUTED

namespace {

using ridge::test::ridge_lines;
using ridge::test::RunResult;

const std::string kMpirun = ridge::test::mpirun("120");
const std::string kDense =
    " train --layers 2 --d-model 32 --heads 2 --d-ff 48 --vocab 64 --context 8 --threads 1 "
    "--seed 5 --lr 3e-3 --warmup 0 --log-every 1 ";
const std::string kModel = kDense + "--experts 4 --top-k 2 --d-expert 24 ";

RunResult sh(const std::string& cmd) {
  return ridge::test::run_shell(cmd);
}
RunResult np2(const std::string& args) {
  return sh(kMpirun + " -np 2 " + RIDGE_BINARY + kModel + args);
}

using ridge::test::json_losses;

void expect_same_losses(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << "step " << i + 1;
}

}  // namespace

// With the balance bias (no auxiliary loss, the bias moved by the counts of the whole batch) 2 ranks train
// like one process on the whole batch; with the auxiliary loss (each rank's own, as data parallelism
// computes it) like 2 data-parallel ranks. Losses to a relative 1e-5, as CliDist.EveryModeMatchesOneProcess.
TEST(CliDistMoe, ExpertParallelTrainsLikeOneProcessAndLikeDataParallel) {
  const std::string bias = "--router sigmoid --balance bias --shared-experts 1 --batch 4 --steps 3 --json ";
  const RunResult one = ridge::test::run(kModel + bias, "OMP_NUM_THREADS=1");
  ASSERT_EQ(one.code, 0) << one.err;
  const auto want = json_losses(one.out);
  ASSERT_EQ(want.size(), 3u);
  for (const std::string mode : {"--ddp flat", "--ddp overlap", "--ddp bucketed --bucket-mb 0.02"}) {
    SCOPED_TRACE(mode);
    const RunResult r = np2(bias + "--expert-parallel " + mode);
    ASSERT_EQ(r.code, 0) << r.err;
    expect_same_losses(json_losses(r.out), want);
  }
  // One process asking for it: one rank owns every expert (the exchange's path, nothing leaves).
  // It starts MPI (a one-rank world), so LeakSanitizer is told to ignore OpenMPI's own allocations, as
  // every mpirun test does (tests/cli/mpirun.hpp).
  const RunResult alone =
      ridge::test::run(kModel + bias + "--expert-parallel", "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0");
  ASSERT_EQ(alone.code, 0) << alone.err;
  expect_same_losses(json_losses(alone.out), want);

  const std::string aux = "--batch 4 --steps 3 --json ";
  const RunResult dp = np2(aux + "--ddp naive");
  ASSERT_EQ(dp.code, 0) << dp.err;
  const RunResult ep = np2(aux + "--ddp naive --expert-parallel");
  ASSERT_EQ(ep.code, 0) << ep.err;
  expect_same_losses(json_losses(ep.out), json_losses(dp.out));
}

// The checkpoint is whole (rank 0 gathers rank 1's experts before it writes): one process resumes it and
// takes step 3 as the 2-rank run that went on did (a constant learning rate, so that a run of 2 steps and
// one of 3 step alike).
TEST(CliDistMoe, CheckpointResumesInOneProcess) {
  const auto dir = std::filesystem::temp_directory_path() / "ridge_cli_dist_moe";
  std::filesystem::create_directories(dir);
  const std::string ck = (dir / "ep.safetensors").string();
  const std::string run = "--router sigmoid --balance bias --lr-min 3e-3 --batch 4 --json --expert-parallel ";
  const RunResult two = np2(run + "--steps 2 --checkpoint " + ck);
  ASSERT_EQ(two.code, 0) << two.err;
  const RunResult three = np2(run + "--steps 3");
  ASSERT_EQ(three.code, 0) << three.err;
  const RunResult one = ridge::test::run(
      kModel + "--router sigmoid --balance bias --lr-min 3e-3 --batch 4 --json --steps 3 --resume " + ck,
      "OMP_NUM_THREADS=1");
  ASSERT_EQ(one.code, 0) << one.err;
  const auto got = json_losses(one.out), want = json_losses(three.out);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(want.size(), 3u);
  EXPECT_NEAR(got[0], want[2], 1e-5 * want[2]);
  // And on 2 ranks again, each loading its block of the experts.
  const RunResult again = np2(run + "--steps 3 --resume " + ck);
  ASSERT_EQ(again.code, 0) << again.err;
  const auto resumed = json_losses(again.out);
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_NEAR(resumed[0], want[2], 1e-5 * want[2]);
  std::filesystem::remove_all(dir);
}

// `--memory` per rank: a rank holds its block of the experts, so its parameters, gradients and AdamW
// state are one process's less half of the experts' (2 layers x w1, w2, w3 of 4 experts of 24 x 32), for
// the whole run.
TEST(CliDistMoe, EachRankHoldsItsHalfOfTheExperts) {
  const auto dir = std::filesystem::temp_directory_path() / "ridge_cli_dist_moe_memory";
  std::filesystem::create_directories(dir);
  const std::string run = "--batch 4 --steps 2 --memory ";
  const RunResult one = ridge::test::run(kModel + run + (dir / "one.json").string(), "OMP_NUM_THREADS=1");
  ASSERT_EQ(one.code, 0) << one.err;
  const RunResult two = np2(run + (dir / "ep.json").string() + " --expert-parallel");
  ASSERT_EQ(two.code, 0) << two.err;
  auto read = [&](const std::string& name) {
    std::ifstream f(dir / name);
    return nlohmann::json::parse(f).at("summary");
  };
  const auto whole = read("one.json");
  const int64_t experts = 2 * 3 * 4 * 24 * 32, other_half = 4 * experts / 2;  // bytes of fp32
  for (const std::string rank : {"ep.rank0.json", "ep.rank1.json"}) {
    SCOPED_TRACE(rank);
    const auto s = read(rank);
    for (const std::string tag :
         {"parameters", "gradients", "optimizer state/m (exp_avg)", "optimizer state/v (exp_avg_sq)"}) {
      EXPECT_EQ(s.at("live_at_end").value(tag, int64_t{0}),
                whole.at("live_at_end").value(tag, int64_t{0}) - other_half)
          << tag;
      EXPECT_EQ(s.at("live_at_peak").value(tag, int64_t{0}), s.at("live_at_end").value(tag, int64_t{0}))
          << tag;
    }
  }
  std::filesystem::remove_all(dir);
}

// What it refuses: one line for the job, exit 2 on every rank, before any collective depends on it.
TEST(CliDistMoe, RefusalsAreOneLine) {
  const std::pair<std::string, std::string> cases[] = {
      {"--experts 3 --top-k 1 --d-expert 24 --batch 4 --expert-parallel",
       "ridge: --expert-parallel: 3 experts do not share out evenly over 2 ranks (give --experts a multiple "
       "of "
       "2, or a number of ranks that divides 3)"},
      {"--experts 4 --top-k 2 --batch 4 --expert-parallel --shard-optimizer zero1",
       "ridge: --expert-parallel: does not combine with --shard-optimizer zero1"},
  };
  for (const auto& [args, says] : cases) {
    SCOPED_TRACE(args);
    const RunResult r = sh(kMpirun + " -np 2 " + RIDGE_BINARY + kDense + args);
    EXPECT_EQ(r.code, 2);
    const auto lines = ridge_lines(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_EQ(lines[0].rfind(says, 0), 0u) << lines[0];
  }
  const RunResult dense = sh(kMpirun + " -np 2 " + RIDGE_BINARY + kDense + "--batch 4 --expert-parallel");
  EXPECT_EQ(dense.code, 2);
  const auto lines = ridge_lines(dense.err);
  ASSERT_EQ(lines.size(), 1u) << dense.err;
  EXPECT_EQ(lines[0].rfind("ridge: --expert-parallel: the model is dense", 0), 0u) << lines[0];
}

// The merged trace: each rank's row has the exchange's ranges (dispatch, combine and their backward, as
// ranges of the layer) and each all-to-all as an async range that begins and ends once; with a shared
// expert some all-to-all is still in flight when the shared experts start (the overlap).
TEST(CliDistMoe, TraceShowsTheExchangeOnEveryRank) {
  const auto dir = std::filesystem::temp_directory_path() / "ridge_cli_dist_moe_trace";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "t.json").string();
  const RunResult r = np2("--shared-experts 1 --batch 4 --steps 2 --expert-parallel --trace " + path);
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream f(path);
  const auto doc = nlohmann::json::parse(f);
  for (int rank : {0, 1}) {
    SCOPED_TRACE(rank);
    std::map<std::string, int> ranges, open;
    std::map<std::string, std::pair<double, double>> span;  // async id -> begin, end
    std::vector<double> starts, shared;
    for (const auto& e : doc.at("traceEvents")) {
      if (e.at("pid").get<int>() != rank || e.at("ph") == "M") continue;
      const std::string name = e.at("name"), ph = e.at("ph");
      if (ph == "X") ++ranges[name];
      if (ph == "X" && name == "shared experts") shared.push_back(e.at("ts"));
      if ((ph == "b" || ph == "e") && name.rfind("all-to-all", 0) == 0) {
        open[e.at("id")] += ph == "b" ? 1 : -1;
        (ph == "b" ? span[e.at("id")].first : span[e.at("id")].second) = e.at("ts");
        if (ph == "b") starts.push_back(e.at("ts"));
      }
    }
    // 2 steps x 2 MoE layers: the dispatch around the shared experts (its start, its wait) and the others.
    EXPECT_EQ(ranges["dispatch"], 2 * 2 * 2);
    EXPECT_EQ(ranges["combine"], 2 * 2);
    EXPECT_EQ(ranges["dispatch backward"], 2 * 2 * 2);
    EXPECT_EQ(ranges["combine backward"], 2 * 2);
    EXPECT_EQ(starts.size(), 2u * 2 * 4);  // 4 all-to-alls of rows per MoE layer and step
    for (const auto& [id, balance] : open) EXPECT_EQ(balance, 0) << id << " begins and ends once";
    EXPECT_EQ(shared.size(), 2u * 2);
    // Each shared-experts range starts while a dispatch is in flight (its completion is found by the test
    // between the shared experts' GEMMs, or by the wait after them).
    for (double t : shared) {
      int in_flight = 0;
      for (const auto& [id, be] : span) in_flight += be.first <= t && be.second >= t;
      EXPECT_EQ(in_flight, 1) << "no all-to-all in flight when the shared experts started at " << t;
    }
  }
  std::filesystem::remove_all(dir);
}

#endif
