// An independent model of the narrow formats for the tests: decoding from the bit fields with
// double arithmetic and ldexp, and encoding by a search for the nearest value over the sorted list
// of every finite value of the format. Nothing here calls the library's format code.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace ridge::test {

struct FormatSpec {
  std::string name;
  int exp_bits, man_bits;
  bool has_inf;  // false: "fn" format, all-ones exponent is finite except the one NaN code

  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  int bits() const { return 1 + exp_bits + man_bits; }
  uint32_t sign_bit() const { return 1u << (exp_bits + man_bits); }
  uint32_t codes() const { return 1u << bits(); }
  uint32_t exp_field(uint32_t c) const { return (c >> man_bits) & ((1u << exp_bits) - 1); }
  uint32_t man_field(uint32_t c) const { return c & ((1u << man_bits) - 1); }
  bool is_nan(uint32_t c) const {
    const bool top = exp_field(c) == (1u << exp_bits) - 1;
    return has_inf ? top && man_field(c) != 0 : top && man_field(c) == (1u << man_bits) - 1;
  }
  bool is_inf(uint32_t c) const {
    return has_inf && exp_field(c) == (1u << exp_bits) - 1 && man_field(c) == 0;
  }
  // Largest finite positive code: just below inf, or just below the NaN code.
  uint32_t max_finite() const { return has_inf ? (((1u << exp_bits) - 1) << man_bits) - 1 : sign_bit() - 2; }
};

inline const FormatSpec kBf16{"bf16", 8, 7, true};
inline const FormatSpec kFp16{"fp16", 5, 10, true};
inline const FormatSpec kE4m3{"e4m3fn", 4, 3, false};
inline const FormatSpec kE5m2{"e5m2", 5, 2, true};

// Value of a non-NaN code, from its fields: (-1)^s * 2^(e - bias) * 1.m, or 2^(1 - bias) * 0.m.
inline double ref_decode(const FormatSpec& f, uint32_t c) {
  const double sign = (c & f.sign_bit()) ? -1.0 : 1.0;
  if (f.is_inf(c)) return sign * INFINITY;
  const int e = static_cast<int>(f.exp_field(c));
  const double m = static_cast<double>(f.man_field(c));
  if (e == 0) return sign * std::ldexp(m, 1 - f.bias() - f.man_bits);
  return sign * std::ldexp(m + std::ldexp(1.0, f.man_bits), e - f.bias() - f.man_bits);
}

// Every finite non-negative value in code order (code c at index c), plus one virtual value one
// step above the largest finite value: the value the next code would have with an unbounded
// exponent range. Rounding to it means overflow.
struct PositiveGrid {
  std::vector<double> values;
  explicit PositiveGrid(const FormatSpec& f) {
    for (uint32_t c = 0; c <= f.max_finite(); ++c) values.push_back(ref_decode(f, c));
    const double top = values.back(), below = values[values.size() - 2];
    values.push_back(top + (top - below));
  }
};

enum class Sat { none, finite };

// Reference encoding of a float: NaN -> the NaN code the library documents, otherwise the nearest
// grid value (ties to the even code, i.e. the even mantissa), overflow per `sat`.
inline uint32_t ref_encode(const FormatSpec& f, const PositiveGrid& grid, float x, Sat sat) {
  const uint32_t sign = std::signbit(x) ? f.sign_bit() : 0;
  const uint32_t overflow = sat == Sat::finite ? f.max_finite()
                            : f.has_inf        ? (((1u << f.exp_bits) - 1) << f.man_bits)
                                               : f.sign_bit() - 1;
  if (std::isnan(x)) {
    uint32_t bits;
    static_assert(sizeof(bits) == sizeof(x));
    std::memcpy(&bits, &x, sizeof(x));
    if (!f.has_inf) return sign | (f.sign_bit() - 1);
    const uint32_t exp_ones = ((1u << f.exp_bits) - 1) << f.man_bits;
    const uint32_t quiet = 1u << (f.man_bits - 1);
    return sign | exp_ones | quiet | ((bits & 0x7FFFFF) >> (23 - f.man_bits));
  }
  const double a = std::fabs(static_cast<double>(x));
  const auto& v = grid.values;
  const size_t virtual_code = v.size() - 1;
  if (a > v.back()) return sign | overflow;
  // First grid value >= a; the answer is it or the one below.
  const size_t hi = static_cast<size_t>(std::lower_bound(v.begin(), v.end(), a) - v.begin());
  size_t pick = hi;
  if (hi > 0 && v[hi] != a) {
    const double dlo = a - v[hi - 1], dhi = v[hi] - a;
    pick = dlo < dhi ? hi - 1 : dhi < dlo ? hi : ((hi - 1) % 2 == 0 ? hi - 1 : hi);
  }
  if (pick == virtual_code) return sign | overflow;
  return sign | static_cast<uint32_t>(pick);
}

}  // namespace ridge::test
