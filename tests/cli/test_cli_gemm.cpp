// `ridge bench gemm` through the real binary, on a tiny shape file: every dtype and both grouped
// layouts produce rows in the result schema with their peers; bad flags give one-line errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "run.hpp"
#include "core/json.hpp"

namespace {

using ridge::test::run;

std::string tiny_shapes() {
  const std::string path = ::testing::TempDir() + "ridge_gemm_tiny_shapes.json";
  std::ofstream(path) << R"({"dense": [{"m": 65, "n": 130, "k": 200}],
    "grouped_contiguous": [{"groups": 2, "m_per_group": 64, "n": 96, "k": 256}],
    "grouped_masked": [{"groups": 2, "m_per_group": 20, "n": 96, "k": 256}],
    "decode": [{"m": 3, "n": 257, "k": 300}]})";
  return path;
}

TEST(CliGemm, RowsForEveryDtypeAndLayout) {
  const auto r = run("bench gemm --shapes " + tiny_shapes() +
                     " --json --iters 1 --warmup 0 --no-progress --set threads=1,2");
  ASSERT_EQ(r.code, 0) << r.err;
  std::set<std::string> seen;
  int rows = 0;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    ++rows;
    EXPECT_EQ(j["benchmark"], "gemm");
    ASSERT_TRUE(j["case"].contains("m") && j["case"].contains("n") && j["case"].contains("k")) << line;
    EXPECT_GT(j["median_ms"].get<double>(), 0.0);
    EXPECT_GT(j["gflops"].get<double>(), 0.0);
    EXPECT_GT(j["gbps"].get<double>(), 0.0);
    const std::string dtype = j["dtype"];
    const std::string layout = j["case"].value("layout", std::string("dense"));
    seen.insert(dtype + "/" + layout);
    if (dtype == "fp8_e4m3" && layout == "dense") {
      EXPECT_TRUE(j.contains("packed_b_ms")) << line;
      if (j.contains("calc_diff_vs_peer")) {
        EXPECT_LT(j["calc_diff_vs_peer"].get<double>(), 1e-3);
      }
    }
    if (layout != "dense") {
      EXPECT_EQ(j["case"]["groups"], 2);
      ASSERT_EQ(j["peers"].size(), 1u) << line;
      EXPECT_EQ(j["peers"][0]["name"], "ridge_fp8_dense_same_size");
    }
  }
  // 2 dense shapes x 3 dtypes + 2 grouped, for each of 2 thread counts.
  EXPECT_EQ(rows, 2 * (2 * 3 + 2));
  for (const char* want :
       {"fp32/dense", "bf16/dense", "fp8_e4m3/dense", "fp8_e4m3/contiguous", "fp8_e4m3/masked"})
    EXPECT_TRUE(seen.count(want)) << want;
}

TEST(CliGemm, BadInputIsOneLineAndExitTwo) {
  for (const std::string args :
       {"bench gemm --dtype fp16 --no-progress", "bench gemm --set set=bogus --no-progress",
        "bench gemm --shapes /nonexistent/shapes.json --no-progress",
        "bench gemm --set typo=1 --no-progress"}) {
    const auto r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(r.err.rfind("ridge: ", 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

}  // namespace
