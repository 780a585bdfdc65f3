// Numeric formats: every code decoded against a bit-field model, encoding against a nearest-value
// search over all finite values, the documented boundaries, and every ISA path of the bulk
// conversions against the scalar functions, bit for bit.
#include <gtest/gtest.h>
#include <xmmintrin.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/format_reference.hpp"
#include "ridge/core.hpp"
#include "core/check.hpp"

namespace {

using namespace ridge;
using ridge::test::FormatSpec;
using ridge::test::PositiveGrid;
using ridge::test::Sat;

uint32_t bits_of(float x) {
  return std::bit_cast<uint32_t>(x);
}
float float_of(uint32_t b) {
  return std::bit_cast<float>(b);
}
bool small_tests() {
  const char* s = std::getenv("RIDGE_TEST_SMALL");
  return s && *s && std::string(s) != "0";
}

// Collects mismatches and prints the first few, instead of one failure line per code.
struct Mismatches {
  size_t count = 0;
  std::string first;
  void add(const std::string& what) {
    if (count++ < 8) first += what + "\n";
  }
};

template <typename T>
struct Fmt;
template <>
struct Fmt<bf16> {
  static const FormatSpec& spec() { return test::kBf16; }
};
template <>
struct Fmt<fp16> {
  static const FormatSpec& spec() { return test::kFp16; }
};
template <>
struct Fmt<fp8_e4m3> {
  static const FormatSpec& spec() { return test::kE4m3; }
};
template <>
struct Fmt<fp8_e5m2> {
  static const FormatSpec& spec() { return test::kE5m2; }
};

template <typename T>
const PositiveGrid& grid() {
  static const PositiveGrid g(Fmt<T>::spec());
  return g;
}

template <typename T>
uint32_t encode(float x, Saturation sat) {
  return from_float<T>(x, sat).bits;
}
template <typename T>
float decode(uint32_t code) {
  using Bits = decltype(T{}.bits);
  return to_float(T{static_cast<Bits>(code)});
}
Sat ref_sat(Saturation s) {
  return s == Saturation::finite ? Sat::finite : Sat::none;
}

// What the header documents for format -> float of a NaN code.
template <typename T>
uint32_t documented_nan_decode(uint32_t code) {
  const FormatSpec& f = Fmt<T>::spec();
  if constexpr (std::is_same_v<T, bf16>) return code << 16;
  const uint32_t sign = (code & f.sign_bit()) ? 0x80000000u : 0;
  return sign | 0x7FC00000u | (f.man_field(code) << (23 - f.man_bits));
}

constexpr Saturation kBothModes[] = {Saturation::none, Saturation::finite};

std::string hex(uint32_t v) {
  return fmt::format("0x{:X}", v);
}

template <typename T>
class FormatTest : public ::testing::Test {};
using AllFormats = ::testing::Types<bf16, fp16, fp8_e4m3, fp8_e5m2>;
TYPED_TEST_SUITE(FormatTest, AllFormats);

TYPED_TEST(FormatTest, DecodeEveryCodeMatchesBitFieldModel) {
  const FormatSpec& f = Fmt<TypeParam>::spec();
  Mismatches bad;
  for (uint32_t c = 0; c < f.codes(); ++c) {
    const float v = decode<TypeParam>(c);
    if (f.is_nan(c)) {
      if (bits_of(v) != documented_nan_decode<TypeParam>(c))
        bad.add(fmt::format("{} NaN code {} -> {}", f.name, hex(c), hex(bits_of(v))));
      continue;
    }
    const double want = test::ref_decode(f, c);
    if (static_cast<double>(v) != want || std::signbit(v) != std::signbit(want))
      bad.add(fmt::format("{} code {} -> {} (want {})", f.name, hex(c), v, want));
  }
  EXPECT_EQ(bad.count, 0u) << bad.first;
}

TYPED_TEST(FormatTest, EveryCodeRoundTripsThroughFloat) {
  const FormatSpec& f = Fmt<TypeParam>::spec();
  const uint32_t quiet = f.has_inf ? 1u << (f.man_bits - 1) : 0;
  Mismatches bad;
  for (uint32_t c = 0; c < f.codes(); ++c) {
    for (Saturation sat : kBothModes) {
      uint32_t want = c;
      if (f.is_nan(c)) want = c | quiet;  // NaNs come back quiet, sign and payload kept
      if (f.is_inf(c) && sat == Saturation::finite) want = (c & f.sign_bit()) | f.max_finite();
      const uint32_t got = encode<TypeParam>(decode<TypeParam>(c), sat);
      if (got != want)
        bad.add(fmt::format("{} {} -> float -> {} (want {})", f.name, hex(c), hex(got), hex(want)));
    }
  }
  EXPECT_EQ(bad.count, 0u) << bad.first;
}

template <typename T>
void expect_encodes_like_reference(const std::vector<float>& xs, Mismatches& bad) {
  const FormatSpec& f = Fmt<T>::spec();
  for (float x : xs)
    for (Saturation sat : kBothModes) {
      const uint32_t got = encode<T>(x, sat);
      const uint32_t want = test::ref_encode(f, grid<T>(), x, ref_sat(sat));
      if (got != want)
        bad.add(fmt::format("{} {} ({}) sat={} -> {} (want {})", f.name, x, hex(bits_of(x)),
                            sat == Saturation::finite ? "finite" : "none", hex(got), hex(want)));
    }
}

TYPED_TEST(FormatTest, EncodeRandomFloatsMatchesNearestValueSearch) {
  const FormatSpec& f = Fmt<TypeParam>::spec();
  std::mt19937_64 rng(20240611u + f.bits());
  const size_t n = small_tests() ? 100000 : 1000000;
  std::vector<float> xs;
  xs.reserve(n);
  // Half arbitrary bit patterns (every exponent, NaNs included), half in and around the format's
  // range, where the rounding decisions are.
  const int lo_exp = 127 + (1 - f.bias()) - f.man_bits - 3, hi_exp = 127 + f.bias() + 3;
  std::uniform_int_distribution<int> exp_dist(std::max(lo_exp, 0), std::min(hi_exp, 255));
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = static_cast<uint32_t>(rng());
    if (i % 2 == 0)
      xs.push_back(float_of(r));
    else
      xs.push_back(float_of((r & 0x807FFFFFu) | (static_cast<uint32_t>(exp_dist(rng)) << 23)));
  }
  Mismatches bad;
  expect_encodes_like_reference<TypeParam>(xs, bad);
  EXPECT_EQ(bad.count, 0u) << bad.first;
}

