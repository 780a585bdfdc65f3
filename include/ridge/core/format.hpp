// Narrow numeric formats: bf16, fp16, fp8 e4m3fn and fp8 e5m2.
//
// float -> format rounds to nearest, ties to even, on the float's bits (no double rounding, and no
// dependence on MXCSR: FTZ/DAZ or a changed rounding mode do not change any result).
// Overflow (a finite value that rounds beyond the largest finite value, or an infinity) follows
// `Saturation`:
//   none   : inf for the formats that have it (bf16, fp16, e5m2), NaN for e4m3fn (it has no inf);
//   finite : the largest finite value with the input's sign, infinities included
//            (CUDA's __NV_SATFINITE / PTX cvt .satfinite).
// NaN stays NaN in both modes, with the input's sign. Which NaN (defined here; the vector paths
// match bit for bit):
//   float -> bf16, fp16, e5m2 : the quiet NaN whose payload is the float payload's top bits, i.e.
//                               sign | all-ones exponent | quiet bit | float mantissa >> (23 - M)
//                               (what vcvtps2ph and vcvtneps2bf16 produce);
//   float -> e4m3fn           : sign | 0x7F, its only NaN.
// format -> float is exact. NaNs: bf16 widens by a 16-bit shift (the bits are kept as they are, a
// signalling NaN stays signalling); fp16, e5m2 and e4m3fn give sign | 0x7FC00000 | mantissa <<
// (23 - M), a quiet float NaN carrying the payload (what vcvtph2ps does).
#pragma once

#include <bit>
#include <cmath>  // kept for users that reach std:: math through this header
#include <cstddef>
#include <cstdint>
#include <limits>

namespace ridge {

enum class Saturation { none, finite };

struct bf16 {
  uint16_t bits;
};
struct fp16 {
  uint16_t bits;
};
struct fp8_e4m3 {
  uint8_t bits;
};  // e4m3fn: bias 7, no inf, NaN = S.1111.111, max 448
struct fp8_e5m2 {
  uint8_t bits;
};  // bias 15, IEEE-like inf and NaN, max 57344

namespace detail {

// Encoding constants of a narrow format with E exponent and M mantissa bits. "fn" formats
// (HasInf = false) spend the all-ones exponent on normal numbers except for the one NaN code.
template <int E, int M, bool HasInf>
struct NarrowFormat {
  static constexpr int bias = (1 << (E - 1)) - 1;
  static constexpr int emin = 1 - bias;
  static constexpr uint32_t sign_bit = 1u << (E + M);
  static constexpr uint32_t exp_ones = ((1u << E) - 1) << M;
  static constexpr uint32_t inf_code = exp_ones;  // meaningful only when HasInf
  static constexpr uint32_t nan_code = HasInf ? exp_ones | (1u << (M - 1)) : sign_bit - 1;
  static constexpr uint32_t max_finite = HasInf ? exp_ones - 1 : sign_bit - 2;
};

// float -> narrow code, for formats with fewer exponent bits than float (fp16, e5m2, e4m3fn).
template <int E, int M, bool HasInf>
constexpr uint32_t encode_narrow(float x, Saturation sat) {
  using F = NarrowFormat<E, M, HasInf>;
  const uint32_t f = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (f >> 31) << (E + M);
  const uint32_t exp = (f >> 23) & 0xFF;
  const uint32_t man = f & 0x7FFFFF;
  const uint32_t overflow = sat == Saturation::finite ? F::max_finite : (HasInf ? F::inf_code : F::nan_code);
  if (exp == 0xFF) {
    if (man != 0) return sign | (HasInf ? F::nan_code | (man >> (23 - M)) : F::nan_code);
    return sign | overflow;
  }
  if (exp == 0) return sign;  // float zero or subnormal: far below half of every format's smallest subnormal
  const int e = static_cast<int>(exp) - 127;
  if (e > F::bias + 1) return sign | overflow;  // beyond any rounding into range
  const uint32_t mant24 = man | (1u << 23);
  int shift = 23 - M;
  if (e < F::emin) shift += F::emin - e;
  uint32_t code = 0;
  if (shift <= 24) {  // otherwise below half the smallest subnormal: zero
    uint32_t rounded = mant24 >> shift;
    const uint32_t rem = mant24 & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (rounded & 1))) ++rounded;
    // Normal: the implicit bit in `rounded` lifts the exponent field by one, and a rounding carry
    // lifts it once more. Subnormal: a carry into bit M is exactly the smallest normal's code.
    code = e >= F::emin ? (static_cast<uint32_t>(e + F::bias - 1) << M) + rounded : rounded;
  }
  if (code > F::max_finite) return sign | overflow;
  return sign | code;
}

