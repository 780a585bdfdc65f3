// Honest measurements: cold operand rotation and the spread of interleaved rounds (the level a row
// is held against and the above-roof flag are report's: tests/report/test_row_bound.cpp). No timing
// assertions: synthetic samples.
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
