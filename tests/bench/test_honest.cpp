// Honest measurements: cold operand rotation, the level a row is held against, the above-roof flag
// and the spread of interleaved rounds. No timing assertions: synthetic samples and chips.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ridge/bench/measure.hpp"
#include "bench/result.hpp"
#include "ridge/core/error.hpp"
#include "ridge/roofline.hpp"
#include "roofline/json.hpp"

namespace {

using namespace ridge::bench;

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

TEST(ColdRotation, FootprintSpansFourTimesTheLastLevelCache) {
  const int64_t llc = int64_t{32} << 20;
  // m=1 n=576 k=7168 bf16: B is 8.26 MB, far inside a 32 MiB L3.
  const double per_copy = 2.0 * (7168 + 576 * 7168) + 2.0 * 576;
  const Rotation r = plan_rotation(per_copy, llc);
  EXPECT_TRUE(r.cold);
  EXPECT_GE(r.footprint, 4.0 * static_cast<double>(llc));
  // The fewest copies that do it: one less falls short.
  EXPECT_LT(static_cast<double>(r.copies - 1) * per_copy, 4.0 * static_cast<double>(llc));
  EXPECT_DOUBLE_EQ(r.footprint, static_cast<double>(r.copies) * per_copy);
}

TEST(ColdRotation, LargeOperandsNeedOneCopyAndTinyOnesHitTheCap) {
  const int64_t llc = int64_t{32} << 20;
  const Rotation big = plan_rotation(1e9, llc);
  EXPECT_EQ(big.copies, 1);
  EXPECT_TRUE(big.cold);
  // 64 bytes per copy would need two million copies: capped, and then not cold.
  const Rotation tiny = plan_rotation(64, llc, 4.0, 4096);
  EXPECT_EQ(tiny.copies, 4096);
  EXPECT_FALSE(tiny.cold);
  EXPECT_THROW(plan_rotation(0, llc), ridge::Error);
  EXPECT_THROW(plan_rotation(100, 0), ridge::Error);
  EXPECT_GT(last_level_cache_bytes(), 0);
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
  ASSERT_TRUE(fill_bound(cold, chip));
  EXPECT_EQ(cold.bound_level, "dram");
  EXPECT_DOUBLE_EQ(cold.bound_gflops, 0.5 * 1e10 / 1e9);

  Row warm = memory_bound_row("warm");
  ASSERT_TRUE(fill_bound(warm, chip));
  EXPECT_EQ(warm.bound_level, "l3");
  EXPECT_DOUBLE_EQ(warm.bound_gflops, 0.5 * 1e11 / 1e9);

  Row small = memory_bound_row("warm");
  small.bytes = 1e6;  // fits in L2
  small.flops = 5e5;
  ASSERT_TRUE(fill_bound(small, chip));
  EXPECT_EQ(small.bound_level, "l2");

  Row huge = memory_bound_row("warm");
  huge.bytes = 1e9;  // bigger than L3: DRAM even when warm
  huge.flops = 5e8;
  ASSERT_TRUE(fill_bound(huge, chip));
  EXPECT_EQ(huge.bound_level, "dram");

  Row unstated = memory_bound_row("");
  ASSERT_TRUE(fill_bound(unstated, chip));
  EXPECT_EQ(unstated.bound_level, "dram");
}

TEST(RowBound, AMeasurementAboveItsRoofIsFlaggedInJsonAndTable) {
  const auto chip = test_chip();
  // 2 GFLOP/s achieved against a cold bound of 0.5 x 10 GB/s = 5 GFLOP/s: fine.
  Row ok = memory_bound_row("cold");
  ok.median_ms = 1.0;
  ASSERT_TRUE(fill_bound(ok, chip));
  EXPECT_NEAR(ok.pct_of_bound, 40.0, 1e-9);
  EXPECT_FALSE(ok.above_roof());
  EXPECT_FALSE(ok.to_json()["above_roof"].get<bool>());

  // The same work in 0.2 ms: 10 GFLOP/s, 200% of the DRAM bound, as when B stayed in L3.
  Row fast = memory_bound_row("cold");
  fast.median_ms = 0.2;
  ASSERT_TRUE(fill_bound(fast, chip));
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
  ASSERT_TRUE(fill_bound(edge, chip));
  EXPECT_FALSE(edge.above_roof());
  EXPECT_EQ(to_table({edge}).find("ABOVE-ROOF"), std::string::npos);
}

TEST(Spread, RoundMediansThatDisagreeAreUnstable) {
  Measurement steady;
  steady.samples = {1.0, 1.01, 0.99, 1.02, 1.0, 0.98};
  steady.round_medians = {1.0, 1.01, 0.99};
  const Spread s = spread_of(steady);
  EXPECT_NEAR(s.pct, 100.0 * (1.01 - 0.99) / 1.0, 1e-9);
  EXPECT_FALSE(s.unstable);

  // One round ran at half speed (the machine's transient slowdowns): 2x apart.
  Measurement slow = steady;
  slow.round_medians = {1.0, 2.0, 1.02};
  const Spread u = spread_of(slow);
  EXPECT_NEAR(u.ratio, 2.0, 1e-12);
  EXPECT_NEAR(u.pct, 100.0 * (2.0 - 1.0) / 1.02, 1e-9);
  EXPECT_TRUE(u.unstable);

  // Without rounds the samples' p10..p90 decide, so one outlier sample does not flag a row.
  Measurement single;
  single.samples = {1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 5.0};
  EXPECT_FALSE(spread_of(single).unstable);
  single.samples = {1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0};
  EXPECT_TRUE(spread_of(single).unstable);

  // The row carries it, in the JSON and the table.
  Row r;
  r.benchmark = "attention";
  r.dtype = "bf16";
  r.set_time(slow);
  EXPECT_TRUE(r.unstable);
  EXPECT_TRUE(r.to_json()["unstable"].get<bool>());
  EXPECT_NEAR(r.to_json()["spread_pct"].get<double>(), u.pct, 1e-9);
  EXPECT_NE(to_table({r}).find("UNSTABLE"), std::string::npos);
  const Row back = Row::from_json(r.to_json());
  EXPECT_TRUE(back.unstable);
  EXPECT_FALSE(back.extra.contains("unstable"));
}

TEST(Interleaved, RoundsAlternateTheFunctionsAndKeepOneMedianPerRound) {
  std::vector<int> order;
  Options o;
  o.warmup = 0;
  o.iters = 6;
  const auto ms = measure_interleaved({[&] { order.push_back(0); }, [&] { order.push_back(1); }}, {o}, 3);
  ASSERT_EQ(ms.size(), 2u);
  for (const auto& m : ms) {
    EXPECT_EQ(m.round_medians.size(), 3u);
    EXPECT_EQ(m.samples.size(), 6u);  // 2 per round
  }
  EXPECT_EQ(order, (std::vector<int>{0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1}));
  EXPECT_THROW(measure_interleaved({[] {}}, {o, o}), ridge::Error);
}

}  // namespace
