// AVX-512 bulk conversions, 16 floats per step, tails through masked loads and stores.
// Encoders work on the float's bits with integer instructions only, so FTZ/DAZ and the MXCSR
// rounding mode cannot change a result; they mirror detail::encode_narrow and to_bf16 in
// ridge/core/format.hpp. Everything but the entry points is in an anonymous namespace (see
// format_isa.hpp for why).
// GCC 12's AVX-512 headers build some intrinsics from a self-initialised "undefined" vector,
// which -W(maybe-)uninitialized reports at every inlined use (a false positive, GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "core/format_isa.hpp"

namespace {

// to_bf16_epi32 and from_bf16_ps: this unit's private copies (docs/core.md, "Per-ISA convention").
#include "simd/avx512.inc"

using u32 = uint32_t;

__m512i set1(u32 v) {
  return _mm512_set1_epi32(static_cast<int>(v));
}

// float bits -> narrow code (E exponent, M mantissa bits) in the low bits of each 32-bit lane.
// Forced inline: as a call, every vector passes through memory and the loop runs several times slower.
template <int E, int M, bool HasInf>
[[gnu::always_inline]] inline __m512i encode_narrow(__m512i f, bool satfinite) {
  constexpr int bias = (1 << (E - 1)) - 1;
  constexpr int emin = 1 - bias;
  constexpr u32 sign_bit = 1u << (E + M);
  constexpr u32 exp_ones = ((1u << E) - 1) << M;
  constexpr u32 nan_code = HasInf ? exp_ones | (1u << (M - 1)) : sign_bit - 1;
  constexpr u32 max_finite = HasInf ? exp_ones - 1 : sign_bit - 2;
  const u32 overflow = satfinite ? max_finite : (HasInf ? exp_ones : nan_code);

  const __m512i a = _mm512_and_si512(f, set1(0x7FFFFFFF));
  const __m512i sign = _mm512_slli_epi32(_mm512_srli_epi32(f, 31), E + M);
  const __m512i exp = _mm512_srli_epi32(a, 23);

  // Normal results: round a at bit 23-M (nearest, ties to even), then rebias the exponent. A carry
  // out of the mantissa moves into the exponent, which is the correctly rounded code.
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(a, 23 - M), set1(1));
  const __m512i r = _mm512_add_epi32(_mm512_add_epi32(a, set1((1u << (22 - M)) - 1)), lsb);
  const __m512i normal =
      _mm512_sub_epi32(_mm512_srli_epi32(r, 23 - M), set1(static_cast<u32>(127 - bias) << M));

  // Subnormal results: shift the 24-bit significand right by s = (23 - M) + (emin - e), rounding
  // the same way. s is capped at 25, where every significand rounds to zero.
  const __m512i s =
      _mm512_min_epi32(_mm512_sub_epi32(set1(static_cast<u32>(127 + emin + 23 - M)), exp), set1(25));
  const __m512i mant = _mm512_or_si512(_mm512_and_si512(a, set1(0x7FFFFF)), set1(0x800000));
  const __m512i half_m1 = _mm512_sub_epi32(_mm512_srli_epi32(_mm512_sllv_epi32(set1(1), s), 1), set1(1));
  const __m512i slsb = _mm512_and_si512(_mm512_srlv_epi32(mant, s), set1(1));
  const __m512i sub = _mm512_srlv_epi32(_mm512_add_epi32(_mm512_add_epi32(mant, half_m1), slsb), s);

  const __mmask16 is_sub = _mm512_cmplt_epi32_mask(exp, set1(127 + emin));
  __m512i code = _mm512_mask_blend_epi32(is_sub, normal, sub);
  code = _mm512_mask_blend_epi32(_mm512_cmpgt_epu32_mask(code, set1(max_finite)), code, set1(overflow));
  const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(a, set1(0x7F800000));
  __m512i nan = set1(nan_code);
  if constexpr (HasInf)
    nan = _mm512_or_si512(nan, _mm512_and_si512(_mm512_srli_epi32(a, 23 - M), set1((1u << M) - 1)));
  code = _mm512_mask_blend_epi32(is_nan, code, nan);
  return _mm512_or_si512(code, sign);
}

