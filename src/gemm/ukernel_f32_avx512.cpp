// AVX-512 fp32 micro-kernel, 14x32: 28 zmm accumulators (14 rows x 2 vectors of 16 columns) hide
// the FMA latency (4 cycles x 2 pipes on Zen 5 needs >= 8 in flight); A is broadcast from the
// packed panel, B is two vector loads per k. Also the bf16 path on AVX-512 machines without
// AVX512_BF16 (the driver widens bf16 to fp32 while packing).
// GCC 12 reports its own intrinsics' undefined-value temporaries as (maybe-)uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>

#include <cstdint>
#include <utility>

#include "gemm/kernel.hpp"

namespace ridge::gemm::detail {
namespace {

constexpr int kMR = 14;
constexpr int kNR = 32;
// The most rows of A the small-m kernels take (small_m_lanes.inc past 16): at 32-64 rows they ran
// 1.0-1.4x the blocked path (docs/gemm.md, 17..64 rows).
constexpr int64_t kSmallMRows = 64;

#include "simd/scalar.inc"
#include "simd/avx512.inc"
#include "gemm/epilogue_avx512.inc"

template <int M>
void ukernel(int64_t kc, const void* a_panel, const void* b_panel, int /*mr*/, int nr, const Scales&,
             const Tile& t) {
  const float* a = static_cast<const float*>(a_panel);
  const float* b = static_cast<const float*>(b_panel);
  __m512 c0[M], c1[M];
#pragma GCC unroll 14
  for (int i = 0; i < M; ++i) {
    c0[i] = _mm512_setzero_ps();
    c1[i] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_load_ps(b);
    const __m512 b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 14
    for (int i = 0; i < M; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
      c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
    }
    a += kMR;
    b += kNR;
  }
  store_tile_x32<M>(c0, c1, nr, t);
}

#include "gemm/ukernel_rows.inc"

#include "gemm/dot_f32_avx512.inc"
#include "gemm/small_m_avx512.inc"
#include "gemm/transpose_avx512.inc"

// 17..64 rows (small_m_lanes.inc): the rows of A in the lanes, B's element an embedded broadcast.
struct LanesF32 {
  using E = float;
  static constexpr int kWordK = 1;
  static __m512i words(const float* p, int64_t left) {
    const __mmask16 km = left >= 16  ? __mmask16(0xFFFF)
                         : left <= 0 ? __mmask16(0)
                                     : __mmask16((1u << left) - 1);
    return _mm512_maskz_loadu_epi32(km, p);
  }
  static void madd(__m512& acc, __m512i a, const uint32_t* b) {
    __asm__("vfmadd231ps %[b]%{1to16%}, %[a], %[acc]" : [acc] "+v"(acc) : [a] "v"(a), [b] "m"(*b));
  }
  static void madd(__m256& acc, __m256i a, const uint32_t* b) {
    __asm__("vfmadd231ps %[b]%{1to8%}, %[a], %[acc]" : [acc] "+v"(acc) : [a] "v"(a), [b] "m"(*b));
  }
};

#include "gemm/small_m_lanes.inc"
#include "gemm/small_m_lanes_avx512.inc"

void small_m(const SmallM& s, int64_t n0, int64_t n1, const Tile& t) {
  if (s.m > 16) return small_m_lanes_rows<Lanes512<LanesF32>>(s, n0, n1, t);
  small_m_blocks<DotF32>(s.m, n0, n1, s.k, s.a, s.lda, s.b, s.ldb, t,
                         rows_in_address_order(s.m, s.k, sizeof(float), sizeof(float)));
}

// Rows of 32-bit words (Widen: of bf16, each widened to the fp32 whose high half it is) into panels of R
// rows, [word][R], 16 rows by 16 words at a time through transpose16; rows past `rows` are zero.
template <bool Widen>
void pack_16x16(const void* src, int64_t ld_bytes, int rows, int64_t words, int R, uint32_t* dst) {
  const char* base = static_cast<const char*>(src);
  constexpr int64_t elt = Widen ? 2 : 4;
  for (int g = 0; g < R; g += 16) {
    const int gr = static_cast<int>(imax(0, imin(16, rows - g)));
    const int lanes = static_cast<int>(imin(16, R - g));
    const __mmask16 sm = lanes >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << lanes) - 1);
    for (int64_t p0 = 0; p0 < words; p0 += 16) {
      const int nw = static_cast<int>(imin(16, words - p0));
      const __mmask16 km = nw >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nw) - 1);
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        const char* row = base + (g + i) * ld_bytes + p0 * elt;
        if (i >= gr)
          r[i] = _mm512_setzero_si512();
        else if constexpr (Widen)
          r[i] = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(km, row)), 16);
        else
          r[i] = _mm512_maskz_loadu_epi32(km, row);
      }
      transpose16(r);
      for (int w = 0; w < nw; ++w) _mm512_mask_storeu_epi32(dst + (p0 + w) * R + g, sm, r[w]);
    }
  }
}

}  // namespace

void pack_words_avx512(const void* src, int64_t ld_bytes, int rows, int64_t words, int R, uint32_t* dst) {
  pack_16x16<false>(src, ld_bytes, rows, words, R, dst);
}

// pack_widen_bf16: the fp32 panels of bf16 operands, where bf16 runs on this kernel (driver.cpp,
// cpu::bf16_on_fma).
KernelInfo kernel_f32_avx512() {
  return KernelInfo{.name = "f32_avx512_14x32",
                    .mr = kMR,
                    .nr = kNR,
                    .panel = Panel::f32,
                    .ukernel = &ukernel_dispatch,
                    .pack_a = &pack_dense,
                    .pack_b = &pack_dense,
                    .small_m = &small_m,
                    .small_m_jit = "f32_avx512",
                    .small_m_elem = Elem::f32,
                    .small_m_rows = kSmallMRows,
                    .pack_words = &pack_words_avx512,
                    .pack_widen_bf16 = &pack_16x16<true>};
}

}  // namespace ridge::gemm::detail