// Every rounding tie of the format (the midpoint of each pair of neighbours, including the one
// between the largest finite value and the overflow threshold), one float ulp either side, and the
// grid values themselves, with both signs.
template <typename T>
std::vector<float> ties_and_neighbours() {
  const auto& v = grid<T>().values;
  std::vector<float> xs;
  for (size_t i = 0; i + 1 < v.size(); ++i) {
    const double mid = (v[i] + v[i + 1]) / 2;
    const float m = static_cast<float>(mid);
    EXPECT_EQ(static_cast<double>(m), mid) << "midpoint not representable as a float";
    for (float x : {m, std::nextafter(m, 0.0f), std::nextafter(m, INFINITY), static_cast<float>(v[i])}) {
      xs.push_back(x);
      xs.push_back(-x);
    }
  }
  return xs;
}

TYPED_TEST(FormatTest, EncodeEveryTieAndItsNeighboursMatchesNearestValueSearch) {
  Mismatches bad;
  expect_encodes_like_reference<TypeParam>(ties_and_neighbours<TypeParam>(), bad);
  EXPECT_EQ(bad.count, 0u) << bad.first;
}

// ---- the documented boundaries, spelled out ----

struct Case {
  float x;
  uint32_t none, finite;  // expected code in each saturation mode
};

template <typename T>
void expect_cases(const std::vector<Case>& cases) {
  const FormatSpec& f = Fmt<T>::spec();
  for (const Case& c : cases) {
    EXPECT_EQ(encode<T>(c.x, Saturation::none), c.none)
        << f.name << " " << c.x << " (" << hex(bits_of(c.x)) << ")";
    EXPECT_EQ(encode<T>(c.x, Saturation::finite), c.finite) << f.name << " " << c.x << " satfinite";
    // The model agrees on the same spelled-out values, so the sweeps above test what is meant.
    EXPECT_EQ(test::ref_encode(f, grid<T>(), c.x, Sat::none), c.none) << f.name << " model " << c.x;
    EXPECT_EQ(test::ref_encode(f, grid<T>(), c.x, Sat::finite), c.finite) << f.name << " model " << c.x;
  }
}

const float kNan = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