// to_bf16_epi32 (simd/avx512.inc) rounds and quiets NaN; a quiet NaN code has bit 6 set, so the
// saturation test below never matches one.
[[gnu::always_inline]] inline __m512i encode_bf16(__m512i f, bool satfinite) {
  __m512i out = to_bf16_epi32(f);
  if (satfinite) {
    // Infinite inputs round to the inf code too, so one test catches both kinds of overflow.
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(f, 16), set1(0x8000));
    const __mmask16 inf = _mm512_cmpeq_epi32_mask(_mm512_and_si512(out, set1(0x7FFF)), set1(0x7F80));
    out = _mm512_mask_blend_epi32(inf, out, _mm512_or_si512(sign, set1(0x7F7F)));
  }
  return out;
}

__mmask16 tail_mask(size_t left) {
  return static_cast<__mmask16>((1u << left) - 1);
}

template <typename Encode>
void encode_to_u16(const float* src, uint16_t* dst, size_t n, Encode enc) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i c = enc(_mm512_castps_si512(_mm512_loadu_ps(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(c));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512i c = enc(_mm512_castps_si512(_mm512_maskz_loadu_ps(m, src + i)));
    _mm512_mask_cvtepi32_storeu_epi16(dst + i, m, c);
  }
}

template <typename Encode>
void encode_to_u8(const float* src, uint8_t* dst, size_t n, Encode enc) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i c = enc(_mm512_castps_si512(_mm512_loadu_ps(src + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm512_cvtepi32_epi8(c));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512i c = enc(_mm512_castps_si512(_mm512_maskz_loadu_ps(m, src + i)));
    _mm512_mask_cvtepi32_storeu_epi8(dst + i, m, c);
  }
}

// e4m3fn code (zero-extended to 32 bits) -> float bits. Subnormals go through an exact int->float
// conversion and a multiply by 2^-9; both results are normal floats, so FTZ/DAZ cannot touch them.
[[gnu::always_inline]] inline __m512i decode_e4m3(__m512i c) {
  const __m512i mag = _mm512_and_si512(c, set1(0x7F));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, set1(0x80)), 24);
  const __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(mag, 20), set1(120u << 23));
  const __m512i sub = _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(0x1p-9f)));
  __m512i v = _mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(mag, set1(8)), normal, sub);
  v = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(mag, set1(0x7F)), v, set1(0x7FF00000));
  return _mm512_or_si512(v, sign);
}

}  // namespace

namespace {

void f32_to_bf16(const float* src, uint16_t* dst, size_t n, bool satfinite) {
  encode_to_u16(src, dst, n, [satfinite](__m512i f) { return encode_bf16(f, satfinite); });
}
void f32_to_fp16(const float* src, uint16_t* dst, size_t n, bool satfinite) {
  encode_to_u16(src, dst, n, [satfinite](__m512i f) { return encode_narrow<5, 10, true>(f, satfinite); });
}
void f32_to_e4m3(const float* src, uint8_t* dst, size_t n, bool satfinite) {
  encode_to_u8(src, dst, n, [satfinite](__m512i f) { return encode_narrow<4, 3, false>(f, satfinite); });
}
void f32_to_e5m2(const float* src, uint8_t* dst, size_t n, bool satfinite) {
  encode_to_u8(src, dst, n, [satfinite](__m512i f) { return encode_narrow<5, 2, true>(f, satfinite); });
}

void bf16_to_f32(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, from_bf16_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, from_bf16_ps(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

// vcvtph2ps is exact, quiets a signalling NaN keeping its payload (as the scalar decode does), and
// ignores MXCSR.DAZ for half-precision inputs.
void fp16_to_f32(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

void e4m3_to_f32(const uint8_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm512_storeu_si512(dst + i, decode_e4m3(c));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512i c = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, src + i));
    _mm512_mask_storeu_epi32(dst + i, m, decode_e4m3(c));
  }
}

// e5m2 is the top byte of an fp16 code, so widening by 8 bits makes it exact fp16.
void e5m2_to_f32(const uint8_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_slli_epi16(
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))), 8);
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, src + i)), 8);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(h));
  }
}

}  // namespace

ridge::format_isa::Kernels ridge::format_isa::kernels_avx512() {
  return {f32_to_bf16, f32_to_fp16, f32_to_e4m3, f32_to_e5m2,
          bf16_to_f32, fp16_to_f32, e4m3_to_f32, e5m2_to_f32};
}
