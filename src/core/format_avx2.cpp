// AVX2 bulk conversions: the same integer algorithms as format_avx512.cpp on 8 lanes, with
// compares and blends in place of mask registers. Tails go through a small zero-padded stack
// buffer so the vector body never reads or writes past the arrays. Everything but the entry points
// is in an anonymous namespace (see format_isa.hpp for why).
#include <immintrin.h>

#include <cstring>

#include "core/format_isa.hpp"

namespace {

// to_bf16_epi32: this unit's private copy (docs/core.md, "Per-ISA convention").
#include "simd/avx2.inc"

using u32 = uint32_t;

__m256i set1(u32 v) {
  return _mm256_set1_epi32(static_cast<int>(v));
}
__m256i select(__m256i mask, __m256i if_false, __m256i if_true) {
  return _mm256_blendv_epi8(if_false, if_true, mask);
}

// float bits -> narrow code; mirrors encode_narrow in format_avx512.cpp. Lane values stay below
// 2^31 wherever they are compared, so signed compares serve.
// Forced inline: as a call, every vector passes through memory and the loop runs several times slower.
template <int E, int M, bool HasInf>
[[gnu::always_inline]] inline __m256i encode_narrow(__m256i f, bool satfinite) {
  constexpr int bias = (1 << (E - 1)) - 1;
  constexpr int emin = 1 - bias;
  constexpr u32 sign_bit = 1u << (E + M);
  constexpr u32 exp_ones = ((1u << E) - 1) << M;
  constexpr u32 nan_code = HasInf ? exp_ones | (1u << (M - 1)) : sign_bit - 1;
  constexpr u32 max_finite = HasInf ? exp_ones - 1 : sign_bit - 2;
  const u32 overflow = satfinite ? max_finite : (HasInf ? exp_ones : nan_code);

  const __m256i a = _mm256_and_si256(f, set1(0x7FFFFFFF));
  const __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(f, 31), E + M);
  const __m256i exp = _mm256_srli_epi32(a, 23);

  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, 23 - M), set1(1));
  const __m256i r = _mm256_add_epi32(_mm256_add_epi32(a, set1((1u << (22 - M)) - 1)), lsb);
  const __m256i normal =
      _mm256_sub_epi32(_mm256_srli_epi32(r, 23 - M), set1(static_cast<u32>(127 - bias) << M));

  const __m256i s =
      _mm256_min_epi32(_mm256_sub_epi32(set1(static_cast<u32>(127 + emin + 23 - M)), exp), set1(25));
  const __m256i mant = _mm256_or_si256(_mm256_and_si256(a, set1(0x7FFFFF)), set1(0x800000));
  const __m256i half_m1 = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_sllv_epi32(set1(1), s), 1), set1(1));
  const __m256i slsb = _mm256_and_si256(_mm256_srlv_epi32(mant, s), set1(1));
  const __m256i sub = _mm256_srlv_epi32(_mm256_add_epi32(_mm256_add_epi32(mant, half_m1), slsb), s);

  const __m256i is_sub = _mm256_cmpgt_epi32(set1(127 + emin), exp);
  __m256i code = select(is_sub, normal, sub);
  code = select(_mm256_cmpgt_epi32(code, set1(max_finite)), code, set1(overflow));
  const __m256i is_nan = _mm256_cmpgt_epi32(a, set1(0x7F800000));
  __m256i nan = set1(nan_code);
  if constexpr (HasInf)
    nan = _mm256_or_si256(nan, _mm256_and_si256(_mm256_srli_epi32(a, 23 - M), set1((1u << M) - 1)));
  code = select(is_nan, code, nan);
  return _mm256_or_si256(code, sign);
}

// to_bf16_epi32 (simd/avx2.inc) rounds and quiets NaN; a quiet NaN code has bit 6 set, so the
// saturation test below never matches one.
[[gnu::always_inline]] inline __m256i encode_bf16(__m256i f, bool satfinite) {
  __m256i out = to_bf16_epi32(f);
  if (satfinite) {
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(f, 16), set1(0x8000));
    const __m256i inf = _mm256_cmpeq_epi32(_mm256_and_si256(out, set1(0x7FFF)), set1(0x7F80));
    out = select(inf, out, _mm256_or_si256(sign, set1(0x7F7F)));
  }
  return out;
}

__m256i load8(const float* p) {
  return _mm256_castps_si256(_mm256_loadu_ps(p));
}

