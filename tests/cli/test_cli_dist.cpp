// `ridge train` under `mpirun -np 2`: the real binary, with a timeout around every run so a hang fails
// the test instead of blocking the suite.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "mpirun.hpp"
#include "run.hpp"
#include "core/json.hpp"

#ifdef RIDGE_HAVE_DISTRIBUTED

namespace {

using ridge::test::RunResult;

const std::string kMpirun = ridge::test::mpirun("120");
const std::string kModel =
    " train --layers 2 --d-model 32 --heads 2 --d-ff 48 --vocab 64 --context 8 --threads 1 "
    "--seed 5 --lr 3e-3 --warmup 0 --log-every 1 ";

// A shell command line (mpirun's own lines go to stderr, with the ranks' stderr).
RunResult sh(const std::string& cmd) {
  return ridge::test::run_shell(cmd);
}

using ridge::test::json_losses;

using ridge::test::ridge_lines;

}  // namespace

// Every mode trains like one process on the whole batch: the logged loss (the mean over ranks of each
// rank's mean over its equal share of tokens) equals the single process's up to the reassociated sums
// (relative 1e-5 leaves a wide margin over the ~1e-6 parameter differences the library test bounds).
TEST(CliDist, EveryModeMatchesOneProcess) {
  const RunResult one = ridge::test::run(kModel + "--batch 4 --steps 3 --json", "OMP_NUM_THREADS=1");
  ASSERT_EQ(one.code, 0) << one.err;
  const auto want = json_losses(one.out);
  ASSERT_EQ(want.size(), 3u);
  for (const std::string mode :
       {"--ddp naive", "--ddp flat", "--ddp overlap", "--ddp bucketed --bucket-mb 0.02",
        "--shard-optimizer cs336 --ddp overlap", "--shard-optimizer cs336 --ddp naive",
        "--shard-optimizer zero1", "--shard-optimizer zero1 --ddp naive",
        "--shard-optimizer zero1 --ddp overlap", "--shard-optimizer zero1 --ddp bucketed --bucket-mb 0.02"}) {
    SCOPED_TRACE(mode);
    const RunResult r =
        sh(kMpirun + " -np 2 " + RIDGE_BINARY + kModel + "--batch 4 --steps 3 --json " + mode);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto got = json_losses(r.out);
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
  EXPECT_EQ(json_losses(one.out).size(), 1u);  // steps 3 of 3: only the last one ran
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
  EXPECT_EQ(lines[0].rfind("ridge: rank 1: --steps: '3' here but '2' on rank 0", 0), 0u) << lines[0];
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

// A rank that ends in the middle of training (RIDGE_TEST_DIE_AT_STEP, test only): inside the backward
// pass of step 3, with a non-blocking reduction outstanding in the overlapped modes, or before the
// blocking ones start. mpirun (orte_abort_on_non_zero_status, on by default and named here so the
// behaviour does not depend on a site's settings) ends the other rank; the run's exit status is the
// dying rank's 3, ridge prints exactly one line (the dying rank's), step 3 was not logged, and the whole
// run ends well inside the time a hang would take.
TEST(CliDist, ARankDyingMidBackwardEndsEveryRankWithOneLine) {
  struct Case {
    std::string mode;
    int rank;
    bool outstanding;
  };
  for (const Case& c : {Case{"--ddp bucketed --bucket-mb 0.02", 1, true},
                        Case{"--ddp overlap --shard-optimizer zero1", 0, true},
                        Case{"--ddp naive --shard-optimizer cs336", 1, false}}) {
    SCOPED_TRACE(c.mode);
    const auto t0 = std::chrono::steady_clock::now();
    const RunResult r = sh("RIDGE_TEST_DIE_AT_STEP=3 RIDGE_TEST_DIE_RANK=" + std::to_string(c.rank) + " " +
                           kMpirun + " --mca orte_abort_on_non_zero_status 1 -np 2 " + RIDGE_BINARY + kModel +
                           "--batch 4 --steps 50 --json " + c.mode);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.code, 3) << r.err;
    EXPECT_LT(wall, 60.0) << "a hang, ended by the timeout";
    const auto lines = ridge_lines(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    const std::string want =
        "ridge: rank " + std::to_string(c.rank) +
        ": RIDGE_TEST_DIE_AT_STEP=3: exiting with status 3 in the backward pass of step 3";
    EXPECT_EQ(lines[0].rfind(want, 0), 0u) << lines[0];
    EXPECT_EQ(lines[0].find("non-blocking gradient reduction outstanding") != std::string::npos,
              c.outstanding)
        << lines[0];
    // Step 3 never completes. Rank 0 logs steps 1 and 2 (the second can be cut off when rank 1 dies
    // and mpirun ends rank 0 before its forwarded output is flushed).
    const auto logged = json_losses(r.out);
    EXPECT_GE(logged.size(), c.rank == 0 ? 2u : 1u) << r.out;
    EXPECT_LE(logged.size(), 2u) << r.out;
  }
}

TEST(CliDist, TestDieRankBeyondTheWorldIsOneLine) {
  const RunResult r = sh("RIDGE_TEST_DIE_AT_STEP=2 RIDGE_TEST_DIE_RANK=5 " + kMpirun + " -np 2 " +
                         RIDGE_BINARY + kModel + "--batch 4 --steps 3 --ddp flat");
  EXPECT_EQ(r.code, 2);
  const auto lines = ridge_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0], "ridge: RIDGE_TEST_DIE_RANK: 5 is not a rank of this 2-rank run (expected 0 .. 1)");
}

