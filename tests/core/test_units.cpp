// Units: parsing what users type, printing with units and three significant digits.
#include <gtest/gtest.h>

#include <string>

#include "ridge/core.hpp"

namespace {

using namespace ridge;
using units::parse_bytes;
using units::parse_count;

TEST(Units, ParseBytesAcceptsNumbersAndUnits) {
  EXPECT_EQ(parse_bytes("4096", "size"), 4096);
  EXPECT_EQ(parse_bytes("1e9", "size"), 1000000000);
  EXPECT_EQ(parse_bytes("64KiB", "size"), 64 * 1024);
  EXPECT_EQ(parse_bytes("64 KiB", "size"), 64 * 1024);
  EXPECT_EQ(parse_bytes("64kib", "size"), 64 * 1024);
  EXPECT_EQ(parse_bytes("64k", "size"), 64 * 1024);
  EXPECT_EQ(parse_bytes("1.5GiB", "size"), 3LL << 29);
  EXPECT_EQ(parse_bytes("2GB", "size"), 2000000000);
  EXPECT_EQ(parse_bytes("512MB", "size"), 512000000);
  EXPECT_EQ(parse_bytes("1TiB", "size"), 1LL << 40);
  EXPECT_EQ(parse_bytes("3TB", "size"), 3000000000000);
  EXPECT_EQ(parse_bytes("7B", "size"), 7);
  EXPECT_EQ(parse_bytes("0", "size", true), 0);
  EXPECT_EQ(parse_bytes("1EiB", "size"), 1LL << 60) << "2^60 is the documented limit";
}

void expect_error_naming(const std::function<void()>& f, const std::string& what, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "accepted '" << text << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(what + ":", 0), 0u) << msg;  // the message starts with the argument's name
    EXPECT_NE(msg.find(text), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
}

TEST(Units, ParseBytesRejectsNonsenseWithTheArgumentsName) {
  for (const char* bad : {"", "abc", "-1", "-1KiB", "0", "0KiB", "1.5", "1.5B", "12 parsecs", "1QB", "nan",
                          "inf", "1e300", "2EiB", " 5", "0x10", "5KiBx"})
    expect_error_naming([&] { parse_bytes(bad, "--size"); }, "--size", bad);
}

TEST(Units, ParseCountAcceptsAndRejects) {
  EXPECT_EQ(parse_count("4096", "m"), 4096);
  EXPECT_EQ(parse_count("4k", "m"), 4096);
  EXPECT_EQ(parse_count("4K", "m"), 4096);
  EXPECT_EQ(parse_count("1m", "m"), 1 << 20);
  EXPECT_EQ(parse_count("1e6", "m"), 1000000);
  EXPECT_EQ(parse_count("1099511627776", "m"), 1LL << 40);
  EXPECT_EQ(parse_count("4g", "m"), 4LL << 30);
  EXPECT_EQ(parse_count("1024G", "m"), 1LL << 40);
  // The multiplier comes before the range check: these would wrap or pass 2^40 after it.
  for (const char* bad : {"4294967296G", "1025G", "1048577M", "1073741825k", "1e12k"})
    expect_error_naming([&] { parse_count(bad, "--m"); }, "--m", bad);
  for (const char* bad : {"", "0", "-3", "2.5", "1KiB", "4t", "x", "1099511627777", "nan", "0x20"})
    expect_error_naming([&] { parse_count(bad, "--m"); }, "--m", bad);
}

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
