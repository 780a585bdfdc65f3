#include "ridge/core/units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "ridge/core/error.hpp"

namespace ridge::units {
namespace {

double parse_number_with_suffix(const std::string& text, const std::string& what, std::string& suffix) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (end == begin || text.empty() || std::isspace(static_cast<unsigned char>(text[0])))
    fail("{}: '{}' is not a number (expected e.g. 4096, 1e9, 64KiB, 1GiB)", what, text);
  if (!std::isfinite(v)) fail("{}: '{}' is not a finite number", what, text);
  suffix = std::string(end);
  std::transform(suffix.begin(), suffix.end(), suffix.begin(), [](unsigned char c) { return std::tolower(c); });
  return v;
}

}  // namespace

int64_t parse_bytes(const std::string& text, const std::string& what, bool allow_zero) {
  std::string suffix;
  double v = parse_number_with_suffix(text, what, suffix);
  double mul = 1;
  if (suffix.empty() || suffix == "b") mul = 1;
  else if (suffix == "kib" || suffix == "k") mul = 0x1p10;
  else if (suffix == "mib" || suffix == "m") mul = 0x1p20;
  else if (suffix == "gib" || suffix == "g") mul = 0x1p30;
  else if (suffix == "tib" || suffix == "t") mul = 0x1p40;
  else if (suffix == "kb") mul = 1e3;
  else if (suffix == "mb") mul = 1e6;
  else if (suffix == "gb") mul = 1e9;
  else if (suffix == "tb") mul = 1e12;
  else fail("{}: unknown unit in '{}' (accepted: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", what, text);
  v *= mul;
  if (v < 0) fail("{}: '{}' is negative; a byte count must be positive", what, text);
  if (v == 0 && !allow_zero) fail("{}: '{}' is zero; a byte count must be positive", what, text);
  if (v > 0x1p60) fail("{}: '{}' is too large (at most 2^60 bytes = 1 EiB)", what, text);
  if (v != std::floor(v)) fail("{}: '{}' is not a whole number of bytes", what, text);
  return static_cast<int64_t>(v);
}

int64_t parse_count(const std::string& text, const std::string& what) {
  std::string suffix;
  double v = parse_number_with_suffix(text, what, suffix);
  if (suffix == "k") v *= 1024;
  else if (suffix == "m") v *= 1024 * 1024;
  else if (!suffix.empty()) fail("{}: '{}' is not a whole number (accepted: 4096, 4k, 1e6)", what, text);
  if (v <= 0) fail("{}: '{}' must be a positive whole number", what, text);
  if (v > 0x1p40) fail("{}: '{}' is too large (at most 2^40)", what, text);
  if (v != std::floor(v)) fail("{}: '{}' is not a whole number", what, text);
  return static_cast<int64_t>(v);
}

std::string format_bytes(double b) {
  const char* names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int i = 0;
  while (std::fabs(b) >= 1024 && i < 5) {
    b /= 1024;
    ++i;
  }
  return i == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.3g} {}", b, names[i]);
}

std::string format_seconds(double s) {
  const double a = std::fabs(s);
  if (a >= 1) return fmt::format("{:.3g} s", s);
  if (a >= 1e-3) return fmt::format("{:.3g} ms", s * 1e3);
  if (a >= 1e-6) return fmt::format("{:.3g} us", s * 1e6);
  return fmt::format("{:.3g} ns", s * 1e9);
}

namespace {
std::string si(double v, const char* unit) {
  const char* p[] = {"", "K", "M", "G", "T", "P", "E"};
  int i = 0;
  while (std::fabs(v) >= 1000 && i < 6) {
    v /= 1000;
    ++i;
  }
  return fmt::format("{:.3g} {}{}", v, p[i], unit);
}
}  // namespace

std::string format_flops(double f) { return si(f, "FLOP/s"); }
std::string format_rate(double r) { return si(r, "B/s"); }
std::string format_count(double n) { return si(n, ""); }

}  // namespace ridge::units
