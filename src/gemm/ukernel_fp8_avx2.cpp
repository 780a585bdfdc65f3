// FP8 micro-kernel on AVX2 + FMA, 6x16 on fp32 panels (fp8 widened exactly while packing, 8 codes at a
// time): each 128-wide K block summed in 12 registers, promoted with its two scales into
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
// The codes are the low 8 bytes of `codes`.
[[gnu::always_inline]] inline __m256 e4m3x8(__m128i codes) {
  const __m256i v = _mm256_cvtepi8_epi32(codes);
  const __m256i t = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7F)), 20);
  const __m256 normal = _mm256_castsi256_ps(_mm256_add_epi32(t, _mm256_set1_epi32(120 << 23)));
  const __m256 sub = _mm256_sub_ps(_mm256_castsi256_ps(_mm256_add_epi32(t, _mm256_set1_epi32(121 << 23))),
                                   _mm256_set1_ps(0.015625f));
  const __m256 is_sub = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(1 << 23), t));
  __m256 f = _mm256_blendv_ps(normal, sub, is_sub);
  f = _mm256_or_ps(f, _mm256_cmp_ps(f, _mm256_set1_ps(480.0f), _CMP_EQ_OQ));
  return _mm256_or_ps(f, _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(INT32_MIN))));
}
[[gnu::always_inline]] inline __m256 e4m3x8(const uint8_t* p) {
  return e4m3x8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
// The first n (1..8) codes at p, the rest read as 0 (bytes past p + n are not touched).
[[gnu::always_inline]] inline __m256 e4m3x8(const uint8_t* p, int64_t n) {
  if (n >= 8) return e4m3x8(p);
  uint8_t tail[8] = {};
  std::memcpy(tail, p, static_cast<size_t>(n));
  return e4m3x8(tail);
}

// The m rows of A (row stride lda) widened into the thread's scratch: rows of kpad floats (kpad >= k, a
// multiple of 8), zero past k. For the small-m kernels, which widen A once per call.
float* widen_a_rows(const SmallM& p, int64_t m, int64_t kpad) {
  auto* aw = reinterpret_cast<float*>(thread_scratch(static_cast<size_t>(m * kpad) * sizeof(float)));
  const auto* a = static_cast<const uint8_t*>(p.a);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t kk = 0; kk < kpad; kk += 8)
      _mm256_storeu_ps(aw + i * kpad + kk,
                       kk < p.k ? e4m3x8(a + i * p.lda + kk, p.k - kk) : _mm256_setzero_ps());
  return aw;
}

// 16 e4m3 codes -> 16 floats times 2^-8, exactly: the code's bits moved into an fp16 (sign to bit
// 15, the 7 magnitude bits to 13..7) are the same number x 2^-8 for every finite code, e4m3's
// subnormals landing on fp16's with the same ratio (sign-extending to 16 bits and shifting left 7
// puts the sign in bits 15 and 14; the AND clears 14); vcvtph2ps widens exactly. Half the
// instructions of e4m3x8 per value, for B's lines (callers fold 2^8 into the scale). A NaN code
// (magnitude 0x7F, either sign) has all of bits 13..7 set; those lanes get fp16's exponent 0x1F and a
// mantissa bit (OR 0x7E00), a quiet NaN of the code's sign, before widening. Until 2026-11-28 the fix was
// a compare of the widened value with +1.875 (0x7F x 2^-8), which missed the negative NaN 0xFF: it read
// -1.875 (Fp8Gemm.PackedWeightsKeepNanCodesAndFiniteOnesBitForBit). Codes known to hold no NaN (a
// PackedFp8B that found none when it packed: kNaN false) skip the fix, 3 of 9 instructions per 16 codes.
template <bool kNaN = true>
[[gnu::always_inline]] inline void e4m3x16_scaled(const uint8_t* p, __m256& lo, __m256& hi) {
  const __m256i s = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  __m256i h = _mm256_and_si256(_mm256_slli_epi16(s, 7), _mm256_set1_epi16(static_cast<int16_t>(0xBFFF)));
  if constexpr (kNaN) {
    const __m256i mag = _mm256_set1_epi16(0x3F80);
    const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(h, mag), mag);
    h = _mm256_or_si256(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x7E00)));
  }
  lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// 1..4 rows of A against B in PackedFp8B panels (decode steps with FP8 weights), as the AVX-512 path's
