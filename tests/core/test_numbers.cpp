// The one parser of numbers a user types (ridge/core/numbers.hpp): every spelling it accepts and every one
// it refuses, once, in tables; and the one wording of its error. The CLI's options, the environment knobs
// and the grid axes all read their numbers here, so these tables are the rule for all of them.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ridge/core.hpp"

namespace {

using namespace ridge;
using numbers::Fault;
using numbers::IntegerRule;
using numbers::RealRule;

constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr IntegerRule kAny{};
const std::string k400Nines(400, '9');

std::string fault_name(Fault f) {
  constexpr const char* kNames[] = {"accepted", "malformed", "out of range", "not a multiple", "not whole"};
  return kNames[static_cast<int>(f)];
}

numbers::IntegerRead read(std::string_view text, const IntegerRule& rule) {
  return numbers::read_integer(text, rule);
}
numbers::RealRead read(std::string_view text, const RealRule& rule) {
  return numbers::read_real(text, rule);
}

// Each text read under `rule`: accepted, with its value.
template <typename Rule, typename Value>
void expect_accepted(const Rule& rule, const std::vector<std::pair<std::string, Value>>& cases) {
  for (const auto& [text, value] : cases) {
    const auto r = read(text, rule);
    EXPECT_EQ(fault_name(r.fault), "accepted") << "'" << text << "'";
    EXPECT_EQ(r.value, value) << "'" << text << "'";
  }
}

// Each text read under `rule`: refused, for `fault`.
template <typename Rule>
void expect_refused(const Rule& rule, Fault fault, const std::vector<std::string>& texts) {
  for (const auto& text : texts)
    EXPECT_EQ(fault_name(read(text, rule).fault), fault_name(fault)) << "'" << text << "'";
}

// Every integer: a sign (+ or -), then decimal digits. A leading zero is decimal; no exponent, no hex, no
// space anywhere, no suffix unless the rule takes counts.
TEST(Numbers, IntegerSpellings) {
  expect_accepted<IntegerRule, int64_t>(
      kAny, {{"0", 0},
             {"16", 16},
             {"-1", -1},
             {"+5", 5},
             {"010", 10},  // decimal, as strtol in base 10 and Python's int() read it
             {"-010", -10},
             {"+0", 0},
             {"-0", 0},
             {"0000000000000000000000000001", 1},
             {"9223372036854775807", kMax},
             {"-9223372036854775808", kMin}});
  expect_refused(kAny, Fault::malformed,
                 {"",     "+",     "-",   "1e3", "1E3",
                  "0x10", "0X10",  "0b1", "1.5", "1.",
                  ".5",   " 1",    "1 ",  "1\n", "\t1",
                  "1 0",  "1_000", "1,2", "+-1", "--1",
                  "4x",   "abc",   "nan", "inf", "99999999999999999999x",
                  "4k"});  // "1e3": an integer is wanted; "4k": a suffix only where the rule takes counts
  expect_refused(kAny, Fault::out_of_range,
                 {"9223372036854775808", "-9223372036854775809", "99999999999999999999",
                  "-99999999999999999999", k400Nines});
  const IntegerRule r100{1, 100};
  expect_accepted<IntegerRule, int64_t>(r100, {{"100", 100}, {"+1", 1}, {"001", 1}});
  expect_refused(r100, Fault::out_of_range, {"0", "101", "-5", "-0"});
  const IntegerRule block{16, 1024, numbers::Suffix::none, 16};  // RIDGE_ATTENTION_BLOCK_Q's
  expect_accepted<IntegerRule, int64_t>(block, {{"48", 48}, {"016", 16}});
  expect_refused(block, Fault::out_of_range, {"0", "2048"});
  expect_refused(block, Fault::not_a_multiple, {"40", "17"});
}

// Counts (shape dimensions, grid axes): 1 .. 2^40, with k, M, G for 2^10, 2^20, 2^30, applied before the
// range check (so "4294967296G" is out of range, not a wrap).
TEST(Numbers, CountSpellings) {
  expect_accepted<IntegerRule, int64_t>(numbers::kCount, {{"4096", 4096},
                                                          {"4k", 4096},
                                                          {"4K", 4096},
                                                          {"1m", 1 << 20},
                                                          {"1M", 1 << 20},
                                                          {"2g", int64_t{2} << 30},
                                                          {"1024G", int64_t{1} << 40},
                                                          {"+4k", 4096},
                                                          {"010k", 10240},
                                                          {"1099511627776", int64_t{1} << 40}});
  expect_refused(numbers::kCount, Fault::malformed,
                 {"1e6", "1.5k", "4 k", "4kk", "4t", "1KiB", "4kb", "k", "0x20", " 4k", "4096 "});
  expect_refused(numbers::kCount, Fault::out_of_range,
                 {"0", "-3", "-4k", "1099511627777", "1025G", "1048577M", "1073741825k", "4294967296G",
                  "9223372036854775807k", "99999999999999999999k"});
}

// Every real: a decimal with an optional exponent, finite as a double; no hex float, inf or nan.
TEST(Numbers, RealSpellings) {
  const RealRule any{};
  expect_accepted<RealRule, double>(any, {{"0.5", 0.5},
                                          {".5", 0.5},
                                          {"5.", 5},
                                          {"-2", -2},
                                          {"+2", 2},
                                          {"1e-3", 1e-3},
                                          {"1E3", 1000},
                                          {"1e+3", 1000},
                                          {"010", 10},
                                          {"1.5e300", 1.5e300}});
  expect_refused(any, Fault::malformed,
                 {"", "nan", "NaN", "inf", "-inf", "Infinity", "0x10", "0x1p3", "1e", "1e+", "e5", ".", "+",
                  "--1", " 1", "1 ", "1,5", "1.2.3", "4x"});
  // Past a double, and below its smallest (never read as 0).
  expect_refused(any, Fault::out_of_range, {"1e400", "-1e400", "1e-400"});
  const RealRule open_low{0, 1, true, false}, open_high{0, 1, false, true};
  expect_accepted<RealRule, double>(open_low, {{"1", 1}});
  expect_refused(open_low, Fault::out_of_range, {"0", "-0", "1.5"});
  expect_accepted<RealRule, double>(open_high, {{"0", 0}});
  expect_refused(open_high, Fault::out_of_range, {"1", "-1e-3"});
}

// Byte sizes: a decimal (a fraction, but no exponent: a byte size is a whole number, and "1e3" is refused
// wherever an integer is wanted) with an optional unit (binary KiB ... EiB and K, M, G, T, P; decimal KB ...
// EB; any case), after the number or after spaces, that comes to a whole number of bytes in lo .. hi.
TEST(Numbers, ByteSizeSpellings) {
  const std::vector<std::pair<std::string, int64_t>> accepted = {
      {"4096", 4096},
      {"1000000000", 1000000000},
      {"64KiB", 64 * 1024},
      {"64 KiB", 64 * 1024},
      {"64  KiB", 64 * 1024},
      {"64kib", 64 * 1024},
      {"64k", 64 * 1024},
      {"1.5GiB", int64_t{3} << 29},
      {"2GB", 2000000000},
      {"512MB", 512000000},
      {"1TiB", int64_t{1} << 40},
      {"3TB", 3000000000000},
      {"7B", 7},
      {"+4096", 4096},
      {"010", 10},
      {"0.5KiB", 512},
      {"1EB", 1000000000000000000},
      {"1eb", 1000000000000000000},  // E is a unit's, never an exponent's
      {"1EiB", int64_t{1} << 60}};   // the documented limit
  for (const auto& [text, value] : accepted) EXPECT_EQ(numbers::parse_bytes(text, "size"), value) << text;
  EXPECT_EQ(numbers::parse_bytes("0", "size", 0), 0);
  for (const char* bad : {"",      "abc",   "KiB",  "12 parsecs", "1QB",     "nan", "inf",    " 5",
                          "4096 ", "64 ",   "0x10", "5KiBx",      "1.5.GiB", "1e9", "1e3KiB", "1E3",
                          "-1",    "-1KiB", "0",    "0KiB",       "2EiB",    "1.5", "1.5B",   "1.0001KiB"})
    EXPECT_THROW(numbers::parse_bytes(bad, "size"), Error) << "'" << bad << "'";
}

int64_t parse(std::string_view text, const std::string& name, const IntegerRule& rule) {
  return numbers::parse_integer(text, name, rule);
}
double parse(std::string_view text, const std::string& name, const RealRule& rule) {
  return numbers::parse_real(text, name, rule);
}

template <typename Rule>
struct Words {
  std::string text;
  Rule rule;
  std::string words;  // refusal()'s
};

// Each text refused in its words, and thrown as a ridge::Error about the name it was given, which a
// caller may rename to its flag.
template <typename Rule>
void expect_words(const std::vector<Words<Rule>>& cases) {
  for (const auto& c : cases) {
    EXPECT_EQ(numbers::refusal(c.text, read(c.text, c.rule).fault, c.rule), c.words);
    try {
      parse(c.text, "--n", c.rule);
      ADD_FAILURE() << "accepted '" << c.text << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), "--n");
      EXPECT_EQ(std::string(e.what()), "--n: " + c.words);
    }
  }
}