// A sharded run's checkpoint holds the whole optimizer state (rank 0 gathers it), so it resumes at any
// world size: written by 2 ranks under zero1, resumed by 1 process, by 2 ranks under cs336 and by 2
// under zero1, the logged loss of step 3 is the same up to the reassociated sums.
TEST(CliDist, ShardedCheckpointResumesAtAnotherWorldSizeAndScheme) {
  const auto dir = std::filesystem::temp_directory_path() / "ridge_cli_dist_resume";
  std::filesystem::create_directories(dir);
  const std::string ck = (dir / "zero1.safetensors").string();
  const RunResult w =
      sh(kMpirun + " -np 2 " + RIDGE_BINARY + kModel +
         "--batch 4 --steps 2 --shard-optimizer zero1 --ddp bucketed --bucket-mb 0.02 --checkpoint " + ck);
  ASSERT_EQ(w.code, 0) << w.err;
  const RunResult one =
      ridge::test::run(kModel + "--batch 4 --steps 3 --json --resume " + ck, "OMP_NUM_THREADS=1");
  ASSERT_EQ(one.code, 0) << one.err;
  const RunResult two = sh(kMpirun + " -np 2 " + RIDGE_BINARY + kModel +
                           "--batch 4 --steps 3 --json --shard-optimizer cs336 --ddp overlap --resume " + ck);
  ASSERT_EQ(two.code, 0) << two.err;
  // And by 2 ranks under zero1 again (each trainer built with its shard, then loading its slice).
  const RunResult again = sh(kMpirun + " -np 2 " + RIDGE_BINARY + kModel +
                             "--batch 4 --steps 3 --json --shard-optimizer zero1 --ddp naive --resume " + ck);
  ASSERT_EQ(again.code, 0) << again.err;
  const auto a = json_losses(one.out), b = json_losses(two.out), z = json_losses(again.out);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  ASSERT_EQ(z.size(), 1u);
  EXPECT_NEAR(a[0], b[0], 1e-5 * a[0]);
  EXPECT_NEAR(a[0], z[0], 1e-5 * a[0]);
  std::filesystem::remove_all(dir);
}

namespace {
nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}
int64_t live_at_end(const nlohmann::json& snapshot, const std::string& tag) {
  const auto& m = snapshot.at("summary").at("live_at_end");
  return m.contains(tag) ? m.at(tag).get<int64_t>() : 0;
}
}  // namespace

