// FlashAttention-2 with AVX2 + FMA: 8 floats per register, 6 x 2 register micro-tiles
// (12 accumulators of the 16 ymm registers), polynomial exp2 (simd/avx2.inc), fp32 block products.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "attention/internal.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/memory.hpp"

namespace ridge::attention::detail {
namespace {

#include "simd/scalar.inc"
#include "simd/avx2.inc"

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
  static R min(R a, R b) { return _mm256_min_ps(a, b); }
  static R exp2(R x) { return exp2_ps(x); }
  static bool any_huge(R x) {
    const R a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    const R big =
        _mm256_and_ps(_mm256_cmp_ps(a, _mm256_set1_ps(0x1p20f), _CMP_GE_OQ),
                      _mm256_cmp_ps(a, _mm256_set1_ps(std::numeric_limits<float>::infinity()), _CMP_LT_OQ));
    return _mm256_movemask_ps(big) != 0;
  }
};

#include "attention/flash_body.inc"
#include "attention/blocks_fp32.inc"

}  // namespace

void forward_avx2(const Problem& p) {
  forward<BlocksFp32>(p);
}
void backward_avx2(const Problem& p) {
  backward<BlocksFp32>(p);
}

Kernels kernels_avx2() {
  return {forward_avx2, backward_avx2};
}

}  // namespace ridge::attention::detail
