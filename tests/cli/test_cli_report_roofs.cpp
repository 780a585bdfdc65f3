// `ridge report --json`: every roof of the chosen chips (H100's fp8 included) and measured rows
// numbered and flagged when above their roof. A given chip file stands in for the probe (tests
// must not time the machine).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR, RIDGE_BINARY (generated)
#include "run.hpp"
#include "core/json.hpp"

namespace {

using ridge::test::run;

TEST(CliReport, JsonHasEveryRoofAndFlagsAPointAboveItsRoof) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("ridge_cli_report_roofs." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto rows = dir / "rows.jsonl";
  // On tpu-v5e (bf16 197 TFLOP/s, HBM 819 GB/s) a bf16 decode row at intensity ~1 FLOP/B is bound
  // by 819 GFLOP/s of memory; the first row reaches half of it, the second 2000 GFLOP/s: above.
  std::ofstream(rows)
      << R"({"benchmark": "gemm", "case": {"m": 1, "n": 576, "k": 7168}, "dtype": "bf16", "cache": "cold", "gflops": 409.5, "flops": 8257536, "bytes": 8258688})"
      << "\n"
      << R"({"benchmark": "gemm", "case": {"m": 1, "n": 4096, "k": 7168}, "dtype": "bf16", "cache": "cold", "gflops": 2000, "flops": 58720256, "bytes": 58728448})"
      << "\n";
  const auto r =
      run("report --this " + std::string(RIDGE_SOURCE_DIR) + "/hardware/tpu-v5e.json --hw h100 --out " +
          (dir / "chart").string() + " --results " + rows.string() + " --no-measure --json");
  std::filesystem::remove_all(dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  std::set<std::string> h100;
  for (const auto& roof : j.at("roofs"))
    if (roof["chip"] == "h100") h100.insert(roof["dtype"].get<std::string>());
  for (const char* dt : {"fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8"})
    EXPECT_TRUE(h100.count(dt)) << dt;

  const auto& m = j.at("measured");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0]["num"], 1);
  EXPECT_EQ(m[1]["num"], 2);
  EXPECT_EQ(m[0]["bound_level"], "hbm");
  EXPECT_EQ(m[0]["cache"], "cold");
  EXPECT_NEAR(m[0]["pct_of_bound"].get<double>(), 409.5e9 / (8257536.0 / 8258688 * 8.19e11) * 100, 1e-6);
  EXPECT_FALSE(m[0]["above_roof"].get<bool>());
  EXPECT_TRUE(m[1]["above_roof"].get<bool>());
  EXPECT_GT(m[1]["pct_of_bound"].get<double>(), 200.0);
}

}  // namespace
