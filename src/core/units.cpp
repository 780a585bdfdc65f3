#include "ridge/core/units.hpp"

#include <fmt/format.h>

#include <cmath>

namespace ridge::units {
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