// One wording: NAME: 'TEXT' is WHAT IS WRONG (accepted: WHAT IS ACCEPTED).
TEST(Numbers, OneWordingOfTheError) {
  expect_words<IntegerRule>({
      {"1e3", {1}, "'1e3' is not a decimal integer (accepted: a decimal integer >= 1)"},
      {"0", {1, 100}, "'0' is out of range (accepted: a decimal integer 1 .. 100)"},
      {"1e6", numbers::kCount,
       "'1e6' is not a decimal integer (accepted: a decimal integer 1 .. 2^40, with an optional suffix k, M "
       "or G "
       "(x 2^10, 2^20, 2^30))"},
      {"40",
       {16, 1024, numbers::Suffix::none, 16},
       "'40' is not a multiple of 16 (accepted: a decimal integer 16 .. 1024, a multiple of 16)"},
      {"x",
       {0, 1 << 20, numbers::Suffix::none, 1, "test only"},
       "'x' is not a decimal integer (accepted: a decimal integer 0 .. 1048576, test only)"},
  });
  expect_words<RealRule>({
      {"nan",
       {0, kInf, true},
       "'nan' is not a finite decimal number (accepted: a finite decimal number > 0)"},
      {"1", {0, 1, false, true}, "'1' is out of range (accepted: a finite decimal number in [0, 1))"},
      {"0x1p3", {}, "'0x1p3' is not a finite decimal number (accepted: a finite decimal number of any size)"},
      {"0", {0, kInf, true, false, "MB"}, "'0' is out of range (accepted: a finite decimal number > 0, MB)"},
  });
  try {
    numbers::parse_bytes("1.5B", "--bytes");
    ADD_FAILURE() << "accepted 1.5B";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--bytes: '1.5B' is not a whole number of bytes (accepted: a byte size 1 .. 2^60: a decimal "
              "number (no "
              "exponent) with an optional unit B, KiB, MiB, GiB, TiB, PiB, EiB (K, M, G, T, P alone are "
              "binary too), "
              "KB, MB, GB, TB, PB or EB)");
  }
}

// OMP_NUM_THREADS is read before main, where nothing may allocate or throw.
static_assert(noexcept(numbers::read_integer("1", kAny)));
static_assert(noexcept(numbers::read_real("1", RealRule{})));

}  // namespace
