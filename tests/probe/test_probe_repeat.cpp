// The probe's repeat rule for compute phases, on synthetic figures (no timing).
#include <gtest/gtest.h>

#include "ridge/probe.hpp"

namespace {

using ridge::probe::needs_repeat;

TEST(ProbeRepeat, AllThreadsAtTheOneThreadRateIsRepeated) {
  // The run the issue saw: fp32 116 GFLOP/s on 2 threads where one thread does 115.
  EXPECT_TRUE(needs_repeat(115e9, 116e9, 2, 2, 0));
  // Healthy scaling (229 of 2 x 115) is kept.
  EXPECT_FALSE(needs_repeat(115e9, 229e9, 2, 2, 0));
  // The threshold is 0.8 x threads x one thread.
  EXPECT_FALSE(needs_repeat(100e9, 160e9, 2, 2, 0));
  EXPECT_TRUE(needs_repeat(100e9, 159e9, 2, 2, 0));
  // A NaN or zero all-threads figure is suspect too.
  EXPECT_TRUE(needs_repeat(100e9, 0, 2, 2, 0));
}

TEST(ProbeRepeat, RepeatsAreBoundedAndOneThreadNeverRepeats) {
  EXPECT_TRUE(needs_repeat(115e9, 116e9, 2, 2, ridge::probe::kMaxPeakRepeats - 1));
  EXPECT_FALSE(needs_repeat(115e9, 116e9, 2, 2, ridge::probe::kMaxPeakRepeats));
  EXPECT_FALSE(needs_repeat(115e9, 116e9, 1, 2, 0));
  EXPECT_FALSE(needs_repeat(0, 116e9, 2, 2, 0));  // no one-thread figure to compare with
}

TEST(ProbeRepeat, ScalingIsExpectedOverCoresNotSmtSiblings) {
  // 8 threads on 4 cores with SMT: compute scales to about 4x, which is not suspect.
  EXPECT_FALSE(needs_repeat(100e9, 380e9, 8, 4, 0));
  EXPECT_TRUE(needs_repeat(100e9, 300e9, 8, 4, 0));
  // Unknown cores: threads are the expectation.
  EXPECT_TRUE(needs_repeat(100e9, 380e9, 8, 0, 0));
}

}  // namespace