TEST(FormatBoundaries, E4m3fn) {
  expect_cases<fp8_e4m3>({
      {448.0f, 0x7E, 0x7E},
      {-448.0f, 0xFE, 0xFE},
      {449.0f, 0x7E, 0x7E},
      {std::nextafter(464.0f, 0.0f), 0x7E, 0x7E},
      {464.0f, 0x7E, 0x7E},  // tie between 448 (even mantissa) and the would-be 480: stays 448
      {std::nextafter(464.0f, 1e9f), 0x7F, 0x7E},
      {-std::nextafter(464.0f, 1e9f), 0xFF, 0xFE},
      {480.0f, 0x7F, 0x7E},
      {1e30f, 0x7F, 0x7E},
      {kInf, 0x7F, 0x7E},
      {-kInf, 0xFF, 0xFE},
      {kNan, 0x7F, 0x7F},
      {-kNan, 0xFF, 0xFF},
      {1.0f, 0x38, 0x38},
      {0x1p-6f, 0x08, 0x08},    // smallest normal
      {0x1.Cp-7f, 0x07, 0x07},  // largest subnormal, 7 * 2^-9
      {0x1p-9f, 0x01, 0x01},    // smallest subnormal
      {0x1p-10f, 0x00, 0x00},   // half of it: tie, to the even code 0
      {std::nextafter(0x1p-10f, 1.0f), 0x01, 0x01},
      {-0x1p-10f, 0x80, 0x80},
      {0x1.8p-9f, 0x02, 0x02},  // 3 * 2^-10: tie between codes 1 and 2, to the even one
      {-0.0f, 0x80, 0x80},
      {FLT_TRUE_MIN, 0x00, 0x00},
  });
  EXPECT_EQ(to_float(fp8_e4m3{0x7E}), 448.0f);
  EXPECT_EQ(to_float(fp8_e4m3{0x01}), 0x1p-9f);
  EXPECT_TRUE(std::isnan(to_float(fp8_e4m3{0x7F})));
  EXPECT_EQ(to_float(fp8_e4m3{0x77}), 240.0f);  // all-ones exponent is finite in e4m3fn
}

TEST(FormatBoundaries, E5m2) {
  expect_cases<fp8_e5m2>({
      {57344.0f, 0x7B, 0x7B},
      {std::nextafter(61440.0f, 0.0f), 0x7B, 0x7B},
      {61440.0f, 0x7C, 0x7B},  // tie between 57344 (odd mantissa) and 65536: overflows
      {-61440.0f, 0xFC, 0xFB},
      {kInf, 0x7C, 0x7B},
      {-kInf, 0xFC, 0xFB},
      {kNan, 0x7E, 0x7E},
      {float_of(0x7FE00000), 0x7F, 0x7F},  // payload's top bit kept
      {float_of(0xFF800001), 0xFE, 0xFE},  // signalling NaN comes out quiet
      {1.0f, 0x3C, 0x3C},
      {0x1p-16f, 0x01, 0x01},
      {0x1p-17f, 0x00, 0x00},
      {std::nextafter(0x1p-17f, 1.0f), 0x01, 0x01},
      {-0.0f, 0x80, 0x80},
  });
  EXPECT_EQ(to_float(fp8_e5m2{0x7B}), 57344.0f);
  EXPECT_EQ(to_float(fp8_e5m2{0x7C}), kInf);
  EXPECT_EQ(to_float(fp8_e5m2{0x01}), 0x1p-16f);
}

TEST(FormatBoundaries, Fp16) {
  expect_cases<fp16>({
      {65504.0f, 0x7BFF, 0x7BFF},
      {std::nextafter(65520.0f, 0.0f), 0x7BFF, 0x7BFF},
      {65520.0f, 0x7C00, 0x7BFF},
      {-65520.0f, 0xFC00, 0xFBFF},
      {kInf, 0x7C00, 0x7BFF},
      {1.0f, 0x3C00, 0x3C00},
      {1.0f + 0x1p-11f, 0x3C00, 0x3C00},      // tie, to even
      {1.0f + 3 * 0x1p-11f, 0x3C02, 0x3C02},  // tie, to even (up)
      {0x1p-24f, 0x0001, 0x0001},
      {0x1p-25f, 0x0000, 0x0000},
      {0x1.8p-24f, 0x0002, 0x0002},
      {0x1p-14f, 0x0400, 0x0400},
      {float_of(0x7FA00000), 0x7F00, 0x7F00},  // sNaN with payload: quiet bit set, payload kept
      {float_of(0x7F800001), 0x7E00, 0x7E00},  // payload below fp16's bits: canonical quiet NaN
      {-kNan, 0xFE00, 0xFE00},
  });
  EXPECT_EQ(to_float(fp16{0x7BFF}), 65504.0f);
  EXPECT_EQ(bits_of(to_float(fp16{0x7C01})), 0x7FC02000u);  // quiet, payload kept (as vcvtph2ps)
}

