#include "ridge/core/units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "ridge/core/error.hpp"
#include "core/check.hpp"

namespace ridge::units {
namespace {

double parse_number_with_suffix(const std::string& text, const std::string& what, const char* examples,
                                std::string& suffix) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (end == begin || text.empty() || std::isspace(static_cast<unsigned char>(text[0])))
    fail_arg(what, "'{}' is not a number (expected e.g. {})", text, examples);
  if (!std::isfinite(v)) fail_arg(what, "'{}' is not a finite number", text);
  // strtod also reads hexadecimal ("0x10"); nobody means that for a size, so it is rejected.
  if (std::string(begin, static_cast<const char*>(end)).find_first_of("xX") != std::string::npos)
    fail_arg(what, "'{}' is not a decimal number (expected e.g. {})", text, examples);
  suffix = std::string(end);
  suffix.erase(0, suffix.find_first_not_of(' '));  // "64 KiB" reads like "64KiB"
  std::transform(suffix.begin(), suffix.end(), suffix.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return v;
}

}  // namespace

int64_t parse_bytes(const std::string& text, const std::string& what, bool allow_zero) {
  std::string suffix;
  double v = parse_number_with_suffix(text, what, "4096, 1e9, 64KiB, 1GiB", suffix);
  double mul = 1;
  if (suffix.empty() || suffix == "b")
    mul = 1;
  else if (suffix == "kib" || suffix == "k")
    mul = 0x1p10;
  else if (suffix == "mib" || suffix == "m")
    mul = 0x1p20;
  else if (suffix == "gib" || suffix == "g")
    mul = 0x1p30;
  else if (suffix == "tib" || suffix == "t")
    mul = 0x1p40;
  else if (suffix == "pib" || suffix == "p")
    mul = 0x1p50;
  else if (suffix == "eib")
    mul = 0x1p60;
  else if (suffix == "kb")
    mul = 1e3;
  else if (suffix == "mb")
    mul = 1e6;
  else if (suffix == "gb")
    mul = 1e9;
  else if (suffix == "tb")
    mul = 1e12;
  else if (suffix == "pb")
    mul = 1e15;
  else if (suffix == "eb")
    mul = 1e18;
  else
    fail_arg(what, "unknown unit in '{}' (accepted: B, KiB, MiB, GiB, TiB, PiB, EiB, KB, MB, GB, TB, PB, EB)",
             text);
  v *= mul;
  if (v < 0) fail_arg(what, "'{}' is negative; a byte count must be positive", text);
  if (v == 0 && !allow_zero) fail_arg(what, "'{}' is zero; a byte count must be positive", text);
  if (v > 0x1p60) fail_arg(what, "'{}' is too large (at most 2^60 bytes = 1 EiB)", text);
  if (v != std::floor(v)) fail_arg(what, "'{}' is not a whole number of bytes", text);
  return static_cast<int64_t>(v);
}

int64_t parse_count(const std::string& text, const std::string& what) {
  std::string suffix;
  double v = parse_number_with_suffix(text, what, "4096, 4k, 1e6", suffix);
  // The multiplier is applied before the range check, so "4294967296G" is too large, not a wrap.
  if (suffix == "k")
    v *= 0x1p10;
  else if (suffix == "m")
    v *= 0x1p20;
  else if (suffix == "g")
    v *= 0x1p30;
  else if (!suffix.empty())
    fail_arg(what, "'{}' is not a whole number (accepted: 4096, 4k, 1M, 1G, 1e6)", text);
  if (v <= 0) fail_arg(what, "'{}' must be a positive whole number", text);
  if (v > 0x1p40) fail_arg(what, "'{}' is too large (at most 2^40)", text);
  if (v != std::floor(v)) fail_arg(what, "'{}' is not a whole number", text);
  return static_cast<int64_t>(v);
}

namespace {

// Three significant digits without an exponent, e.g. 1.23, 12.3, 123 (and 1000..1023 for binary
// units, which have no room for a fourth digit otherwise).
std::string digits3(double v) {
  const double a = std::fabs(v);
  if (a >= 100 || a == 0) return fmt::format("{:.0f}", v);
  if (a >= 10) return fmt::format("{:.1f}", v);
  return fmt::format("{:.2f}", v);
}

// Scales `v` by `base` until it is below `base` (or the prefixes run out) and prints it with the
// prefix. The scaling is redone when rounding to three digits would print `base` itself (so
// 999.7 prints as "1.00 k", not "1000"), and below `base` no exponent ever appears.
std::string scaled(double v, double base, const char* const* prefixes, int count, const char* unit) {
  if (!std::isfinite(v)) return fmt::format("{} {}{}", v, prefixes[0], unit);
  int i = 0;
  double x = v;
  while (i + 1 < count && std::fabs(x) >= base) {
    x /= base;
    ++i;
  }
  if (i + 1 < count && std::fabs(std::stod(digits3(x))) >= base) {
    x /= base;
    ++i;
  }
  // Sizes that are whole in their unit (caches, pages, buffers) print whole: "32 KiB", "1 MiB".
  const std::string num = base == 1024 && x == std::floor(x) ? fmt::format("{:.0f}", x) : digits3(x);
  const std::string suffix = std::string(prefixes[i]) + unit;
  return suffix.empty() ? num : num + " " + suffix;
}

constexpr const char* kBinary[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
constexpr const char* kDecimal[] = {"", "K", "M", "G", "T", "P", "E"};

}  // namespace

std::string format_bytes(double b) {
  return scaled(b, 1024, kBinary, 7, "B");
}

std::string format_seconds(double s) {
  if (!std::isfinite(s)) return fmt::format("{} s", s);
  struct Unit {
    double scale;
    const char* name;
  };
  constexpr Unit units[] = {{1e-9, "ns"}, {1e-6, "us"}, {1e-3, "ms"}, {1, "s"}};
  int i = 3;
  while (i > 0 && std::fabs(s) < units[i].scale && s != 0) --i;
  std::string num = digits3(s / units[i].scale);
  if (i < 3 && std::fabs(std::stod(num)) >= 1000) {  // 0.9996 ms prints as "1.00 ms", not "1000 us"
    ++i;
    num = digits3(s / units[i].scale);
  }
  return num + " " + units[i].name;
}

std::string format_flops(double f) {
  return scaled(f, 1000, kDecimal, 7, "FLOP/s");
}
std::string format_rate(double r) {
  return scaled(r, 1000, kDecimal, 7, "B/s");
}
std::string format_count(double n) {
  return scaled(n, 1000, kDecimal, 7, "");
}

}  // namespace ridge::units
