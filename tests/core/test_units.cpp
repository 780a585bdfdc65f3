// Units: printing with units and three significant digits. (Reading them: test_numbers.cpp.)
#include <gtest/gtest.h>

#include <string>

#include "ridge/core.hpp"

namespace {

using namespace ridge;

TEST(Units, FormatKeepsThreeDigitsAndNeverAnExponent) {
  using namespace units;
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1 KiB");  // whole sizes print whole
  EXPECT_EQ(format_bytes(1 << 20), "1 MiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(1.5 * (1 << 30)), "1.50 GiB");
  EXPECT_EQ(format_bytes(1000 * 1024), "1000 KiB");
  EXPECT_EQ(format_bytes(1023.9 * 1024), "1.00 MiB");
  EXPECT_EQ(format_bytes(32768), "32 KiB");
  EXPECT_EQ(format_seconds(0.0123), "12.3 ms");
  EXPECT_EQ(format_seconds(4.56e-6), "4.56 us");
  EXPECT_EQ(format_seconds(0.9996e-3), "1.00 ms");
  EXPECT_EQ(format_seconds(2.5), "2.50 s");
  EXPECT_EQ(format_seconds(1500), "1500 s");
  EXPECT_EQ(format_seconds(0), "0 s");
  EXPECT_EQ(format_seconds(3e-10), "0.30 ns");
  EXPECT_EQ(format_flops(9.89e14), "989 TFLOP/s");
  EXPECT_EQ(format_flops(999.7e9), "1.00 TFLOP/s");
  EXPECT_EQ(format_rate(3.35e12), "3.35 TB/s");
  EXPECT_EQ(format_rate(-2e9), "-2.00 GB/s");
  EXPECT_EQ(format_count(12), "12.0");
  EXPECT_EQ(format_count(1.07e9), "1.07 G");
  for (double v = 1e-12; v < 1e20; v *= 1.37) {
    for (const std::string& s :
         {format_bytes(v), format_seconds(v), format_flops(v), format_rate(v), format_count(v)})
      EXPECT_EQ(s.find('e'), std::string::npos) << s;
  }
}

}  // namespace