TEST(FormatBoundaries, Bf16) {
  expect_cases<bf16>({
      {kBf16Max, 0x7F7F, 0x7F7F},
      {FLT_MAX, 0x7F80, 0x7F7F},
      {-FLT_MAX, 0xFF80, 0xFF7F},
      {kInf, 0x7F80, 0x7F7F},
      {1.0f + 0x1p-8f, 0x3F80, 0x3F80},
      {1.0f + 3 * 0x1p-8f, 0x3F82, 0x3F82},
      {0x1p-133f, 0x0001, 0x0001},  // smallest bf16 subnormal
      {0x1p-134f, 0x0000, 0x0000},
      {FLT_TRUE_MIN, 0x0000, 0x0000},
      {float_of(0x7F800001), 0x7FC0, 0x7FC0},
      {float_of(0xFFA00000), 0xFFE0, 0xFFE0},
  });
  EXPECT_EQ(bits_of(to_float(bf16{0x7F81})), 0x7F810000u);  // a plain widening: bits kept
}

// The scalar functions are constexpr, so formats can be used in constant expressions.
static_assert(to_fp8_e4m3(448.0f).bits == 0x7E);
static_assert(to_float(fp8_e5m2{0x3C}) == 1.0f);
static_assert(to_bf16(1.0f).bits == 0x3F80);

// ---- bulk conversion: every ISA path against the scalar functions ----

const size_t kTailLengths[] = {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 127, 129, 1000};

template <typename T>
std::vector<T> all_codes() {
  using Bits = decltype(T{}.bits);
  std::vector<T> v(Fmt<T>::spec().codes());
  for (uint32_t c = 0; c < v.size(); ++c) v[c] = T{static_cast<Bits>(c)};
  return v;
}

// Floats every path must agree on: every 4099th bit pattern of 2^32 (all exponents, NaN payloads,
// subnormals), the specials, every decoded code, and every tie with its neighbours.
template <typename T>
std::vector<float> bulk_inputs() {
  std::vector<float> xs;
  const uint64_t stride = small_tests() ? 4099 * 5 : 4099;
  for (uint64_t b = 0; b < (1ull << 32); b += stride) xs.push_back(float_of(static_cast<uint32_t>(b)));
  for (uint32_t b : {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u,
                     0x7F800001u, 0xFF800001u, 0x7FA00000u, 0x7FFFFFFFu, 0xFFFFFFFFu, 0x7F7FFFFFu,
                     0xFF7FFFFFu, 0x00800000u, 0x00000001u, 0x007FFFFFu, 0x807FFFFFu, 0x3F800000u})
    xs.push_back(float_of(b));
  for (T c : all_codes<T>()) xs.push_back(to_float(c));
  for (float x : ties_and_neighbours<T>()) xs.push_back(x);
  return xs;
}

template <typename T>
std::vector<T> scalar_encode(const std::vector<float>& xs, Saturation sat) {
  std::vector<T> out(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) out[i] = from_float<T>(xs[i], sat);
  return out;
}

template <typename T>
class BulkTest : public ::testing::Test {};
TYPED_TEST_SUITE(BulkTest, AllFormats);

TYPED_TEST(BulkTest, DecodeEveryCodeOnEveryIsaMatchesScalar) {
  const auto codes = all_codes<TypeParam>();
  for (cpu::Isa isa : cpu::supported_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    cpu::ScopedIsa scope(isa);
    std::vector<float> out(codes.size());
    convert(codes.data(), out.data(), codes.size());
    Mismatches bad;
    for (size_t i = 0; i < codes.size(); ++i)
      if (bits_of(out[i]) != bits_of(to_float(codes[i])))
        bad.add(fmt::format("code {} -> {} (scalar {})", hex(codes[i].bits), hex(bits_of(out[i])),
                            hex(bits_of(to_float(codes[i])))));
    EXPECT_EQ(bad.count, 0u) << bad.first;
  }
}

