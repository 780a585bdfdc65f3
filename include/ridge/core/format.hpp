// Narrow numeric formats: bf16, fp16, fp8 e4m3fn and fp8 e5m2.
//
// float -> format rounds to nearest, ties to even. Overflow follows `Saturation`:
//   none   : inf for formats that have it (bf16, fp16, e5m2), NaN for e4m3fn (it has no inf);
//   finite : clamp to the largest finite value, and inf too (CUDA's __NV_SATFINITE).
// NaN always stays NaN. format -> float is exact.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace ridge {

enum class Saturation { none, finite };

struct bf16 { uint16_t bits; };
struct fp16 { uint16_t bits; };
struct fp8_e4m3 { uint8_t bits; };  // e4m3fn: bias 7, no inf, NaN = S.1111.111, max 448
struct fp8_e5m2 { uint8_t bits; };  // bias 15, IEEE-like inf and NaN, max 57344

namespace detail {

// A float -> narrow-format encoder for formats with fewer exponent bits than float.
// Works on the float's bits so that rounding is exact (no double rounding).
template <int E, int M, bool HasInf, uint32_t MaxFinite, uint32_t InfCode, uint32_t NanCode>
constexpr uint32_t encode_narrow(float x, Saturation sat) {
  const uint32_t f = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (f >> 31) << (E + M);
  const uint32_t exp = (f >> 23) & 0xFF;
  const uint32_t man = f & 0x7FFFFF;
  const uint32_t overflow = sat == Saturation::finite ? MaxFinite : (HasInf ? InfCode : NanCode);
  if (exp == 0xFF) {
    if (man != 0) return sign | NanCode;
    return sign | overflow;
  }
  if (exp == 0) return sign;  // float zero or subnormal: far below every format's smallest subnormal
  constexpr int bias = (1 << (E - 1)) - 1;
  constexpr int emin = 1 - bias;
  const int e = static_cast<int>(exp) - 127;
  if (e > bias + 1) return sign | overflow;  // beyond any rounding into range
  const uint32_t mant24 = man | (1u << 23);
  int shift = 23 - M;
  if (e < emin) shift += emin - e;
  uint32_t code;
  if (shift > 24) {
    code = 0;  // below half the smallest subnormal
  } else {
    uint32_t rounded = mant24 >> shift;
    const uint32_t rem = mant24 & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (rounded & 1))) ++rounded;
    // Normal: the implicit bit in `rounded` lifts the exponent field by one, carries included.
    code = e >= emin ? (static_cast<uint32_t>(e + bias - 1) << M) + rounded : rounded;
  }
  if (code > MaxFinite) return sign | overflow;
  return sign | code;
}

template <int E, int M, bool HasInf>
constexpr float decode_narrow(uint32_t code) {
  constexpr int bias = (1 << (E - 1)) - 1;
  const bool neg = (code >> (E + M)) & 1;
  const uint32_t exp = (code >> M) & ((1u << E) - 1);
  const uint32_t man = code & ((1u << M) - 1);
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), 1 - bias - M);
  } else if (exp == (1u << E) - 1 && (HasInf || man == (1u << M) - 1)) {
    if (HasInf && man == 0) v = std::numeric_limits<float>::infinity();
    else v = std::numeric_limits<float>::quiet_NaN();
  } else {
    v = std::ldexp(static_cast<float>(man | (1u << M)), static_cast<int>(exp) - bias - M);
  }
  return neg ? -v : v;
}

}  // namespace detail

// ---- bf16: float's exponent range, 7 mantissa bits ----
inline float to_float(bf16 v) { return std::bit_cast<float>(static_cast<uint32_t>(v.bits) << 16); }
inline bf16 to_bf16(float x, Saturation sat = Saturation::none) {
  const uint32_t f = std::bit_cast<uint32_t>(x);
  if ((f & 0x7FFFFFFF) > 0x7F800000) return bf16{static_cast<uint16_t>((f >> 16) | 0x0040)};  // quiet NaN
  if ((f & 0x7FFFFFFF) == 0x7F800000)
    return bf16{static_cast<uint16_t>(sat == Saturation::finite ? ((f >> 16) & 0x8000) | 0x7F7F : f >> 16)};
  const uint32_t r = f + 0x7FFF + ((f >> 16) & 1);
  uint16_t out = static_cast<uint16_t>(r >> 16);
  if (sat == Saturation::finite && (out & 0x7FFF) == 0x7F80) out = static_cast<uint16_t>((out & 0x8000) | 0x7F7F);
  return bf16{out};
}

// ---- fp16: IEEE binary16 ----
inline float to_float(fp16 v) { return detail::decode_narrow<5, 10, true>(v.bits); }
inline fp16 to_fp16(float x, Saturation sat = Saturation::none) {
  return fp16{static_cast<uint16_t>(detail::encode_narrow<5, 10, true, 0x7BFF, 0x7C00, 0x7E00>(x, sat))};
}

// ---- fp8 e4m3fn ----
inline float to_float(fp8_e4m3 v) { return detail::decode_narrow<4, 3, false>(v.bits); }
inline fp8_e4m3 to_fp8_e4m3(float x, Saturation sat = Saturation::none) {
  return fp8_e4m3{static_cast<uint8_t>(detail::encode_narrow<4, 3, false, 0x7E, 0x7F, 0x7F>(x, sat))};
}

// ---- fp8 e5m2 ----
inline float to_float(fp8_e5m2 v) { return detail::decode_narrow<5, 2, true>(v.bits); }
inline fp8_e5m2 to_fp8_e5m2(float x, Saturation sat = Saturation::none) {
  return fp8_e5m2{static_cast<uint8_t>(detail::encode_narrow<5, 2, true, 0x7B, 0x7C, 0x7E>(x, sat))};
}

inline constexpr float kFp8E4m3Max = 448.0f;
inline constexpr float kFp8E5m2Max = 57344.0f;

// Bulk conversions. They take the fastest path the active ISA allows (cpu::active_isa) and agree
// bit for bit with the scalar functions above on every input.
void convert(const float* src, bf16* dst, size_t n, Saturation sat = Saturation::none);
void convert(const float* src, fp16* dst, size_t n, Saturation sat = Saturation::none);
void convert(const float* src, fp8_e4m3* dst, size_t n, Saturation sat = Saturation::none);
void convert(const float* src, fp8_e5m2* dst, size_t n, Saturation sat = Saturation::none);
void convert(const bf16* src, float* dst, size_t n);
void convert(const fp16* src, float* dst, size_t n);
void convert(const fp8_e4m3* src, float* dst, size_t n);
void convert(const fp8_e5m2* src, float* dst, size_t n);

}  // namespace ridge
