// AVX-512 fp32 micro-kernel, 14x32: 28 zmm accumulators (14 rows x 2 vectors of 16 columns) hide
// the FMA latency (4 cycles x 2 pipes on Zen 5 needs >= 8 in flight); A is broadcast from the
// packed panel, B is two vector loads per k. Also the bf16 path on AVX-512 machines without
// AVX512_BF16 (the driver widens bf16 to fp32 while packing).
// GCC 12 reports its own intrinsics' undefined-value temporaries as (maybe-)uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <utility>

#include "gemm/internal.hpp"

namespace ridge::gemm::detail {
namespace {

constexpr int kMR = 14;
constexpr int kNR = 32;

inline __m256i f32_to_bf16_rne(__m512 v) {
  // Round to nearest even on the bits (matches ridge::to_bf16); NaN keeps its top bits, quieted.
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, x, _mm512_set1_epi32(0x00400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

inline __m512 load_row(const void* p, bool is_bf16, __mmask16 m) {
  if (is_bf16) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  return _mm512_maskz_loadu_ps(m, p);
}

inline void store_row(void* p, bool is_bf16, __mmask16 m, __m512 v) {
  if (is_bf16) _mm256_mask_storeu_epi16(p, m, f32_to_bf16_rne(v));
  else _mm512_mask_storeu_ps(p, m, v);
}

template <int M>
void ukernel(int64_t kc, const void* a_panel, const void* b_panel, int /*mr*/, int nr, const Tile& t) {
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
  const __mmask16 m0 = nr >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nr) - 1);
  const __mmask16 m1 = nr >= 32 ? __mmask16(0xFFFF) : nr > 16 ? __mmask16((1u << (nr - 16)) - 1) : __mmask16(0);
  const size_t es = t.dst_bf16 ? 2 : 4, ss = t.src_bf16 ? 2 : 4;
#pragma GCC unroll 14
  for (int i = 0; i < M; ++i) {
    char* d = static_cast<char*>(t.dst) + i * t.ldd * es;
    __m512 v0 = c0[i], v1 = c1[i];
    if (t.src) {
      const char* s = static_cast<const char*>(t.src) + i * t.lds * ss;
      v0 = _mm512_add_ps(v0, load_row(s, t.src_bf16, m0));
      v1 = _mm512_add_ps(v1, load_row(s + 16 * ss, t.src_bf16, m1));
    }
    store_row(d, t.dst_bf16, m0, v0);
    store_row(d + 16 * es, t.dst_bf16, m1, v1);
  }
}

template <int... Ms>
constexpr MicroKernel pick(int mr, std::integer_sequence<int, Ms...>) {
  MicroKernel k = nullptr;
  ((k = (mr == Ms + 1 ? &ukernel<Ms + 1> : k)), ...);
  return k;
}

void ukernel_dispatch(int64_t kc, const void* a, const void* b, int mr, int nr, const Tile& t) {
  pick(mr, std::make_integer_sequence<int, kMR>{})(kc, a, b, mr, nr, t);
}


// Decode shapes: 4 rows of A x 4 rows of B per block, 16 accumulators over k, lanes summed at the
// end. B rows are read once per 4 rows of A (A stays in L2: m <= 16).
void small_m(int64_t m, int64_t n0, int64_t n1, int64_t k, const void* a_, int64_t lda, const void* b_, int64_t ldb,
             const Tile& t) {
  const float* a = static_cast<const float*>(a_);
  const float* b = static_cast<const float*>(b_);
  for (int64_t j0 = n0; j0 < n1; j0 += 4) {
    const int nj = static_cast<int>(std::min<int64_t>(4, n1 - j0));
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
      const int mi = static_cast<int>(std::min<int64_t>(4, m - i0));
      __m512 acc[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_setzero_ps();
      const float* ar[4];
      const float* br[4];
      for (int i = 0; i < 4; ++i) ar[i] = a + (i0 + std::min(i, mi - 1)) * lda;
      for (int j = 0; j < 4; ++j) br[j] = b + (j0 + std::min(j, nj - 1)) * ldb;
      for (int64_t p = 0; p < k; p += 16) {
        const __mmask16 km = k - p >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (k - p)) - 1);
        __m512 bv[4];
        for (int j = 0; j < 4; ++j) bv[j] = _mm512_maskz_loadu_ps(km, br[j] + p);
        for (int i = 0; i < 4; ++i) {
          const __m512 av = _mm512_maskz_loadu_ps(km, ar[i] + p);
          for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
        }
      }
      float out[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) out[i][j] = _mm512_reduce_add_ps(acc[i][j]);
      store_tile_generic(&out[0][0], 4, mi, nj, tile_at(t, i0, j0));
    }
  }
}

#include "gemm/transpose_avx512.inc"

}  // namespace

void pack_words_avx512(const void* src, int64_t ld_bytes, int rows, int64_t words, int R, uint32_t* dst) {
  const char* base = static_cast<const char*>(src);
  for (int g = 0; g < R; g += 16) {
    const int gr = std::max(0, std::min(16, rows - g));
    const int lanes = std::min(16, R - g);
    const __mmask16 sm = lanes >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << lanes) - 1);
    for (int64_t p0 = 0; p0 < words; p0 += 16) {
      const int nw = static_cast<int>(std::min<int64_t>(16, words - p0));
      const __mmask16 km = nw >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nw) - 1);
      __m512i r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = i < gr ? _mm512_maskz_loadu_epi32(km, base + (g + i) * ld_bytes + p0 * 4) : _mm512_setzero_si512();
      transpose16(r);
      for (int w = 0; w < nw; ++w) _mm512_mask_storeu_epi32(dst + (p0 + w) * R + g, sm, r[w]);
    }
  }
}

KernelInfo kernel_avx512_f32() {
  return {"f32_avx512_14x32", kMR, kNR, Panel::f32, &ukernel_dispatch, &small_m, &pack_words_avx512};
}

}  // namespace ridge::gemm::detail