// `--memory` under mpirun: one snapshot per rank (NAME.rankR.json). A sharded optimizer's AdamW state
// (m and v, fp32) on rank r is 2 x 4 bytes x its shard, from the start to the end of the run: the rank
// never held the whole state, not even while the trainer was being built. zero1's shard is counted here
// from the model's shapes and the 16384-element norm chunks it is cut on; cs336's from the tensors in
// flat order (lm_head, ln_final, the last layer, ..., the first layer, token_embeddings), cut at the
// tensor boundary nearest half the elements. Over both ranks it is the single process's state.
TEST(CliDist, ShardedOptimizerMemoryPerRankIsItsShard) {
  const auto dir = std::filesystem::temp_directory_path() / "ridge_cli_dist_memory";
  std::filesystem::create_directories(dir);
  const std::string model =
      " train --layers 2 --d-model 64 --heads 2 --d-ff 128 --vocab 256 --context 8 --threads 1 --seed 5 "
      "--batch 4 --steps 2 ";
  const int64_t V = 256, D = 64, F = 128, L = 2;
  const int64_t layer = 4 * D * D + 3 * D * F + 2 * D;
  const int64_t n = 2 * V * D + L * layer + D;  // embeddings, head, layers, final norm
  const int64_t chunk = 16384, units = (n + chunk - 1) / chunk;
  const int64_t zero1_shard0 = std::min(n, units / 2 * chunk);
  // lm_head (V x D), ln_final (D) and the last layer: 57536 of the 115008 elements, and the next
  // tensor (the first layer's ffn.w2, D x F) would take rank 0 further from half than it is.
  const int64_t cs336_shard0 = V * D + D + layer;
  ASSERT_EQ(cs336_shard0, 57536);
  ASSERT_LT(std::abs(2 * cs336_shard0 - n), std::abs(2 * (cs336_shard0 + D * F) - n));
  ASSERT_GT(zero1_shard0, 0);
  const std::string one_path = (dir / "one.json").string();
  const RunResult one = ridge::test::run(model + "--memory " + one_path, "OMP_NUM_THREADS=1");
  ASSERT_EQ(one.code, 0) << one.err;
  const std::string m = "optimizer state/m (exp_avg)", v = "optimizer state/v (exp_avg_sq)";
  const auto one_snap = read_json(one_path);
  const int64_t full = live_at_end(one_snap, m) + live_at_end(one_snap, v);
  EXPECT_EQ(full, 2 * 4 * n);
  for (const auto& [mode, shard0] : {std::pair<std::string, int64_t>{"zero1", zero1_shard0},
                                     std::pair<std::string, int64_t>{"cs336", cs336_shard0}}) {
    SCOPED_TRACE(mode);
    const int64_t shard1 = n - shard0;
    const std::string dist_path = (dir / (mode + ".json")).string();
    const RunResult r = sh(kMpirun + " -np 2 " + RIDGE_BINARY + model + "--ddp flat --shard-optimizer " +
                           mode + " --memory " + dist_path);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find(mode + ".rank0.json"), std::string::npos) << r.out;
    const auto s0 = read_json((dir / (mode + ".rank0.json")).string()),
               s1 = read_json((dir / (mode + ".rank1.json")).string());
    for (const auto& [snap, shard] : {std::pair{&s0, shard0}, std::pair{&s1, shard1}}) {
      EXPECT_EQ(live_at_end(*snap, m), 4 * shard);
      EXPECT_EQ(live_at_end(*snap, v), 4 * shard);
      // The rank never held more optimizer state than its shard.
      const auto& peak = snap->at("summary").at("live_at_peak");
      EXPECT_EQ(peak.value(m, int64_t{0}) + peak.value(v, int64_t{0}), 2 * 4 * shard);
      int64_t most = 0, live = 0;  // replayed over every optimizer-state event
      for (const auto& e : snap->at("events")) {
        const std::string tag = e.at("tag");
        if (tag != m && tag != v) continue;
        live += (e.at("action") == "alloc" ? 1 : -1) * e.at("bytes").get<int64_t>();
        most = std::max(most, live);
      }
      EXPECT_EQ(most, 2 * 4 * shard);
    }
    EXPECT_EQ(live_at_end(s0, m) + live_at_end(s0, v) + live_at_end(s1, m) + live_at_end(s1, v), full);
    // Parameters and gradients stay whole on every rank.
    for (const auto* s : {&s0, &s1}) {
      EXPECT_EQ(live_at_end(*s, "parameters"), 4 * n);
      EXPECT_EQ(live_at_end(*s, "gradients"), 4 * n);
    }
    if (mode == "zero1") {  // the reduce-scatter buffer is the shard
      EXPECT_EQ(live_at_end(s0, "communication/reduce-scatter"), 4 * shard0);
      EXPECT_EQ(live_at_end(s1, "communication/reduce-scatter"), 4 * shard1);
    }
  }
  // `ridge memory show` reads a rank's file.
  const RunResult show = ridge::test::run("memory show " + (dir / "zero1.rank1.json").string());
  EXPECT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("optimizer state/m (exp_avg)"), std::string::npos) << show.out;
  std::filesystem::remove_all(dir);
}

