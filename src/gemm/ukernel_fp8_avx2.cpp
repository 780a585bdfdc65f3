// FP8 micro-kernel on AVX2 + FMA, 6x16 on fp32 panels (fp8 widened through the e4m3 table while
// packing, exact): each 128-wide K block summed in 12 registers, promoted with its two scales into
// an L1-resident tile (16 registers hold no second set), then the driver's Tile epilogue.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "gemm/kernel.hpp"

namespace ridge::gemm::detail {
namespace {

constexpr int kMR = 6;
constexpr int kNR = 16;

template <int M>
void ukernel(int64_t kc, const void* a_panel, const void* b_panel, int mr, int nr, const Scales& s,
             const Tile& t) {
  const float* a = static_cast<const float*>(a_panel);
  const float* b = static_cast<const float*>(b_panel);
  alignas(32) float c[kMR][kNR];
  for (int64_t kb = 0, k0 = 0; k0 < kc; ++kb, k0 += 128) {
    const int64_t k1 = k0 + 128 < kc ? k0 + 128 : kc;
    __m256 s0[M], s1[M];
    for (int i = 0; i < M; ++i) s0[i] = s1[i] = _mm256_setzero_ps();
    for (int64_t kk = k0; kk < k1; ++kk) {
      const __m256 b0 = _mm256_loadu_ps(b + kk * kNR);
      const __m256 b1 = _mm256_loadu_ps(b + kk * kNR + 8);
      for (int i = 0; i < M; ++i) {
        const __m256 av = _mm256_broadcast_ss(a + kk * kMR + i);
        s0[i] = _mm256_fmadd_ps(av, b0, s0[i]);
        s1[i] = _mm256_fmadd_ps(av, b1, s1[i]);
      }
    }
    const float sbk = s.b[kb];
    for (int i = 0; i < M; ++i) {
      const __m256 sc = _mm256_set1_ps(s.a[i * s.lda + kb] * sbk);
      if (kb == 0) {
        _mm256_store_ps(c[i], _mm256_mul_ps(s0[i], sc));
        _mm256_store_ps(c[i] + 8, _mm256_mul_ps(s1[i], sc));
      } else {
        _mm256_store_ps(c[i], _mm256_fmadd_ps(s0[i], sc, _mm256_load_ps(c[i])));
        _mm256_store_ps(c[i] + 8, _mm256_fmadd_ps(s1[i], sc, _mm256_load_ps(c[i] + 8)));
      }
    }
  }
  store_tile_generic(&c[0][0], kNR, mr, nr, t);
}

#include "gemm/ukernel_rows.inc"

#include "simd/scalar.inc"

// 8 e4m3 codes -> 8 floats, exactly, with normal-float arithmetic only (so FTZ/DAZ cannot change a
// result): t = the 7 magnitude bits moved to fp32's exponent and mantissa; a normal code is t with
// the exponent re-biased (+120); a subnormal code (exponent 0, m x 2^-9) is made as the normal float
// 2^-6 (1 + m/8) less 2^-6. The magnitude 0x7F (NaN in e4m3) reads 480 on the normal path and is made
// NaN by OR-ing the comparison's mask into it; the sign is OR-ed back last.
[[gnu::always_inline]] inline __m256 e4m3x8(const uint8_t* p) {
  const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256i t = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7F)), 20);
  const __m256 normal = _mm256_castsi256_ps(_mm256_add_epi32(t, _mm256_set1_epi32(120 << 23)));
  const __m256 sub = _mm256_sub_ps(_mm256_castsi256_ps(_mm256_add_epi32(t, _mm256_set1_epi32(121 << 23))),
                                   _mm256_set1_ps(0.015625f));
  const __m256 is_sub = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(1 << 23), t));
  __m256 f = _mm256_blendv_ps(normal, sub, is_sub);
  f = _mm256_or_ps(f, _mm256_cmp_ps(f, _mm256_set1_ps(480.0f), _CMP_EQ_OQ));
  return _mm256_or_ps(f, _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(INT32_MIN))));
}

// 16 e4m3 codes -> 16 floats times 2^-8, exactly: the code's bits moved into an fp16 (sign to bit
// 15, the 7 magnitude bits to 13..7) are the same number x 2^-8 for every finite code, e4m3's
// subnormals landing on fp16's with the same ratio (sign-extending to 16 bits and shifting left 7
// puts the sign in bits 15 and 14; the AND clears 14); vcvtph2ps widens exactly. Half the
// instructions of e4m3x8 per value, for B's lines (callers fold 2^8 into the scale). The magnitude
// 0x7F (NaN) reads 1.875 and is made NaN as in e4m3x8.
[[gnu::always_inline]] inline void e4m3x16_scaled(const uint8_t* p, __m256& lo, __m256& hi) {
  const __m256i s = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i h =
      _mm256_and_si256(_mm256_slli_epi16(s, 7), _mm256_set1_epi16(static_cast<int16_t>(0xBFFF)));
  lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
  lo = _mm256_or_ps(lo, _mm256_cmp_ps(lo, _mm256_set1_ps(1.875f), _CMP_EQ_OQ));
  hi = _mm256_or_ps(hi, _mm256_cmp_ps(hi, _mm256_set1_ps(1.875f), _CMP_EQ_OQ));
}

