#include "ridge/core/numbers.hpp"

#include <fmt/format.h>

#include <bit>
#include <charconv>
#include <cmath>
#include <system_error>

#include "ridge/core/error.hpp"

namespace ridge::numbers {
namespace {

bool digit(char c) {
  return c >= '0' && c <= '9';
}

// The end of the decimal that starts `t` ([+-] digits [. digits] [e [+-] digits], at least one digit
// before the exponent; the exponent only when `exponent`), or 0 when none does. Hex, "inf" and "nan" are
// no decimal: 0 (and "0x10" ends after its "0", so the "x10" is left over).
size_t decimal_end(std::string_view t, bool exponent) noexcept {
  size_t i = t.empty() || (t[0] != '+' && t[0] != '-') ? 0 : 1;
  size_t digits = 0;
  for (; i < t.size() && digit(t[i]); ++i) ++digits;
  if (i < t.size() && t[i] == '.')
    for (++i; i < t.size() && digit(t[i]); ++i) ++digits;
  if (digits == 0) return 0;
  if (exponent && i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    size_t j = i + 1;
    if (j < t.size() && (t[j] == '+' || t[j] == '-')) ++j;
    const size_t first = j;
    while (j < t.size() && digit(t[j])) ++j;
    if (j > first) i = j;  // else the 'e' is not an exponent's: "1EiB" is 1 and a unit
  }
  return i;
}

// The double a decimal_end() span spells (from_chars takes no '+'); out_of_range past a double.
RealRead decimal_value(std::string_view t) noexcept {
  if (!t.empty() && t[0] == '+') t.remove_prefix(1);
  RealRead r;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), r.value, std::chars_format::general);
  if (ec == std::errc::result_out_of_range)
    r.fault = Fault::out_of_range;
  else if (ec != std::errc() || end != t.data() + t.size() || !std::isfinite(r.value))
    r.fault = Fault::malformed;
  return r;
}

// A bound as the errors print it: powers of two from 2^32 up as 2^N ("1 .. 2^40"), the rest in decimal.
std::string bound(int64_t v) {
  if (v >= (int64_t{1} << 32) && (v & (v - 1)) == 0)
    return fmt::format("2^{}", std::countr_zero(static_cast<uint64_t>(v)));
  return std::to_string(v);
}

std::string with_note(std::string text, const char* note) {
  return note && *note ? fmt::format("{}, {}", text, note) : text;
}

std::string refused(std::string_view text, const std::string& what, const std::string& accepted_text) {
  return fmt::format("'{}' {} (accepted: {})", text, what, accepted_text);
}

std::string fault_words(Fault fault, const char* malformed, int64_t multiple_of) {
  switch (fault) {
    case Fault::malformed:
      return fmt::format("is not {}", malformed);
    case Fault::out_of_range:
      return "is out of range";
    case Fault::not_a_multiple:
      return fmt::format("is not a multiple of {}", multiple_of);
    case Fault::not_whole:
      return "is not a whole number of bytes";
    case Fault::none:
      break;
  }
  return "is accepted";
}

struct Unit {
  const char* name;
  double factor;
};
constexpr Unit kByteUnits[] = {
    {"b", 1},      {"kib", 0x1p10}, {"k", 0x1p10}, {"mib", 0x1p20}, {"m", 0x1p20}, {"gib", 0x1p30},
    {"g", 0x1p30}, {"tib", 0x1p40}, {"t", 0x1p40}, {"pib", 0x1p50}, {"p", 0x1p50}, {"eib", 0x1p60},
    {"kb", 1e3},   {"mb", 1e6},     {"gb", 1e9},   {"tb", 1e12},    {"pb", 1e15},  {"eb", 1e18},
};

bool same_lowercase(std::string_view text, const char* lower) {
  size_t i = 0;
  for (; i < text.size() && lower[i]; ++i) {
    const char c = text[i] >= 'A' && text[i] <= 'Z' ? static_cast<char>(text[i] - 'A' + 'a') : text[i];
    if (c != lower[i]) return false;
  }
  return i == text.size() && lower[i] == '\0';
}

std::string bytes_accepted(int64_t lo, int64_t hi) {
  return fmt::format(
      "a byte size {} .. {}: a decimal number (no exponent) with an optional unit B, KiB, MiB, GiB, TiB, "
      "PiB, EiB (K, M, G, "
      "T, P alone are binary too), KB, MB, GB, TB, PB or EB",
      bound(lo), bound(hi));
}

}  // namespace