// small_m_panel_rows: each panel (32 columns, one 64-byte line per k-pair, column c's pair at bytes
// 2c, 2c + 1) is read in address order. A line widens (e4m3x16_scaled) to 8 vectors of 4 columns' pairs; A's
// pair (k, k + 1) is broadcast as one 64-bit value, so lane 2c + h accumulates column c's products of parity
// h, added at the end. Without it an AVX2 machine packed and widened every panel through the blocked path
// (about 2 GB/s of weights). G of the 8 vectors per pass over the panel keep M x G accumulators in registers
// (G = 8 for one row; the passes re-read the panel from L1/L2). Each 128-wide K block is promoted by
// sa[i][kb] * sb[j / 128][kb] into an L1 total.
template <int M, int G, bool kNaN>
void small_m_panel_rows(const SmallM& p, int64_t n0, int64_t n1, const Tile& t) {
  constexpr int64_t R = kFp8PanelRows, line = kFp8PanelPairBytes;
  const int64_t nkb = (p.k + 127) / 128, kpad = nkb * 128, pairs = p.ldb;
  const auto* b = static_cast<const uint8_t*>(p.b);
  const float* aw = widen_a_rows(p, M, kpad);
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
            e4m3x16_scaled<kNaN>(ln + g * 8, w0, w1);
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

template <bool kNaN>
void small_m_panels_as(const SmallM& s, int64_t n0, int64_t n1, const Tile& t) {
  if (s.m == 1) return small_m_panel_rows<1, 8, kNaN>(s, n0, n1, t);
  if (s.m == 2) return small_m_panel_rows<2, 4, kNaN>(s, n0, n1, t);
  if (s.m == 3) return small_m_panel_rows<3, 4, kNaN>(s, n0, n1, t);
  small_m_panel_rows<4, 2, kNaN>(s, n0, n1, t);
}

void small_m_panels(const SmallM& s, int64_t n0, int64_t n1, const Tile& t) {
  if (s.b_finite) return small_m_panels_as<false>(s, n0, n1, t);
  small_m_panels_as<true>(s, n0, n1, t);
}

inline float hsum8(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// 1..4 rows of A against raw row-major fp8 B (FP8 weights not packed into PackedFp8B; 5..16 rows run
// faster on the blocked path with the vector packer: at m = 16, n = 24576, k = 1536, 9.5 ms against 13.9).
// Without it such a call packed and widened B through the blocked path, one element at a time through the
// table: at m = 1, n = 4096, k = 7168 it took 5x bf16's time. Here B is read once, in place: for each group
// of NJ rows of B and each 128-wide K block, the NJ x 128 codes are widened once (e4m3x16_scaled, 2^-8 folded
// into the scale) into an L1 buffer, and every group of MI rows of A (widened once per call, e4m3x8) takes
// its products from there, so a block of B widened once serves all m rows. Each accumulator holds 8 lanes of
// K for one (row, column); a K block's sum (its lanes added) is promoted with sa[i][kb] * sb[j / 128][kb]
// into the total as the blocked kernel promotes its own (a multiply, then fused multiply-adds), so where a
// block's sum is exact in fp32 the two give the same bits (Fp8Gemm.Bf16OutputAcrossKBlocksWithCEveryPath).
constexpr int kRawRows = 4;  // the kernel's small_m_rows

template <int MI, int NJ>
void small_m_raw_blocks(const SmallM& p, const float* aw, int64_t kpad, int64_t n0, int64_t n1,
                        const Tile& t) {
  const int64_t nkb = kpad / 128;
  const auto* b = static_cast<const uint8_t*>(p.b);
  alignas(32) float wb[NJ][128];
  float tot[kRawRows][NJ];
  for (int64_t j0 = n0; j0 < n1; j0 += NJ) {
    const int nj = static_cast<int>(imin(NJ, n1 - j0));
    const uint8_t* br[NJ];
    const uint8_t* nx[NJ];
    for (int j = 0; j < NJ; ++j) {
      br[j] = b + (j0 + imin(j, nj - 1)) * p.ldb;
      nx[j] = b + imin(j0 + NJ + j, n1 - 1) * p.ldb;
    }
    for (int64_t kb = 0; kb < nkb; ++kb) {
      const int64_t k0 = kb * 128, len = imin(128, p.k - k0), len16 = (len + 15) / 16 * 16;
      for (int j = 0; j < NJ; ++j) {
        _mm_prefetch(reinterpret_cast<const char*>(nx[j] + k0), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(nx[j] + k0 + 64), _MM_HINT_T0);
        for (int64_t q = 0; q < len16; q += 16) {
          const uint8_t* src = br[j] + k0 + q;
          alignas(16) uint8_t tail[16] = {};
          if (q + 16 > len) {
            std::memcpy(tail, src, static_cast<size_t>(len - q));
            src = tail;
          }
          __m256 lo, hi;
          e4m3x16_scaled(src, lo, hi);
          _mm256_store_ps(wb[j] + q, lo);
          _mm256_store_ps(wb[j] + q + 8, hi);
        }
      }
      float sbk[NJ];
      for (int j = 0; j < NJ; ++j) sbk[j] = p.sb[((j0 + imin(j, nj - 1)) / 128) * p.ldsb + kb] * 256.0f;
      for (int64_t i0 = 0; i0 < p.m; i0 += MI) {
        const int mi = static_cast<int>(imin(MI, p.m - i0));
        const float* ar[MI];
        for (int i = 0; i < MI; ++i) ar[i] = aw + (i0 + imin(i, mi - 1)) * kpad + k0;
        __m256 c[MI][NJ];
        for (int i = 0; i < MI; ++i)
          for (int j = 0; j < NJ; ++j) c[i][j] = _mm256_setzero_ps();
        for (int64_t q = 0; q < len16; q += 8) {
          __m256 bv[NJ];
          for (int j = 0; j < NJ; ++j) bv[j] = _mm256_load_ps(wb[j] + q);
          for (int i = 0; i < MI; ++i) {
            const __m256 av = _mm256_loadu_ps(ar[i] + q);
            for (int j = 0; j < NJ; ++j) c[i][j] = _mm256_fmadd_ps(av, bv[j], c[i][j]);
          }
        }
        for (int i = 0; i < mi; ++i) {
          const float sa = p.sa[(i0 + i) * p.ldsa + kb];
          for (int j = 0; j < NJ; ++j) {
            const float sum = hsum8(c[i][j]), sc = sa * sbk[j];
            float& d = tot[i0 + i][j];
            d = kb == 0 ? sum * sc : __builtin_fmaf(sum, sc, d);
          }
        }
      }
    }
    store_tile_generic(&tot[0][0], NJ, static_cast<int>(p.m), nj, tile_at(t, 0, j0));
  }
}

// A widened once per call into the thread's scratch (rows of kpad floats, zero past k, so the K tail
// of B, zero-padded as it is widened, adds nothing), then the blocks by m: all m rows of A in one pass,
// with as many rows of B as the 16 registers hold (m x NJ accumulators, NJ of B, one of A).
void small_m_raw(const SmallM& p, int64_t n0, int64_t n1, const Tile& t) {
  const int64_t kpad = (p.k + 127) / 128 * 128;
  const float* aw = widen_a_rows(p, p.m, kpad);
  if (p.m == 1) return small_m_raw_blocks<1, 6>(p, aw, kpad, n0, n1, t);
  if (p.m == 2) return small_m_raw_blocks<2, 4>(p, aw, kpad, n0, n1, t);
  if (p.m == 3) return small_m_raw_blocks<3, 3>(p, aw, kpad, n0, n1, t);
  small_m_raw_blocks<4, 2>(p, aw, kpad, n0, n1, t);
}

#include "gemm/transpose_avx2.inc"

// The FP8 packer: fp8 operands widened exactly (e4m3x8) into the fp32 panels of the 6x16 kernel, 8 codes
// at a time, where pack_fp8_lut went one element at a time through the table and took FP8 at m = 64..128
// to 1.5x bf16's time (whose packing widens 8 at a time). Raw rows (A, or B as given): 8 rows by 8 codes,
// widened, then transpose8. PackedFp8B panels (B, kFp8PanelRows rows per panel, one 64-byte line per
// k-pair, row r's pair at bytes 2r, 2r + 1): 16 rows of a k-pair are 32 bytes in a row, and a byte shuffle
// that gathers the even and odd bytes gives k and k + 1 of 8 rows each, already in panel order, so no
// transpose. A group of rows cut short by the end of B (count < R) takes the table.
void pack_fp8_avx2(const KernelInfo& ki, const Operand& src, int64_t r0, int64_t count, int64_t p0,
                   int64_t kc, int R, void* dst, bool fast) {
  if (!fast || (src.fp8_panels && (count < R || R != 16 || r0 % 16 != 0 || p0 % 2 != 0)))
    return pack_fp8_lut(ki, src, r0, count, p0, kc, R, dst, fast);
  const auto* bytes = static_cast<const uint8_t*>(src.data);
  auto* out = static_cast<float*>(dst);
  const int64_t npanels = (count + R - 1) / R;
  if (src.fp8_panels) {
    // Within each 128-bit lane: the 8 even bytes (k) to the low half, the 8 odd bytes (k + 1) to the high.
    const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6,
                                           8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    for (int64_t q = 0; q < npanels; ++q) {
      const int64_t j = r0 + q * R;
      const uint8_t* panel =
          bytes + (j / kFp8PanelRows) * src.ld * kFp8PanelPairBytes + (j % kFp8PanelRows) * 2;
      float* o = out + q * R * kc;
      for (int64_t kk = 0; kk < kc; kk += 2) {
        const __m256i v = _mm256_shuffle_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                                                  panel + ((p0 + kk) / 2) * kFp8PanelPairBytes)),
                                              split);
        const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
        _mm256_storeu_ps(o + kk * R, e4m3x8(lo));
        _mm256_storeu_ps(o + kk * R + 8, e4m3x8(hi));
        if (kk + 1 < kc) {
          _mm256_storeu_ps(o + (kk + 1) * R, e4m3x8(_mm_srli_si128(lo, 8)));
          _mm256_storeu_ps(o + (kk + 1) * R + 8, e4m3x8(_mm_srli_si128(hi, 8)));
        }
      }
    }
    return;
  }
  for (int64_t q = 0; q < npanels; ++q) {
    const int64_t base = q * R;
    pack_rows8<1>(bytes + (r0 + base) * src.ld + p0, src.ld, static_cast<int>(imin(R, count - base)), kc, R,
                  out + q * R * kc,
                  [](const char* row, int nw) { return e4m3x8(reinterpret_cast<const uint8_t*>(row), nw); });
  }
}

}  // namespace

KernelInfo kernel_fp8_avx2() {
  return KernelInfo{.name = "fp8_avx2_6x16",
                    .mr = kMR,
                    .nr = kNR,
                    .panel = Panel::f32,
                    .k_granule = 128,
                    .ukernel = &ukernel_dispatch,
                    .pack_a = &pack_fp8_avx2,
                    .pack_b = &pack_fp8_avx2,
                    .small_m = &small_m_raw,
                    .small_m_elem = Elem::fp8,
                    .small_m_cols = 16,
                    .small_m_rows = kRawRows,
                    .small_m_fp8_panels = &small_m_panels,
                    .narrow_max_rows = 0,
                    .narrow_a_in_l2 = true};
}

}  // namespace ridge::gemm::detail
