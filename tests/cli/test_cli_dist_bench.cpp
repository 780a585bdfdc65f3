// `ridge bench allreduce` and `ridge bench ddp` under `mpirun -np 2`: the real binary, tiny sizes, a
// timeout around every run. No timing assertions: the rows are checked for what they must say (every
// mode, bandwidths by NCCL tests' definitions), the merged trace for its shape.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "run.hpp"

#ifdef RIDGE_HAVE_DISTRIBUTED

namespace {

using nlohmann::json;
using ridge::test::RunResult;

const std::string kMpirun = std::string(
                                "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
                                "ASAN_OPTIONS=detect_leaks=0 timeout 300 ") +
                            RIDGE_MPIEXEC + " --oversubscribe --bind-to none -np 2 " + RIDGE_BINARY;

RunResult sh(const std::string& cmd) {
  return ridge::test::run_shell(cmd);
}

std::vector<json> rows(const std::string& out) {
  std::vector<json> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') v.push_back(json::parse(line));
  return v;
}

using ridge::test::ridge_lines;

}  // namespace

TEST(CliDistBench, AllreduceRowsCarryBusBandwidthByTheRingFactor) {
  const RunResult r =
      sh(kMpirun + " bench allreduce --set size=1MB --iters 2 --warmup 1 --json --no-progress");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rs = rows(r.out);
  ASSERT_EQ(rs.size(), 3u) << "rank 0 alone prints, one row per op: " << r.out;
  std::set<std::string> ops;
  for (const auto& row : rs) {
    const std::string op = row["case"]["op"];
    ops.insert(op);
    EXPECT_EQ(row["case"]["ranks"], 2);
    EXPECT_EQ(row["case"]["size"], "1 MB");
    const double t = row["median_ms"].get<double>() * 1e-3, alg = row["algbw_gbps"], bus = row["busbw_gbps"];
    EXPECT_GT(t, 0);
    EXPECT_NEAR(alg, 1e6 / t / 1e9, 1e-3 + 1e-3 * alg);
    // NCCL tests: 2(n-1)/n = 1 for an all-reduce over 2 ranks, (n-1)/n = 1/2 for the others.
    EXPECT_NEAR(bus, alg * (op == "allreduce" ? 1.0 : 0.5), 1e-3 + 1e-3 * alg) << op;
  }
  EXPECT_EQ(ops, (std::set<std::string>{"allreduce", "allgather", "reducescatter"}));
}

TEST(CliDistBench, DdpEveryModeAndAMergedTraceWithARowPerRank) {
  const auto trace_path = std::filesystem::temp_directory_path() / "ridge_cli_dbench_trace.json";
  std::filesystem::remove(trace_path);
  const RunResult r =
      sh(kMpirun +
         " bench ddp --quick --set context=32 --set vocab=512 --set d_model=64 --set d_ff=176 --set heads=4 "
         "--set layers=2 --iters 2 --warmup 1 --json --no-progress --trace " +
         trace_path.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<std::string> labels = {
      "single",           "naive", "flat", "overlap", "bucketed 1 MB", "bucketed 10 MB", "bucketed 100 MB",
      "bucketed 1000 MB", "cs336", "zero1"};
  const auto rs = rows(r.out);
  ASSERT_EQ(rs.size(), labels.size()) << r.out;
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(rs[i]["case"]["mode"], labels[i]);
    EXPECT_GT(rs[i]["peak_mib"].get<double>(), 0);
    if (i == 0) continue;
    // CommStats: the communication is the hidden part plus the exposed part.
    EXPECT_NEAR(rs[i]["comm_ms"].get<double>(),
                rs[i]["hidden_ms"].get<double>() + rs[i]["exposed_ms"].get<double>(), 0.01)
        << labels[i];
    EXPECT_TRUE(rs[i].contains("pred_step_ms")) << labels[i];
  }
  // Naive and flat expose all of it.
  EXPECT_EQ(rs[1]["hidden_ms"].get<double>(), 0.0);
  EXPECT_EQ(rs[2]["hidden_ms"].get<double>(), 0.0);

  std::ifstream in(trace_path);
  ASSERT_TRUE(in.good()) << "no trace at " << trace_path;
  const json doc = json::parse(in);
  std::map<int, std::string> process;
  std::map<int, std::set<std::string>> names;
  std::map<std::string, int> open;  // async id -> begins minus ends
  for (const auto& e : doc.at("traceEvents")) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
    const int pid = e["pid"];
    ASSERT_TRUE(pid == 0 || pid == 1) << e.dump();
    const std::string ph = e["ph"];
    if (ph == "M") {
      if (e["name"] == "process_name") process[pid] = e["args"]["name"];
      continue;
    }
    ASSERT_TRUE(e.contains("ts") && e["ts"].is_number()) << e.dump();
    if (ph == "X") {
      EXPECT_GE(e.at("dur").get<double>(), 0) << e.dump();
    }
    if (ph == "b") ++open[e.at("id").get<std::string>()];
    if (ph == "e") --open[e.at("id").get<std::string>()];
    names[pid].insert(e["name"].get<std::string>());
  }
  EXPECT_EQ(process[0], "rank 0");
  EXPECT_EQ(process[1], "rank 1");
  for (const auto& [id, n] : open) EXPECT_EQ(n, 0) << "async range " << id << " not closed";
  for (int pid : {0, 1}) {
    for (const auto& l : labels) {
      EXPECT_TRUE(names[pid].count("ddp " + l)) << "rank " << pid << ": " << l;
    }
    for (const char* phase :
         {"forward", "backward", "optimizer", "allreduce", "wait gradients", "reduce-scatter"}) {
      EXPECT_TRUE(names[pid].count(phase)) << "rank " << pid << ": " << phase;
    }
  }
  std::filesystem::remove(trace_path);
}

// Before MPI_Init the benchmarks ask the launcher's variables (env::launcher()) whether this process is
// one of several ranks: alone, or told it is a world of 1, is one line; so is a variable that is not a
// number (never read as 0).
TEST(CliDistBench, ALoneProcessOrABadLauncherVariableIsOneLine) {
  struct Case {
    std::string args, env, expect;
  };
  const Case cases[] = {
      {"bench allreduce --quick", "", "bench allreduce: needs at least 2 MPI ranks"},
      {"bench ddp --quick", "OMPI_COMM_WORLD_SIZE=1", "bench ddp: needs at least 2 MPI ranks"},
      {"bench ddp --quick", "PMI_SIZE=abc", "PMI_SIZE: 'abc' is not a decimal integer"},
      {"bench allreduce --quick", "OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=x",
       "OMPI_COMM_WORLD_RANK: 'x'"},
  };
  for (const Case& c : cases) {
    const RunResult r = ridge::test::run(c.args, c.env);
    EXPECT_EQ(r.code, 2) << c.args << " " << c.env << "\n" << r.err;
    const auto lines = ridge_lines(r.err);
    ASSERT_EQ(lines.size(), 1u) << c.env << "\n" << r.err;
    EXPECT_NE(lines[0].find(c.expect), std::string::npos) << lines[0];
  }
}

TEST(CliDistBench, BadModeIsOneLineFromRankZero) {
  const RunResult r = sh(kMpirun + " bench ddp --set mode=flat,ring");
  EXPECT_EQ(r.code, 2);
  const auto lines = ridge_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("mode 'ring'"), std::string::npos) << lines[0];
}

#endif