// 16 floats -> 16 codes of 16 bits. packus keeps values (all <= 0xFFFF) and interleaves the
// 128-bit halves; the permute restores element order.
template <typename Encode>
void encode16_to_u16(const float* src, uint16_t* dst, Encode enc) {
  const __m256i p = _mm256_packus_epi32(enc(load8(src)), enc(load8(src + 8)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_permute4x64_epi64(p, 0xD8));
}

// 32 floats -> 32 codes of 8 bits. After the two packs the dwords hold groups of four elements
// in the order 0 2 4 6 1 3 5 7 (in units of four); the permute puts them back in place.
template <typename Encode>
void encode32_to_u8(const float* src, uint8_t* dst, Encode enc) {
  const __m256i p01 = _mm256_packus_epi32(enc(load8(src)), enc(load8(src + 8)));
  const __m256i p23 = _mm256_packus_epi32(enc(load8(src + 16)), enc(load8(src + 24)));
  const __m256i q = _mm256_packus_epi16(p01, p23);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_permutevar8x32_epi32(q, order));
}

template <typename Encode>
void encode_to_u16(const float* src, uint16_t* dst, size_t n, Encode enc) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) encode16_to_u16(src + i, dst + i, enc);
  if (i < n) {
    float in[16] = {};
    uint16_t out[16];
    std::memcpy(in, src + i, (n - i) * sizeof(float));
    encode16_to_u16(in, out, enc);
    std::memcpy(dst + i, out, (n - i) * sizeof(uint16_t));
  }
}

template <typename Encode>
void encode_to_u8(const float* src, uint8_t* dst, size_t n, Encode enc) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) encode32_to_u8(src + i, dst + i, enc);
  if (i < n) {
    float in[32] = {};
    uint8_t out[32];
    std::memcpy(in, src + i, (n - i) * sizeof(float));
    encode32_to_u8(in, out, enc);
    std::memcpy(dst + i, out, n - i);
  }
}

// Decoders take 8 codes per step; `Decode` maps a pointer to 8 codes to 8 float bit patterns.
template <typename Code, typename Decode>
void decode(const Code* src, float* dst, size_t n, Decode dec) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), dec(src + i));
  if (i < n) {
    Code in[8] = {};
    float out[8];
    std::memcpy(in, src + i, (n - i) * sizeof(Code));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), dec(in));
    std::memcpy(dst + i, out, (n - i) * sizeof(float));
  }
}

__m128i load8_u16(const uint16_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
__m128i load8_u8(const uint8_t* p) {
  return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
}

[[gnu::always_inline]] inline __m256i decode_e4m3(__m256i c) {
  const __m256i mag = _mm256_and_si256(c, set1(0x7F));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, set1(0x80)), 24);
  const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), set1(120u << 23));
  const __m256i sub = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-9f)));
  __m256i v = select(_mm256_cmpgt_epi32(set1(8), mag), normal, sub);
  v = select(_mm256_cmpeq_epi32(mag, set1(0x7F)), v, set1(0x7FF00000));
  return _mm256_or_si256(v, sign);
}

}  // namespace

namespace {

void f32_to_bf16(const float* src, uint16_t* dst, size_t n, bool satfinite) {
  encode_to_u16(src, dst, n, [satfinite](__m256i f) { return encode_bf16(f, satfinite); });
}
void f32_to_fp16(const float* src, uint16_t* dst, size_t n, bool satfinite) {
  encode_to_u16(src, dst, n, [satfinite](__m256i f) { return encode_narrow<5, 10, true>(f, satfinite); });
}
void f32_to_e4m3(const float* src, uint8_t* dst, size_t n, bool satfinite) {
  encode_to_u8(src, dst, n, [satfinite](__m256i f) { return encode_narrow<4, 3, false>(f, satfinite); });
}
void f32_to_e5m2(const float* src, uint8_t* dst, size_t n, bool satfinite) {
  encode_to_u8(src, dst, n, [satfinite](__m256i f) { return encode_narrow<5, 2, true>(f, satfinite); });
}

void bf16_to_f32(const uint16_t* src, float* dst, size_t n) {
  decode(src, dst, n,
         [](const uint16_t* p) { return _mm256_slli_epi32(_mm256_cvtepu16_epi32(load8_u16(p)), 16); });
}
void fp16_to_f32(const uint16_t* src, float* dst, size_t n) {
  decode(src, dst, n, [](const uint16_t* p) { return _mm256_castps_si256(_mm256_cvtph_ps(load8_u16(p))); });
}
void e4m3_to_f32(const uint8_t* src, float* dst, size_t n) {
  decode(src, dst, n, [](const uint8_t* p) { return decode_e4m3(_mm256_cvtepu8_epi32(load8_u8(p))); });
}
void e5m2_to_f32(const uint8_t* src, float* dst, size_t n) {
  decode(src, dst, n, [](const uint8_t* p) {
    return _mm256_castps_si256(_mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(load8_u8(p)), 8)));
  });
}

}  // namespace

ridge::format_isa::Kernels ridge::format_isa::kernels_avx2() {
  return {f32_to_bf16, f32_to_fp16, f32_to_e4m3, f32_to_e5m2,
          bf16_to_f32, fp16_to_f32, e4m3_to_f32, e5m2_to_f32};
}
