// Measured points against a chip's roofs: the level a point is held against, the above-roof flag,
// and the plot's input (every dtype roof of a chip, numbered measured points).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "report/report.hpp"
#include "ridge/roofline.hpp"
#include "roofline/json.hpp"

namespace {

namespace rr = ridge::roofline;
namespace rp = ridge::report;

rr::Chip cpu_chip() {
  return rr::parse_chip(nlohmann::json::parse(R"({
    "id": "cpu", "name": "Test CPU", "kind": "cpu",
    "peak_flops": {"fp32": {"value": 1e11, "source": "t"}, "bf16": {"value": 4e11, "source": "t"}},
    "memory": [
      {"level": "dram", "bandwidth": {"value": 1e10, "source": "t"}, "capacity": {"value": 6.4e10, "source": "t"}},
      {"level": "l3", "bandwidth": {"value": 1e11, "source": "t"}, "capacity": {"value": 33554432, "source": "t"}}]})"),
                        "test");
}

rp::MeasuredPoint point(const std::string& dtype, double gflops, double intensity, const std::string& cache,
                        double bytes) {
  rp::MeasuredPoint p;
  p.benchmark = "gemm";
  p.label = "gemm m=1";
  p.dtype = dtype;
  p.gflops = gflops;
  p.intensity = intensity;
  p.cache = cache;
  p.working_set = bytes;
  return p;
}

TEST(MeasuredRoof, ColdPointsMeetTheDramRoofAndWarmOnesTheLevelTheyFit) {
  const auto c = cpu_chip();
  auto cold = point("bf16", 5, 1.0, "cold", 8e6);
  rp::hold_against(cold, c);
  EXPECT_EQ(cold.bound_level, "dram");
  EXPECT_DOUBLE_EQ(cold.bound_flops, 1e10);  // 1 FLOP/B x 10 GB/s
  EXPECT_NEAR(cold.pct_of_bound, 50.0, 1e-9);
  EXPECT_FALSE(cold.above_roof);

  auto warm = point("bf16", 5, 1.0, "warm", 8e6);
  rp::hold_against(warm, c);
  EXPECT_EQ(warm.bound_level, "l3");
  EXPECT_DOUBLE_EQ(warm.bound_flops, 1e11);
  EXPECT_EQ(rp::memory_level_for(c, "warm", 1e9), "dram");
  EXPECT_EQ(rp::memory_level_for(c, "", 1e3), "dram");
}

TEST(MeasuredRoof, APointAboveItsRoofIsFlaggedAndFp8UsesTheBf16Units) {
  const auto c = cpu_chip();
  // 25.3 GFLOP/s against a 10 GFLOP/s DRAM roof: 253%, the issue's decode row.
  auto p = point("bf16", 25.3, 1.0, "cold", 8e6);
  rp::hold_against(p, c);
  EXPECT_NEAR(p.pct_of_bound, 253.0, 1e-9);
  EXPECT_TRUE(p.above_roof);
  // Within the 3% tolerance: not flagged.
  auto q = point("bf16", 10.2, 1.0, "cold", 8e6);
  rp::hold_against(q, c);
  EXPECT_FALSE(q.above_roof);
  // fp8 on a chip without fp8 arithmetic: the bf16 compute roof.
  auto f = point("fp8_e4m3", 100, 1e4, "cold", 8e6);
  rp::hold_against(f, c);
  EXPECT_EQ(f.roof_dtype, "bf16");
  EXPECT_DOUBLE_EQ(f.bound_flops, 4e11);

  const auto spec = rp::plot_spec({c}, {}, {q, p}, "t");
  int measured = 0;
  for (const auto& pt : spec["points"]) {
    if (pt["kind"] != "measured") continue;
    ++measured;
    EXPECT_EQ(pt["num"].get<int>(), measured);
    EXPECT_EQ(pt["above_roof"].get<bool>(), measured == 2);
  }
  EXPECT_EQ(measured, 2);
}

TEST(MeasuredRoof, PlotSpecHasEveryDtypeRoofOfH100IncludingFp8) {
  const auto h100 = rr::load_chip("h100");
  const auto spec = rp::plot_spec({h100}, rp::standard_ops(), {}, "t");
  std::set<std::string> dtypes;
  for (const auto& r : spec["roofs"])
    if (r["chip"] == "h100") dtypes.insert(r["dtype"].get<std::string>());
  for (const auto& [dt, pk] : h100.peak_flops) EXPECT_TRUE(dtypes.count(dt)) << dt;
  EXPECT_TRUE(dtypes.count("fp8"));
}

}  // namespace
