#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "ridge/bench/measure.hpp"
#include "ridge/core/error.hpp"

namespace {

using namespace ridge::bench;

TEST(Stats, MatchHandComputedValues) {
  const std::vector<double> s = {4, 1, 100, 3, 2};  // unsorted on purpose
  const Stats st = compute_stats(s);
  EXPECT_EQ(st.n, 5u);
  EXPECT_DOUBLE_EQ(st.mean, 22.0);
  EXPECT_DOUBLE_EQ(st.median, 3.0);
  EXPECT_DOUBLE_EQ(st.min, 1.0);
  EXPECT_DOUBLE_EQ(st.max, 100.0);
  // Squared deviations 441 + 400 + 361 + 324 + 6084 = 7610, over n - 1 = 4.
  EXPECT_NEAR(st.stddev, std::sqrt(7610.0 / 4.0), 1e-12);
  // Positions q * (n - 1): 0.4 between 1 and 2; 3.6 between 4 and 100.
  EXPECT_NEAR(st.p10, 1.4, 1e-12);
  EXPECT_NEAR(st.p90, 4.0 + 0.6 * 96.0, 1e-12);
  EXPECT_NEAR(st.cv, std::sqrt(7610.0 / 4.0) / 22.0, 1e-12);
}

TEST(Stats, EvenCountMedianAndSingleSample) {
  const std::vector<double> even = {1, 2, 3, 10};
  EXPECT_DOUBLE_EQ(compute_stats(even).median, 2.5);
  const std::vector<double> one = {7};
  const Stats st = compute_stats(one);
  EXPECT_DOUBLE_EQ(st.median, 7);
  EXPECT_DOUBLE_EQ(st.p10, 7);
  EXPECT_DOUBLE_EQ(st.stddev, 0);
  EXPECT_EQ(compute_stats(std::vector<double>{}).n, 0u);
  EXPECT_THROW(quantile(one, 1.5), ridge::Error);
}

TEST(Measure, WarmupIsRunButNotTimed) {
  int calls = 0, syncs = 0;
  Options o;
  o.warmup = 3;
  o.iters = 5;
  o.sync = [&] { ++syncs; };
  // The warm-up calls are slow; if any were timed, the max sample would show it.
  const auto m = measure(
      [&] {
        if (calls++ < 3) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      },
      o);
  EXPECT_EQ(calls, 8);
  EXPECT_EQ(m.samples.size(), 5u);
  EXPECT_EQ(m.warmup, 3);
  EXPECT_LT(m.stats.max, 0.025);
  EXPECT_EQ(syncs, 10);  // before each of the two clock reads of every timed call
  EXPECT_EQ(m.stats.n, 5u);
}

TEST(Measure, RunsUntilMinimumTimeAndStopsAtMaximum) {
  Options o;
  o.warmup = 0;
  o.iters = 2;
  o.min_time_s = 0.03;
  const auto m = measure([] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); }, o);
  double total = 0;
  for (double s : m.samples) total += s;
  EXPECT_GE(total, 0.03);
  EXPECT_GE(m.samples.size(), 2u);

  Options cap;
  cap.warmup = 0;
  cap.iters = 1000;
  cap.max_time_s = 0.02;
  const auto c = measure([] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); }, cap);
  EXPECT_GE(c.samples.size(), 1u);
  EXPECT_LT(c.samples.size(), 1000u);
}

TEST(Measure, SamplesAreTheTimedWork) {
  Options o;
  o.warmup = 1;
  o.iters = 3;
  const auto m = measure([] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); }, o);
  for (double s : m.samples) EXPECT_GE(s, 0.0099);
  EXPECT_DOUBLE_EQ(m.median_ms(), m.stats.median * 1e3);
}

TEST(Measure, RejectsBadOptions) {
  Options o;
  o.iters = 0;
  EXPECT_THROW(measure([] {}, o), ridge::Error);
  o.iters = 1;
  o.warmup = -1;
  EXPECT_THROW(measure([] {}, o), ridge::Error);
  o.warmup = 0;
  o.min_time_s = -1;
  EXPECT_THROW(measure([] {}, o), ridge::Error);
  EXPECT_THROW(measure(std::function<void()>{}, {}), ridge::Error);
}

TEST(Measure, DoNotOptimizeKeepsTheWork) {
  // Not a timing assertion: only that the helpers compile for lvalues and rvalues and keep values.
  int x = 41;
  do_not_optimize(x);
  x += 1;
  do_not_optimize(x + 0);
  clobber_memory();
  EXPECT_EQ(x, 42);
}

}  // namespace
