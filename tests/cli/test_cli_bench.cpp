// `ridge bench` and `ridge memory` through the real binary: exit codes, one-line errors, the
// result schema in JSON lines and CSV, trace and memory files.
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run.hpp"
#include "core/json.hpp"
#include "ridge/predict.hpp"

namespace {

using ridge::test::run;

std::vector<nlohmann::json> json_lines(const std::string& s) {
  std::vector<nlohmann::json> v;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) v.push_back(nlohmann::json::parse(line));
  return v;
}

const char* kQuick = "bench stream --quick --set n=4k,64k --iters 2 --warmup 1 --min-time 0 --max-time 0.05";

TEST(CliBench, ListsBenchmarks) {
  const auto r = run("bench list");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("stream"), std::string::npos);
  EXPECT_NE(r.out.find("trace-overhead"), std::string::npos);
  const auto j = nlohmann::json::parse(run("bench list --json").out);
  ASSERT_TRUE(j.is_array());
  EXPECT_TRUE(j[0].contains("description"));
}

TEST(CliBench, StreamJsonLinesFollowTheSchema) {
  const auto r = run(std::string(kQuick) + " --json");
  ASSERT_EQ(r.code, 0);
  const auto rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 8u);  // 2 sizes x 4 kernels
  for (const auto& row : rows) {
    for (const char* k :
         {"benchmark", "case", "dtype", "threads", "isa", "median_ms", "min_ms", "gbps", "peers"})
      EXPECT_TRUE(row.contains(k)) << k << " in " << row.dump();
    EXPECT_EQ(row["benchmark"], "stream");
    EXPECT_GT(row["gbps"].get<double>(), 0);
    EXPECT_DOUBLE_EQ(row["gbps"].get<double>(),
                     row["bytes"].get<double>() / (row["median_ms"].get<double>() * 1e-3) / 1e9);
    if (row["case"]["kernel"] == "copy") {
      ASSERT_EQ(row["peers"].size(), 1u);
      EXPECT_EQ(row["peers"][0]["name"], "memcpy");
      EXPECT_NEAR(row["peers"][0]["speedup"].get<double>(),
                  row["peers"][0]["median_ms"].get<double>() / row["median_ms"].get<double>(), 1e-9);
    }
  }
}

TEST(CliBench, CsvAndTable) {
  const auto csv = run(std::string(kQuick) + " --set kernel=triad --csv");
  ASSERT_EQ(csv.code, 0);
  EXPECT_EQ(csv.out.rfind("benchmark,", 0), 0u) << csv.out;
  EXPECT_NE(csv.out.find(",case.n,"), std::string::npos) << csv.out;
  EXPECT_NE(csv.out.find(",gbps,"), std::string::npos) << csv.out;
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 3);  // header + 2 sizes
  const auto table = run(std::string(kQuick) + " --set kernel=copy");
  ASSERT_EQ(table.code, 0);
  EXPECT_NE(table.out.find("GB/s"), std::string::npos);
  EXPECT_NE(table.out.find("vs memcpy"), std::string::npos);
}

TEST(CliBench, GridFromFile) {
  const std::string path = ::testing::TempDir() + "ridge_grid.json";
  std::ofstream(path) << R"({"n": ["8k"], "kernel": ["add", "scale"]})";
  const auto rows =
      json_lines(run("bench stream --grid-file " + path + " --iters 2 --max-time 0.05 --json").out);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["case"]["n"], 8192);
  EXPECT_EQ(rows[1]["case"]["kernel"], "scale");
}

TEST(CliBench, TraceAndMemoryFiles) {
  const std::string tr = ::testing::TempDir() + "ridge_bench_trace.json";
  const std::string mem = ::testing::TempDir() + "ridge_bench_mem.json";
  const auto r = run(std::string(kQuick) + " --json --trace " + tr + " --memory " + mem);
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(tr);
  const auto doc = nlohmann::json::parse(in);
  int triads = 0;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X" && e["name"] == "stream.triad") ++triads;
  EXPECT_GT(triads, 0);

  const auto show = run("memory show " + mem);
  ASSERT_EQ(show.code, 0);
  EXPECT_NE(show.out.find("stream.a"), std::string::npos);
  EXPECT_NE(show.out.find("peak"), std::string::npos);
  const auto j = nlohmann::json::parse(run("memory show --json " + mem).out);
  // Three arrays of 64k doubles (plus copy's memcpy destination) live at the peak.
  EXPECT_EQ(j["live_at_peak"]["stream.a"], 65536 * 8);
  EXPECT_EQ(j["live_at_peak"]["stream.memcpy_dst"], 65536 * 8);

  const std::string png = ::testing::TempDir() + "ridge_bench_mem.png";
  std::filesystem::remove(png);
  // scripts/setup installs python3-matplotlib, so a plot that does not come out is a failure.
  const auto plot = run("memory plot " + mem + " -o " + png);
  ASSERT_EQ(plot.code, 0) << plot.err;
  EXPECT_GT(std::filesystem::file_size(png), 1000u);
}