// `--trace` under mpirun: rank 0 writes one file with a process row per rank; each row has the backward
// ranges and the communication ranges (per-bucket reduce-scatter starts and completions as async
// ranges), and some communication starts inside that rank's backward range: the overlap is visible.
TEST(CliDist, MergedTraceHasAProcessRowPerRankWithCommRanges) {
  const auto dir = std::filesystem::temp_directory_path() / "ridge_cli_dist_trace";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "t.json").string();
  const RunResult r =
      sh(kMpirun + " -np 2 " + RIDGE_BINARY + kModel +
         "--batch 4 --steps 2 --ddp bucketed --bucket-mb 0.02 --shard-optimizer zero1 --trace " + path);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "t.rank1.json"));
  const auto doc = read_json(path);
  std::map<int, std::string> names;
  for (const auto& e : doc.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "process_name")
      names[e.at("pid").get<int>()] = e.at("args").at("name");
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0], "rank 0");
  EXPECT_EQ(names[1], "rank 1");
  for (int rank : {0, 1}) {
    SCOPED_TRACE(rank);
    std::vector<std::pair<double, double>> backward;
    std::map<std::string, int> comm_open;  // async id -> begin/end balance
    std::vector<double> comm_starts;
    int blocking_waits = 0;
    for (const auto& e : doc.at("traceEvents")) {
      if (e.at("pid").get<int>() != rank || e.at("ph") == "M") continue;
      const std::string name = e.at("name"), ph = e.at("ph");
      if (ph == "X" && name == "backward")
        backward.emplace_back(e.at("ts"), e.at("ts").get<double>() + e.at("dur").get<double>());
      if (ph == "X" && name == "wait gradients") ++blocking_waits;
      if ((ph == "b" || ph == "e") && name.rfind("reduce-scatter bucket", 0) == 0) {
        comm_open[e.at("id")] += ph == "b" ? 1 : -1;
        if (ph == "b") comm_starts.push_back(e.at("ts"));
      }
    }
    EXPECT_EQ(backward.size(), 2u);
    EXPECT_GE(comm_starts.size(), 2u * 2);  // at least two buckets per step
    EXPECT_EQ(blocking_waits, 2);
    for (const auto& [id, balance] : comm_open) EXPECT_EQ(balance, 0) << id << " begins and ends once";
    int inside = 0;
    for (double t : comm_starts)
      for (const auto& [b, e] : backward) inside += t >= b && t <= e;
    EXPECT_GT(inside, 0) << "no communication started during backward";
  }
  // Blocking modes: the collectives are ranges after backward, inside "reduce gradients".
  const RunResult f = sh(kMpirun + " -np 2 " + RIDGE_BINARY + kModel +
                         "--batch 4 --steps 2 --ddp flat --shard-optimizer zero1 --trace " + path);
  ASSERT_EQ(f.code, 0) << f.err;
  const auto flat = read_json(path);
  for (int rank : {0, 1}) {
    SCOPED_TRACE(rank);
    std::vector<std::pair<double, double>> reduce;
    std::vector<double> rs;
    for (const auto& e : flat.at("traceEvents")) {
      if (e.at("pid").get<int>() != rank || e.at("ph") != "X") continue;
      const double b = e.at("ts"), end = b + e.at("dur").get<double>();
      if (e.at("name") == "reduce gradients") reduce.emplace_back(b, end);
      if (e.at("name") == "reduce-scatter") rs.push_back(b);
    }
    EXPECT_EQ(reduce.size(), 2u);
    EXPECT_EQ(rs.size(), 2u);  // one unfrozen run: one reduce-scatter per step
    for (double t : rs) {
      int in = 0;
      for (const auto& [b, e] : reduce) in += t >= b && t <= e;
      EXPECT_EQ(in, 1);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(CliDist, BadModeNamesTheChoices) {
  const RunResult r = ridge::test::run(kModel + "--ddp ring");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(
      r.err,
      "ridge: --ddp: mode: 'ring' is not a data-parallel mode (accepted: naive, flat, overlap, bucketed)\n");
}

#endif