// narrow code -> float bits, exact.
template <int E, int M, bool HasInf>
constexpr uint32_t decode_narrow(uint32_t code) {
  using F = NarrowFormat<E, M, HasInf>;
  const uint32_t sign = ((code >> (E + M)) & 1u) << 31;
  const uint32_t exp = (code >> M) & ((1u << E) - 1);
  const uint32_t man = code & ((1u << M) - 1);
  if (exp == (1u << E) - 1 && (HasInf || man == (1u << M) - 1)) {
    if (HasInf && man == 0) return sign | 0x7F800000u;
    return sign | 0x7FC00000u | (man << (23 - M));
  }
  if (exp == 0) {
    if (man == 0) return sign;
    // man * 2^(emin - M): normalise so the leading one becomes float's implicit bit.
    const int lead = std::bit_width(man) - 1;
    const uint32_t fexp = static_cast<uint32_t>(lead + F::emin - M + 127);
    return sign | (fexp << 23) | ((man << (23 - lead)) & 0x7FFFFFu);
  }
  return sign | ((exp + 127 - F::bias) << 23) | (man << (23 - M));
}

}  // namespace detail

// ---- bf16: float's exponent range, 7 mantissa bits ----
constexpr float to_float(bf16 v) {
  return std::bit_cast<float>(static_cast<uint32_t>(v.bits) << 16);
}
constexpr bf16 to_bf16(float x, Saturation sat = Saturation::none) {
  const uint32_t f = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (f >> 16) & 0x8000;
  if ((f & 0x7FFFFFFF) > 0x7F800000) return bf16{static_cast<uint16_t>((f >> 16) | 0x0040)};  // quiet NaN
  if ((f & 0x7FFFFFFF) == 0x7F800000)
    return bf16{static_cast<uint16_t>(sat == Saturation::finite ? sign | 0x7F7F : f >> 16)};
  // Round to nearest even on the dropped 16 bits; a carry runs into the exponent (and to inf).
  const uint32_t r = f + 0x7FFF + ((f >> 16) & 1);
  uint16_t out = static_cast<uint16_t>(r >> 16);
  if (sat == Saturation::finite && (out & 0x7FFF) == 0x7F80) out = static_cast<uint16_t>(sign | 0x7F7F);
  return bf16{out};
}

// ---- fp16: IEEE binary16 ----
constexpr float to_float(fp16 v) {
  return std::bit_cast<float>(detail::decode_narrow<5, 10, true>(v.bits));
}
constexpr fp16 to_fp16(float x, Saturation sat = Saturation::none) {
  return fp16{static_cast<uint16_t>(detail::encode_narrow<5, 10, true>(x, sat))};
}

// ---- fp8 e4m3fn ----
constexpr float to_float(fp8_e4m3 v) {
  return std::bit_cast<float>(detail::decode_narrow<4, 3, false>(v.bits));
}
constexpr fp8_e4m3 to_fp8_e4m3(float x, Saturation sat = Saturation::none) {
  return fp8_e4m3{static_cast<uint8_t>(detail::encode_narrow<4, 3, false>(x, sat))};
}

// ---- fp8 e5m2 ----
constexpr float to_float(fp8_e5m2 v) {
  return std::bit_cast<float>(detail::decode_narrow<5, 2, true>(v.bits));
}
constexpr fp8_e5m2 to_fp8_e5m2(float x, Saturation sat = Saturation::none) {
  return fp8_e5m2{static_cast<uint8_t>(detail::encode_narrow<5, 2, true>(x, sat))};
}

// Generic spelling for templates: from_float<fp8_e4m3>(x, sat).
template <typename T>
constexpr T from_float(float x, Saturation sat = Saturation::none);
template <>
constexpr bf16 from_float<bf16>(float x, Saturation sat) {
  return to_bf16(x, sat);
}
template <>
constexpr fp16 from_float<fp16>(float x, Saturation sat) {
  return to_fp16(x, sat);
}
template <>
constexpr fp8_e4m3 from_float<fp8_e4m3>(float x, Saturation sat) {
  return to_fp8_e4m3(x, sat);
}
template <>
constexpr fp8_e5m2 from_float<fp8_e5m2>(float x, Saturation sat) {
  return to_fp8_e5m2(x, sat);
}

inline constexpr float kBf16Max = 0x1.FEp127f;
inline constexpr float kFp16Max = 65504.0f;
inline constexpr float kFp8E4m3Max = 448.0f;
inline constexpr float kFp8E5m2Max = 57344.0f;

// Bulk conversions. They take the fastest path the active ISA allows (cpu::active_isa) and agree
// bit for bit with the scalar functions above on every input. `src` and `dst` must not overlap.
void convert(const float* src, bf16* dst, size_t n, Saturation sat = Saturation::none);
void convert(const float* src, fp16* dst, size_t n, Saturation sat = Saturation::none);
void convert(const float* src, fp8_e4m3* dst, size_t n, Saturation sat = Saturation::none);
void convert(const float* src, fp8_e5m2* dst, size_t n, Saturation sat = Saturation::none);
void convert(const bf16* src, float* dst, size_t n);
void convert(const fp16* src, float* dst, size_t n);
void convert(const fp8_e4m3* src, float* dst, size_t n);
void convert(const fp8_e5m2* src, float* dst, size_t n);

}  // namespace ridge