TYPED_TEST(BulkTest, DecodeTailsOnEveryIsaTouchOnlyTheirElements) {
  const auto codes = all_codes<TypeParam>();
  for (cpu::Isa isa : cpu::supported_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    cpu::ScopedIsa scope(isa);
    for (size_t n : kTailLengths) {
      for (size_t start : {size_t{0}, size_t{1}, codes.size() - std::min(n, codes.size())}) {
        if (start + n > codes.size()) continue;
        // Exact-size copies, so the sanitizer build sees any read past the source.
        const std::vector<TypeParam> src(codes.begin() + start, codes.begin() + start + n);
        std::vector<float> dst(n + 1, float_of(0x12345678));
        convert(src.data(), dst.data(), n);
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(bits_of(dst[i]), bits_of(to_float(src[i])))
              << "n=" << n << " start=" << start << " i=" << i;
        ASSERT_EQ(bits_of(dst[n]), 0x12345678u) << "wrote past the end, n=" << n;
      }
    }
  }
}

TYPED_TEST(BulkTest, EncodeOnEveryIsaMatchesScalar) {
  const std::vector<float> xs = bulk_inputs<TypeParam>();
  for (Saturation sat : kBothModes) {
    const auto want = scalar_encode<TypeParam>(xs, sat);
    for (cpu::Isa isa : cpu::supported_isas()) {
      SCOPED_TRACE(
          fmt::format("{} sat={}", cpu::isa_name(isa), sat == Saturation::finite ? "finite" : "none"));
      cpu::ScopedIsa scope(isa);
      std::vector<TypeParam> got(xs.size());
      convert(xs.data(), got.data(), xs.size(), sat);
      Mismatches bad;
      for (size_t i = 0; i < xs.size(); ++i)
        if (got[i].bits != want[i].bits)
          bad.add(fmt::format("{} ({}) -> {} (scalar {})", xs[i], hex(bits_of(xs[i])), hex(got[i].bits),
                              hex(want[i].bits)));
      EXPECT_EQ(bad.count, 0u) << bad.first;
    }
  }
}

TYPED_TEST(BulkTest, EncodeTailsOnEveryIsaTouchOnlyTheirElements) {
  const std::vector<float> xs = bulk_inputs<TypeParam>();
  using Bits = decltype(TypeParam{}.bits);
  const Bits sentinel = static_cast<Bits>(0xA5);
  for (cpu::Isa isa : cpu::supported_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    cpu::ScopedIsa scope(isa);
    for (Saturation sat : kBothModes)
      for (size_t n : kTailLengths)
        for (size_t start : {size_t{0}, size_t{3}, xs.size() - n}) {
          const std::vector<float> src(xs.begin() + start, xs.begin() + start + n);
          std::vector<TypeParam> dst(n + 1, TypeParam{sentinel});
          convert(src.data(), dst.data(), n, sat);
          for (size_t i = 0; i < n; ++i)
            ASSERT_EQ(dst[i].bits, from_float<TypeParam>(src[i], sat).bits) << "n=" << n << " i=" << i;
          ASSERT_EQ(dst[n].bits, sentinel) << "wrote past the end, n=" << n;
        }
  }
}

// Kernels elsewhere may turn on flush-to-zero / denormals-are-zero or change the rounding mode;
// conversions must not notice. The scalar results are computed first, under the default MXCSR.
TYPED_TEST(BulkTest, EveryIsaIgnoresFtzDazAndRoundingMode) {
  const std::vector<float> xs = bulk_inputs<TypeParam>();
  const auto codes = all_codes<TypeParam>();
  std::vector<float> want_dec(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) want_dec[i] = to_float(codes[i]);
  for (Saturation sat : kBothModes) {
    const auto want = scalar_encode<TypeParam>(xs, sat);
    for (cpu::Isa isa : cpu::supported_isas()) {
      SCOPED_TRACE(cpu::isa_name(isa));
      cpu::ScopedIsa scope(isa);
      std::vector<TypeParam> got(xs.size());
      std::vector<float> dec(codes.size());
      const unsigned saved = _mm_getcsr();
      _mm_setcsr(saved | 0x8040 /* FTZ, DAZ */ | 0x6000 /* round toward zero */);
      convert(xs.data(), got.data(), xs.size(), sat);
      convert(codes.data(), dec.data(), codes.size());
      _mm_setcsr(saved);
      size_t bad = 0;
      for (size_t i = 0; i < xs.size(); ++i) bad += got[i].bits != want[i].bits;
      for (size_t i = 0; i < codes.size(); ++i) bad += bits_of(dec[i]) != bits_of(want_dec[i]);
      EXPECT_EQ(bad, 0u);
    }
  }
}

}  // namespace