TEST(CliBench, TraceOverheadRuns) {
  const auto rows =
      json_lines(run("bench trace-overhead --quick --set calls=1000 --iters 2 --max-time 0.05 --json").out);
  ASSERT_GE(rows.size(), 6u);
  for (const auto& row : rows) EXPECT_TRUE(row.contains("ns_per_call"));
}

TEST(CliBench, BadInputIsOneLineAndExit2) {
  for (const char* args :
       {"bench stream --set nn=4k", "bench stream --set n=abc", "bench stream --set kernel=fma",
        "bench stream --set n", "bench nope", "bench stream --json --csv",
        "bench stream --grid-file /nonexistent.json", "bench stream --trace /nonexistent/t.json",
        "memory show /nonexistent.json", "bench stream --threads 0"}) {
    const auto r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(r.err.rfind("ridge: ", 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

// The sweep grid (bench::Grid) raises about its items and axes ("grid n"); the CLI names --set
// and --grid-file in their place, with the library's message after them.
TEST(CliBench, GridErrorsNameTheFlags) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bench stream --set n=abc", "ridge: --set n: 'abc' is not a decimal integer (accepted: "},
      {"bench stream --set nn=4k", "ridge: --set nn: benchmark 'stream' has no sweep axis 'nn'"},
      {"bench stream --set n", "ridge: --set: 'n' is not key=value"},
      {"bench stream --grid-file /nonexistent.json",
       "ridge: --grid-file: '/nonexistent.json' cannot be read"},
  };
  for (const auto& [args, start] : cases) {
    const auto r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(r.err.rfind(start, 0), 0u) << args << ": " << r.err;
  }
}

}  // namespace

TEST(CliBench, ModelBadAxesAreOneLineAndExit2) {
  for (const char* args :
       {"bench model --no-torch --set pass=bogus", "bench model --no-torch --set size=huge",
        "bench model --no-torch --set precision=fp8", "bench model --no-torch --set attention=sparse",
        "bench model --no-torch --set colour=red", "bench model --no-torch --set threads=0",
        "bench model --no-torch --set threads=5000"}) {
    const auto r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

namespace {
namespace fs = std::filesystem;

// A probe home whose chip is H100's table entry under the id 'this' and whose efficiency file is
// already there (every class at 1.0, so nothing is fitted): --predict runs in a second.
fs::path predict_home() {
  const fs::path home = fs::temp_directory_path() / ("ridge_predict_home_" + std::to_string(::getpid()));
  fs::create_directories(home);
  auto chip = nlohmann::json::parse(run("hw show h100 --json").out);
  chip["id"] = "this";
  std::ofstream(home / "this.json") << chip.dump();
  const auto mtime = static_cast<int64_t>(fs::last_write_time(home / "this.json").time_since_epoch().count());
  std::ofstream(home / "this.efficiency.t1.json") << nlohmann::json{
      {"chip_file_mtime", mtime},
      {"version", ridge::predict::kFitVersion},
      {"efficiency", nlohmann::json::object()},
      {"shapes", nlohmann::json::object()}}.dump();
  return home;
}

}  // namespace

// --predict: rows carry predicted_ms and prediction_error_pct, per-kind predicted vs measured whose
// measured parts add up to the step, and the report lists the misses with the kind that carries them.
TEST(CliBench, ModelPredictRowsCarryTheErrorAndItsReason) {
  const fs::path home = predict_home();
  const auto r =
      run("bench model --no-torch --no-progress --set size=tiny --set context=32 --set pass=forward+backward "
          "--vocab 256 --warmup 0 --iters 1 --threads 1 --predict --json",
          "RIDGE_HOME=" + home.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 2u);  // fp32 and bf16
  for (const auto& row : rows) {
    const double median = row["median_ms"].get<double>(), pred = row["predicted_ms"].get<double>();
    EXPECT_GT(pred, 0);
    EXPECT_NEAR(row["prediction_error_pct"].get<double>(), 100 * (pred - median) / median, 1e-6);
    const auto& kinds = row["prediction_by_kind"];
    double measured = 0, predicted = 0;
    for (const char* k : {"gemm", "attention", "elementwise"}) {
      ASSERT_TRUE(kinds.contains(k)) << row.dump();
      EXPECT_GT(kinds[k]["measured_ms"].get<double>(), 0) << k;
      measured += kinds[k]["measured_ms"].get<double>();
      predicted += kinds[k]["predicted_ms"].get<double>();
      // Efficiency 1.0 everywhere: the prediction is the bound itself.
      EXPECT_NEAR(kinds[k]["fitted_efficiency"].get<double>(), 1.0, 1e-9) << k;
    }
    EXPECT_NEAR(measured, median, 1e-6 * median);  // shares of the timed step, scaled to its median
    EXPECT_NEAR(predicted, pred, 1e-6 * pred);
    // An H100's roofs at efficiency 1 predict far less than a CPU takes: a miss, explained.
    ASSERT_TRUE(row["prediction_misses"].is_array());
    ASSERT_FALSE(row["prediction_misses"].empty());
    const std::string first = row["prediction_misses"][0].get<std::string>();
    EXPECT_NE(first.find("(whole)"), std::string::npos) << first;
    EXPECT_NE(first.find("of its roof vs fitted"), std::string::npos) << first;
  }
  EXPECT_NE(r.err.find("prediction misses > 10%"), std::string::npos) << r.err;
  std::error_code ec;
  fs::remove_all(home, ec);
}

// The model benchmark's own default (CS336's 5 warm-up steps) once replaced any warm-up of 3, the
// generic default, so an explicit --warmup 3 was silently run as 5. The row says what was run.
TEST(CliBench, ModelHonoursAnExplicitWarmupAndKeepsItsOwnDefault) {
  const std::string base =
      "bench model --no-torch --no-progress --set size=tiny --set context=16 --set pass=forward "
      "--set precision=fp32 --vocab 64 --iters 1 --max-time 0 --threads 1 --json";
  for (const int w : {3, 0, 5, 7}) {
    const auto r = run(base + " --warmup " + std::to_string(w));
    ASSERT_EQ(r.code, 0) << r.err;
    const auto rows = json_lines(r.out);
    ASSERT_EQ(rows.size(), 1u) << r.out;
    EXPECT_EQ(rows[0]["warmup"].get<int>(), w) << rows[0].dump();
  }
  const auto def = run(base);
  ASSERT_EQ(def.code, 0) << def.err;
  const auto rows = json_lines(def.out);
  ASSERT_EQ(rows.size(), 1u) << def.out;
  EXPECT_EQ(rows[0]["warmup"].get<int>(), 5) << rows[0].dump();  // the model's default, not measure()'s 3
}

// `bench moe`: per case a forward and a backward row, each held against the loop of dense GEMMs (the
// peer, whose results are the grouped ones to the bit), with the layer's FLOPs counted on the routed rows
// and the contiguous layout's padded rows; its axes refused in one line.
TEST(CliBench, MoeRowsHoldTheGroupedGemmsAgainstADenseLoop) {
  const auto r =
      run("bench moe --json --iters 1 --warmup 0 --set experts=3,9 --set top_k=2 --set tokens=50 "
          "--set d_model=24 --set d_expert=16 --set dtype=fp32,bf16 --no-torch");  // where PyTorch is
                                                                                   // installed too
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 8u) << r.out;  // 2 dtypes x 2 expert counts x 2 passes
  for (const auto& row : rows) {
    EXPECT_EQ(row["benchmark"], "moe");
    const bool backward = row["case"]["pass"] == "backward";
    EXPECT_DOUBLE_EQ(row["flops"].get<double>(), (backward ? 12.0 : 6.0) * 50 * 2 * 24 * 16) << row.dump();
    EXPECT_EQ(row["rows_padded"].get<int64_t>() % 64, 0) << row.dump();
    ASSERT_EQ(row["peers"].size(), 1u) << row.dump();
    EXPECT_EQ(row["peers"][0]["name"], "dense_loop");
    EXPECT_EQ(row["max_rel_diff_vs_peer"].get<double>(), 0.0) << row.dump();
  }
  for (const char* args : {"bench moe --set experts=4 --set top_k=5", "bench moe --set dtype=fp8",
                           "bench moe --set pass=both", "bench moe --set d_model=1G"}) {
    const auto bad = run(args);
    EXPECT_EQ(bad.code, 2) << args;
    EXPECT_EQ(bad.err.rfind("ridge: --set ", 0), 0u) << args << ": " << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << args << ": " << bad.err;
  }
}
