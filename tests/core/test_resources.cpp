// Resources checked before they are used: the memory a process may still take (MemAvailable, lowered
// by its cgroup and by `ulimit -v`), and a JSON value shown in a message as a bounded excerpt, never a
// dump() of the whole (which recursed through a value nested 300,000 deep until the stack ran out).
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <chrono>
#include <string>

#include "core/json.hpp"
#include "ridge/core.hpp"
#include "common/address_space.hpp"

namespace {

using namespace ridge;
using nlohmann::json;

TEST(Resources, ExcerptOfAValueIsBoundedHoweverDeepOrLong) {
  EXPECT_EQ(input::excerpt(json(7)), "7");
  EXPECT_EQ(input::excerpt(json("abc")), "\"abc\"");
  EXPECT_EQ(input::excerpt(json::parse(R"({"a":[1,2],"b":null})")), R"({"a":[1,2],"b":null})");
  // Cut to max_chars with "...", as the messages always showed it.
  EXPECT_EQ(input::excerpt(json(std::string(100, 'x'))), "\"" + std::string(36, 'x') + "...");
  EXPECT_EQ(input::excerpt(json(std::string(100, 'x')), 10), "\"xxxxxx...");
  // Nested 300,000 deep (built without recursion): a few levels shown, then "...".
  json deep = json::array();
  for (int i = 0; i < 300000; ++i) {
    json outer = json::array();
    outer.push_back(std::move(deep));
    deep = std::move(outer);
  }
  const std::string d = input::excerpt(deep, 200);
  EXPECT_LE(d.size(), 200u);
  EXPECT_NE(d.find("..."), std::string::npos) << d;
  EXPECT_EQ(d.rfind("[[[[[[[[[", 0), 0u) << d;
  // Long: a million elements and a 10 MB string cost what the excerpt costs.
  json wide = json::array();
  for (int i = 0; i < 1000000; ++i) wide.push_back(i);
  wide.push_back(std::string(10 << 20, 'y'));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(input::excerpt(wide, 12), "[0,1,2,3,...");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0)
      << "1000 excerpts of a million-element array: each stops once it is full";
  EXPECT_EQ(input::excerpt(json::object({{"k", std::string(10 << 20, 'z')}}), 12), "{\"k\":\"zzz...");
}

TEST(Resources, ParseJsonRefusesNestingPastItsLimitNamingTheInput) {
  const std::string deep = std::string(300000, '[') + std::string(300000, ']');
  try {
    input::parse_json(deep, "vocab file 'v.json'");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("vocab file 'v.json': nested deeper than 256 levels", 0), 0u)
        << e.what();
  }
}

// `ulimit -v` (RLIMIT_AS) lowers what available_bytes() answers, so that a size checked against it is
// refused (ridge::Error, exit 2) where the allocation would fail (std::bad_alloc, exit 1).
TEST(Resources, AvailableBytesHonoursTheAddressSpaceLimit) {
  const int64_t before = memory::available_bytes();
  EXPECT_GT(before, 0);
  EXPECT_LE(before, memory::physical_bytes());
  const rlim_t room = rlim_t{512} << 20;
  test::AddressSpaceRoom limit(room);
  if (!limit.applied()) GTEST_SKIP() << "the hard limit is lower";
  const int64_t limited = memory::available_bytes();
  std::string refused;
  try {
    memory::check_fits(1e9, "a gigabyte");
  } catch (const Error& e) {
    refused = e.what();
  }
  ASSERT_TRUE(limit.restore());
  EXPECT_LE(limited, static_cast<int64_t>(room));
  EXPECT_GT(limited, 0);
  EXPECT_EQ(refused.rfind("a gigabyte: needs ", 0), 0u) << refused;
  EXPECT_GE(memory::available_bytes(), limited) << "restored";
}

}  // namespace