// 1..4 rows of A against B in PackedFp8B panels (decode steps with FP8 weights), as the AVX-512 path's
// small_m_panel_rows: each panel (32 columns, one 64-byte line per k-pair, column c's pair at bytes
// 2c, 2c + 1) is read in address order. A line widens (e4m3x16_scaled) to 8 vectors of 4 columns' pairs; A's
// pair (k, k + 1) is broadcast as one 64-bit value, so lane 2c + h accumulates column c's products of parity
// h, added at the end. Without it an AVX2 machine packed and widened every panel through the blocked path
// (about 2 GB/s of weights). G of the 8 vectors per pass over the panel keep M x G accumulators in registers
// (G = 8 for one row; the passes re-read the panel from L1/L2). Each 128-wide K block is promoted by
// sa[i][kb] * sb[j / 128][kb] into an L1 total.
template <int M, int G>
void small_m_panel_rows(const SmallM& p, int64_t n0, int64_t n1, const Tile& t) {
  constexpr int64_t R = kFp8PanelRows, line = kFp8PanelPairBytes;
  const int64_t nkb = (p.k + 127) / 128, kpad = nkb * 128, pairs = p.ldb;
  const auto* a = static_cast<const uint8_t*>(p.a);
  const auto* b = static_cast<const uint8_t*>(p.b);
  auto* aw = reinterpret_cast<float*>(thread_scratch(static_cast<size_t>(M * kpad) * sizeof(float)));
  for (int i = 0; i < M; ++i) {
    int64_t kk = 0;
    for (; kk + 8 <= p.k; kk += 8) _mm256_storeu_ps(aw + i * kpad + kk, e4m3x8(a + i * p.lda + kk));
    uint8_t tail[8] = {};
    if (kk < p.k) {
      std::memcpy(tail, a + i * p.lda + kk, static_cast<size_t>(p.k - kk));
      _mm256_storeu_ps(aw + i * kpad + kk, e4m3x8(tail));
      kk += 8;
    }
    for (; kk < kpad; kk += 8) _mm256_storeu_ps(aw + i * kpad + kk, _mm256_setzero_ps());
  }
  for (int64_t j0 = n0; j0 < n1; j0 += R) {
    const uint8_t* panel = b + (j0 / R) * pairs * line;
    const float* sbrow = p.sb + (j0 / 128) * p.ldsb;
    alignas(32) float tot[M][2 * R];
    for (int g0 = 0; g0 < 8; g0 += G) {
      for (int64_t kb = 0; kb < nkb; ++kb) {
        const int64_t kp0 = kb * 64, kp1 = imin(pairs, kp0 + 64);
        __m256 c[M][G];
        for (int i = 0; i < M; ++i)
          for (int g = 0; g < G; ++g) c[i][g] = _mm256_setzero_ps();
        for (int64_t kp = kp0; kp < kp1; ++kp) {
          const uint8_t* ln = panel + kp * line + g0 * 8;
          __m256 av[M];
          for (int i = 0; i < M; ++i) {
            double pr;
            std::memcpy(&pr, aw + i * kpad + 2 * kp, sizeof pr);
            av[i] = _mm256_castpd_ps(_mm256_set1_pd(pr));
          }
          for (int g = 0; g < G; g += 2) {
            __m256 w0, w1;
            e4m3x16_scaled(ln + g * 8, w0, w1);
            for (int i = 0; i < M; ++i) {
              c[i][g] = _mm256_fmadd_ps(av[i], w0, c[i][g]);
              c[i][g + 1] = _mm256_fmadd_ps(av[i], w1, c[i][g + 1]);
            }
          }
        }
        const float sbk = sbrow[kb];
        for (int i = 0; i < M; ++i) {
          const __m256 sc = _mm256_set1_ps(p.sa[i * p.ldsa + kb] * sbk * 256.0f);
          for (int g = 0; g < G; ++g) {
            float* d = tot[i] + (g0 + g) * 8;
            _mm256_store_ps(
                d, kb == 0 ? _mm256_mul_ps(c[i][g], sc) : _mm256_fmadd_ps(c[i][g], sc, _mm256_load_ps(d)));
          }
        }
      }
    }
    float out[M][R];
    for (int i = 0; i < M; ++i)
      for (int64_t c = 0; c < R; ++c) out[i][c] = tot[i][2 * c] + tot[i][2 * c + 1];
    store_tile_generic(&out[0][0], R, M, static_cast<int>(imin(R, n1 - j0)), tile_at(t, 0, j0));
  }
}

void small_m_panels(const SmallM& s, int64_t n0, int64_t n1, const Tile& t) {
  if (s.m == 1) return small_m_panel_rows<1, 8>(s, n0, n1, t);
  if (s.m == 2) return small_m_panel_rows<2, 4>(s, n0, n1, t);
  if (s.m == 3) return small_m_panel_rows<3, 4>(s, n0, n1, t);
  small_m_panel_rows<4, 2>(s, n0, n1, t);
}

}  // namespace

KernelInfo kernel_fp8_avx2() {
  return KernelInfo{.name = "fp8_avx2_6x16",
                    .mr = kMR,
                    .nr = kNR,
                    .panel = Panel::f32,
                    .k_granule = 128,
                    .ukernel = &ukernel_dispatch,
                    .pack_a = &pack_fp8_lut,
                    .pack_b = &pack_fp8_lut,
                    .small_m_fp8_panels = &small_m_panels,
                    .narrow_max_rows = 32};
}

}  // namespace ridge::gemm::detail