IntegerRead read_integer(std::string_view t, const IntegerRule& rule) noexcept {
  IntegerRead r;
  size_t i = t.empty() || (t[0] != '+' && t[0] != '-') ? 0 : 1;
  const bool negative = i == 1 && t[0] == '-';
  const size_t first = i;
  while (i < t.size() && digit(t[i])) ++i;
  const size_t last = i;
  int shift = 0;
  if (rule.suffix == Suffix::count && i < t.size()) {
    switch (t[i]) {
      case 'k':
      case 'K':
        shift = 10;
        break;
      case 'm':
      case 'M':
        shift = 20;
        break;
      case 'g':
      case 'G':
        shift = 30;
        break;
      default:
        break;
    }
    if (shift) ++i;
  }
  if (last == first || i != t.size()) {
    r.fault = Fault::malformed;
    return r;
  }
  // The magnitude, up to 2^63 (INT64_MIN's); past it, and past int64 after the suffix, out of range.
  uint64_t m = 0;
  bool over = false;
  for (size_t j = first; j < last && !over; ++j)
    over = __builtin_mul_overflow(m, uint64_t{10}, &m) ||
           __builtin_add_overflow(m, uint64_t(t[j] - '0'), &m) || m > (uint64_t{1} << 63);
  over = over || (shift && m > ((uint64_t{1} << 63) >> shift));
  m <<= over ? 0 : shift;
  if (over || (!negative && m == (uint64_t{1} << 63))) {
    r.fault = Fault::out_of_range;
    return r;
  }
  const int64_t v = negative ? static_cast<int64_t>(0 - m) : static_cast<int64_t>(m);
  if (v < rule.lo || v > rule.hi)
    r.fault = Fault::out_of_range;
  else if (rule.multiple_of > 1 && v % rule.multiple_of != 0)
    r.fault = Fault::not_a_multiple;
  r.value = v;
  return r;
}

RealRead read_real(std::string_view t, const RealRule& rule) noexcept {
  if (decimal_end(t, true) != t.size() || t.empty()) return {0, Fault::malformed};
  RealRead r = decimal_value(t);
  if (r.fault != Fault::none) return r;
  const double v = r.value;
  if (v < rule.lo || v > rule.hi || (rule.open_low && v == rule.lo) || (rule.open_high && v == rule.hi))
    r.fault = Fault::out_of_range;
  return r;
}

std::string accepted(const IntegerRule& rule) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  std::string text = "a decimal integer";
  if (rule.lo != kMin && rule.hi == kMax)
    text += fmt::format(" >= {}", bound(rule.lo));
  else if (rule.lo == kMin && rule.hi != kMax)
    text += fmt::format(" <= {}", bound(rule.hi));
  else if (rule.lo != kMin)
    text += fmt::format(" {} .. {}", bound(rule.lo), bound(rule.hi));
  if (rule.suffix == Suffix::count) text += ", with an optional suffix k, M or G (x 2^10, 2^20, 2^30)";
  if (rule.multiple_of > 1) text += fmt::format(", a multiple of {}", rule.multiple_of);
  return with_note(std::move(text), rule.note);
}

std::string accepted(const RealRule& rule) {
  const bool low = !std::isinf(rule.lo), high = !std::isinf(rule.hi);
  std::string range;
  if (low && high)
    range =
        fmt::format("in {}{}, {}{}", rule.open_low ? "(" : "[", rule.lo, rule.hi, rule.open_high ? ")" : "]");
  else if (low)
    range = fmt::format("{} {}", rule.open_low ? ">" : ">=", rule.lo);
  else if (high)
    range = fmt::format("{} {}", rule.open_high ? "<" : "<=", rule.hi);
  else
    range = "of any size";
  return with_note(fmt::format("a finite decimal number {}", range), rule.note);
}

std::string refusal(std::string_view text, Fault fault, const IntegerRule& rule) {
  return refused(text, fault_words(fault, "a decimal integer", rule.multiple_of), accepted(rule));
}

std::string refusal(std::string_view text, Fault fault, const RealRule& rule) {
  return refused(text, fault_words(fault, "a finite decimal number", 1), accepted(rule));
}

int64_t parse_integer(std::string_view text, const std::string& name, const IntegerRule& rule) {
  const IntegerRead r = read_integer(text, rule);
  if (r.fault != Fault::none) throw Error(name, refusal(text, r.fault, rule));
  return r.value;
}

double parse_real(std::string_view text, const std::string& name, const RealRule& rule) {
  const RealRead r = read_real(text, rule);
  if (r.fault != Fault::none) throw Error(name, refusal(text, r.fault, rule));
  return r.value;
}

int64_t parse_bytes(std::string_view text, const std::string& name, int64_t lo, int64_t hi) {
  auto fail = [&](Fault f) {
    throw Error(name, refused(text, fault_words(f, "a byte size", 1), bytes_accepted(lo, hi)));
  };
  // No exponent: a byte size is a whole number of bytes, and "1e3" is refused wherever an integer is.
  const size_t end = decimal_end(text, false);
  if (end == 0) fail(Fault::malformed);
  // The unit, after the number or after spaces ("64 KiB"); spaces with no unit after them are refused.
  size_t at = end;
  while (at < text.size() && text[at] == ' ') ++at;
  const std::string_view unit = text.substr(at);
  double factor = 1;
  if (!unit.empty()) {
    const Unit* u = nullptr;
    for (const Unit& k : kByteUnits)
      if (same_lowercase(unit, k.name)) u = &k;
    if (!u) fail(Fault::malformed);
    factor = u->factor;
  } else if (at != end) {
    fail(Fault::malformed);
  }
  RealRead r = decimal_value(text.substr(0, end));
  if (r.fault != Fault::none) fail(r.fault);
  // The unit is applied before the range check, so "4294967296EiB" is out of range, not a wrap.
  const double v = r.value * factor;
  if (!(v >= static_cast<double>(lo) && v <= static_cast<double>(hi))) fail(Fault::out_of_range);
  if (v != std::floor(v)) fail(Fault::not_whole);
  return static_cast<int64_t>(v);
}

}  // namespace ridge::numbers
