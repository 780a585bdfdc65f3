// The roof a bench row is held against (report::hold_row): the memory level its cache state and
// working set pick, the above-roof flag in JSON and the table, and the fp8 row's compute roof.
// Synthetic chips and rows; no timing assertions.
#include <gtest/gtest.h>

#include <string>

#include "roofline/json.hpp"
#include "bench/result.hpp"
#include "report/report.hpp"
#include "ridge/roofline.hpp"

namespace {

using namespace ridge::bench;
using ridge::report::hold_row;

// A CPU-like chip: 100 GFLOP/s fp32, DRAM 10 GB/s, L3 (32 MiB) 100 GB/s, L2 (2 MiB) 400 GB/s.
ridge::roofline::Chip test_chip() {
  const auto doc = nlohmann::json::parse(R"({
    "id": "test", "name": "Test CPU", "kind": "cpu",
    "peak_flops": {"fp32": {"value": 1e11, "source": "t"}},
    "memory": [
      {"level": "dram", "bandwidth": {"value": 1e10, "source": "t"}, "capacity": {"value": 6.4e10, "source": "t"}},
      {"level": "l3", "bandwidth": {"value": 1e11, "source": "t"}, "capacity": {"value": 33554432, "source": "t"}},
      {"level": "l2", "bandwidth": {"value": 4e11, "source": "t"}, "capacity": {"value": 2097152, "source": "t"}}]})");
  return ridge::roofline::parse_chip(doc, "test");
}

Row memory_bound_row(const std::string& cache) {
  Row r;
  r.benchmark = "gemm";
  r.dtype = "fp32";
  r.cache = cache;
  r.flops = 2e6;  // intensity 0.5 FLOP/B: memory-bound at every level of the test chip
  r.bytes = 4e6;  // fits in L3, not in L2
  r.median_ms = 1.0;
  return r;
}

TEST(RowBound, ColdRowsAreHeldAgainstDramAndWarmRowsAgainstTheLevelTheyFit) {
  const auto chip = test_chip();
  Row cold = memory_bound_row("cold");
  ASSERT_TRUE(hold_row(cold, chip));
  EXPECT_EQ(cold.bound_level, "dram");
  EXPECT_DOUBLE_EQ(cold.bound_gflops, 0.5 * 1e10 / 1e9);

  Row warm = memory_bound_row("warm");
  ASSERT_TRUE(hold_row(warm, chip));
  EXPECT_EQ(warm.bound_level, "l3");
  EXPECT_DOUBLE_EQ(warm.bound_gflops, 0.5 * 1e11 / 1e9);

  Row small = memory_bound_row("warm");
  small.bytes = 1e6;  // fits in L2
  small.flops = 5e5;
  ASSERT_TRUE(hold_row(small, chip));
  EXPECT_EQ(small.bound_level, "l2");

  Row huge = memory_bound_row("warm");
  huge.bytes = 1e9;  // bigger than L3: DRAM even when warm
  huge.flops = 5e8;
  ASSERT_TRUE(hold_row(huge, chip));
  EXPECT_EQ(huge.bound_level, "dram");

  Row unstated = memory_bound_row("");
  ASSERT_TRUE(hold_row(unstated, chip));
  EXPECT_EQ(unstated.bound_level, "dram");
}

TEST(RowBound, AMeasurementAboveItsRoofIsFlaggedInJsonAndTable) {
  const auto chip = test_chip();
  // 2 GFLOP/s achieved against a cold bound of 0.5 x 10 GB/s = 5 GFLOP/s: fine.
  Row ok = memory_bound_row("cold");
  ok.median_ms = 1.0;
  ASSERT_TRUE(hold_row(ok, chip));
  EXPECT_NEAR(ok.pct_of_bound, 40.0, 1e-9);
  EXPECT_FALSE(ok.above_roof());
  EXPECT_FALSE(ok.to_json()["above_roof"].get<bool>());

  // The same work in 0.2 ms: 10 GFLOP/s, 200% of the DRAM bound, as when B stayed in L3.
  Row fast = memory_bound_row("cold");
  fast.median_ms = 0.2;
  ASSERT_TRUE(hold_row(fast, chip));
  EXPECT_NEAR(fast.pct_of_bound, 200.0, 1e-9);
  EXPECT_TRUE(fast.above_roof());
  const auto j = fast.to_json();
  EXPECT_TRUE(j["above_roof"].get<bool>());
  EXPECT_EQ(j["cache"], "cold");
  const std::string t = to_table({ok, fast});
  EXPECT_NE(t.find("ABOVE-ROOF"), std::string::npos) << t;
  EXPECT_NE(t.find("the roof is wrong"), std::string::npos) << t;
  // Within the tolerance is not flagged.
  Row edge = memory_bound_row("cold");
  edge.median_ms = 0.4 / 1.02;  // 102% of the bound
  ASSERT_TRUE(hold_row(edge, chip));
  EXPECT_FALSE(edge.above_roof());
  EXPECT_EQ(to_table({edge}).find("ABOVE-ROOF"), std::string::npos);
}

TEST(RowBound, Fp8RowsUseTheBf16UnitsWhenTheChipHasNoFp8Peak) {
  // The test chip with a bf16 peak of 4e11 and no fp8: an fp8 row's compute roof is bf16.
  auto doc = nlohmann::json::parse(R"({
    "id": "test", "name": "Test CPU", "kind": "cpu",
    "peak_flops": {"fp32": {"value": 1e11, "source": "t"}, "bf16": {"value": 4e11, "source": "t"}},
    "memory": [{"level": "dram", "bandwidth": {"value": 1e10, "source": "t"}}]})");
  const auto chip = ridge::roofline::parse_chip(doc, "test");
  Row r;
  r.dtype = "fp8_e4m3";
  r.flops = 1e9;
  r.bytes = 1e4;  // intensity 1e5: compute-bound
  r.median_ms = 10;
  ridge::report::hold_fp8_row(r, chip);
  EXPECT_DOUBLE_EQ(r.bound_gflops, 400.0);
  EXPECT_EQ(r.bound_level, "dram");
  EXPECT_EQ(r.extra["compute_roof"], "bf16 (no fp8 units)");
  EXPECT_NEAR(r.pct_of_bound, 100.0 * 100.0 / 400.0, 1e-9);  // 1e9 FLOPs in 10 ms = 100 GFLOP/s
  // hold_row keeps the roof the benchmark chose.
  ASSERT_TRUE(hold_row(r, chip));
  EXPECT_DOUBLE_EQ(r.bound_gflops, 400.0);
}

TEST(RowBound, ASinkHookHoldsEveryRowAndNoChipLeavesRowsUnbounded) {
  const auto chip = test_chip();
  std::FILE* devnull = std::fopen("/dev/null", "w");
  ASSERT_NE(devnull, nullptr);
  {
    Sink held(Format::json, devnull, ridge::report::hold_rows_against([&] { return &chip; }));
    held.emit(memory_bound_row("cold"));
    ASSERT_EQ(held.rows().size(), 1u);
    EXPECT_EQ(held.rows()[0].bound_level, "dram");
    EXPECT_DOUBLE_EQ(held.rows()[0].bound_gflops, 5.0);
    Sink none(Format::json, devnull, ridge::report::hold_rows_against([] { return nullptr; }));
    none.emit(memory_bound_row("cold"));
    EXPECT_EQ(none.rows()[0].bound_gflops, 0.0);
    EXPECT_EQ(none.rows()[0].bound_level, "");
  }
  std::fclose(devnull);
}

}  // namespace
