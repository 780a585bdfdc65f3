// The one parser of numbers a user types: flags, environment knobs, grid axes and the benchmarks' options
// all read their numbers here, under one rule, and refuse them in one wording (docs/contract.md):
//
//   NAME: 'TEXT' is WHAT IS WRONG (accepted: WHAT IS ACCEPTED)
//   --steps: '1e3' is not a decimal integer (accepted: a decimal integer >= 1)
//
// The rule. An integer is an optional sign (+ or -) and decimal digits: a leading zero is decimal ("010"
// is ten, as strtol in base 10 and Python's int() read it); no exponent, no hex, no spaces anywhere. A
// real is a decimal with an optional exponent ("0.5", ".5", "-2", "1e-3"); hexadecimal floats, "inf",
// "nan" and values that overflow a double are refused. Suffixes only where the rule names them: counts
// (k, M, G) and byte sizes (parse_bytes, whose number may have a fraction but, as an integer, no exponent).
//
// read_integer and read_real allocate nothing and throw nothing (OMP_NUM_THREADS is read before main,
// env::before_openmp); refusal() words what they found; parse_* throw it as a ridge::Error about `name`.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace ridge::numbers {

// What an integer may carry after its digits.
enum class Suffix : uint8_t {
  none,
  count,  // k, M, G in either case: x 2^10, 2^20, 2^30 ("4k" is 4096), as array sizes are written
};

// What an integer option takes: lo .. hi (after the suffix), a multiple of `multiple_of`; `note` (static
// text, may be null) adds to what the error says is accepted ("test only").
struct IntegerRule {
  int64_t lo = std::numeric_limits<int64_t>::min();
  int64_t hi = std::numeric_limits<int64_t>::max();
  Suffix suffix = Suffix::none;
  int64_t multiple_of = 1;
  const char* note = nullptr;
};

// What a real option takes: a finite number in [lo, hi], without lo when open_low, without hi when
// open_high; an infinite end is no bound. `note` as for IntegerRule ("MB").
struct RealRule {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool open_low = false, open_high = false;
  const char* note = nullptr;
};

// A shape dimension, an element count, a grid axis's size: 1 .. 2^40 with k, M or G.
inline constexpr IntegerRule kCount{1, int64_t{1} << 40, Suffix::count};

// Why a text was refused.
enum class Fault : uint8_t {
  none,
  malformed,       // not written as the rule says ("1e3" for an integer, "0x10", "4x", "", " 1")
  out_of_range,    // well written, outside the range (or past int64 / a double)
  not_a_multiple,  // in range, not a multiple of IntegerRule::multiple_of
  not_whole,       // a byte size that is not a whole number of bytes ("1.5B")
};

struct IntegerRead {
  int64_t value = 0;
  Fault fault = Fault::none;
};
struct RealRead {
  double value = 0;
  Fault fault = Fault::none;
};

// `text` read under `rule`; `value` is meaningful only when `fault` is none.
IntegerRead read_integer(std::string_view text, const IntegerRule& rule) noexcept;
RealRead read_real(std::string_view text, const RealRule& rule) noexcept;

// The error's words after the name: "'TEXT' is out of range (accepted: a decimal integer 1 .. 100)".
std::string refusal(std::string_view text, Fault fault, const IntegerRule& rule);
std::string refusal(std::string_view text, Fault fault, const RealRule& rule);
// What the rule accepts, as refusal() says it: "a decimal integer 1 .. 100".
std::string accepted(const IntegerRule& rule);
std::string accepted(const RealRule& rule);

// The value of `text`, else a ridge::Error about `name` with refusal()'s words.
int64_t parse_integer(std::string_view text, const std::string& name, const IntegerRule& rule);
double parse_real(std::string_view text, const std::string& name, const RealRule& rule);

// A byte size in lo .. hi bytes: a decimal number, which may have a fraction ("1.5GiB") but no exponent
// (it is a whole number of bytes, and "1e3" is refused wherever an integer is wanted), with an optional
// unit, case-insensitive, after it or after spaces ("64 KiB"): B; KiB, MiB, GiB, TiB, PiB, EiB (K, M, G,
// T, P alone are binary too); KB, MB, GB, TB, PB, EB (decimal). It must come to a whole number of bytes.
inline constexpr int64_t kMaxBytes = int64_t{1} << 60;
int64_t parse_bytes(std::string_view text, const std::string& name, int64_t lo = 1, int64_t hi = kMaxBytes);

}  // namespace ridge::numbers
