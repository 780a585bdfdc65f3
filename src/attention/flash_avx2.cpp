// FlashAttention-2 with AVX2 + FMA: 8 floats per register, 6 x 2 register micro-tiles
// (12 accumulators of the 16 ymm registers), polynomial exp2.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "attention/internal.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/memory.hpp"

namespace ridge::attention::detail {
namespace {

struct V {
  using R = __m256;
  static constexpr int W = 8;
  static constexpr int RMAX = 6, CVMAX = 2;
  static R zero() { return _mm256_setzero_ps(); }
  static R load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, R x) { _mm256_storeu_ps(p, x); }
  static R set1(float x) { return _mm256_set1_ps(x); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static R add(R a, R b) { return _mm256_add_ps(a, b); }
  static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R max(R a, R b) { return _mm256_max_ps(a, b); }
  // 2^x = 2^n * 2^f with n = round(x), |f| <= 1/2, 2^f by its degree-6 Taylor polynomial
  // (relative error < 2e-7). Inputs below -126 (including -inf) give exactly 0.
  static R exp2(R x) {
    const R under = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-126.0f)), _mm256_set1_ps(127.0f));
    const R n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const R f = _mm256_sub_ps(x, n);
    R p = _mm256_set1_ps(1.5403530393381606e-4f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618129107628477e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550410866482158e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.2402265069591007f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.6931471805599453f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
  }
};

#include "attention/flash_impl.inc"

}  // namespace

void forward_avx2(const Problem& p) { forward(p); }
void backward_avx2(const Problem& p) { backward(p); }

}  // namespace ridge::attention::detail
