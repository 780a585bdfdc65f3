// FP8 GEMM on AVX2 + FMA: fp8 widened to fp32 while packing (table lookup, exact), then
// a 6x16 fp32 FMA micro-kernel with the two-level (per 128-wide K block) scaling: 12 partial-sum registers, the scaled totals in the L1-resident accumulator block.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "gemm/fp8_internal.hpp"
#include "ridge/core/cpu.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/core/threads.hpp"

namespace ridge::gemm::fp8 {
namespace {

using Problem = ::ridge::gemm::fp8::Problem;

template <int MR>
void ukernel_t(int64_t kc, const float* a, int64_t lda, const float* b, const float* sa, int64_t ldsa, const float* sb,
               float* c, int64_t ldc) {
  for (int64_t kb = 0, k0 = 0; k0 < kc; ++kb, k0 += 128) {
    const int64_t k1 = k0 + 128 < kc ? k0 + 128 : kc;
    __m256 s[MR][2];
    for (int i = 0; i < MR; ++i) s[i][0] = s[i][1] = _mm256_setzero_ps();
    for (int64_t kk = k0; kk < k1; ++kk) {
      const __m256 b0 = _mm256_loadu_ps(b + kk * 16);
      const __m256 b1 = _mm256_loadu_ps(b + kk * 16 + 8);
      for (int i = 0; i < MR; ++i) {
        const __m256 av = _mm256_broadcast_ss(a + i * lda + kk);
        s[i][0] = _mm256_fmadd_ps(av, b0, s[i][0]);
        s[i][1] = _mm256_fmadd_ps(av, b1, s[i][1]);
      }
    }
    const float sbk = sb[kb];
    for (int i = 0; i < MR; ++i) {
      const __m256 sc = _mm256_set1_ps(sa[i * ldsa + kb] * sbk);
      float* row = c + i * ldc;
      _mm256_storeu_ps(row, _mm256_fmadd_ps(s[i][0], sc, _mm256_loadu_ps(row)));
      _mm256_storeu_ps(row + 8, _mm256_fmadd_ps(s[i][1], sc, _mm256_loadu_ps(row + 8)));
    }
  }
}

#include "gemm/fp8_lut_pack.inc"

struct Kern : LutPack<16> {
  using Elem = float;
  static constexpr int MR = 6, NR = 16;
  static constexpr int64_t kPad = 8;

  static void ukernel(int mr, int64_t kc, const float* a, int64_t lda, const float* b, const float* sa, int64_t ldsa,
                      const float* sb, float* c, int64_t ldc) {
    switch (mr) {
      case 6: return ukernel_t<6>(kc, a, lda, b, sa, ldsa, sb, c, ldc);
      case 5: return ukernel_t<5>(kc, a, lda, b, sa, ldsa, sb, c, ldc);
      case 4: return ukernel_t<4>(kc, a, lda, b, sa, ldsa, sb, c, ldc);
      case 3: return ukernel_t<3>(kc, a, lda, b, sa, ldsa, sb, c, ldc);
      case 2: return ukernel_t<2>(kc, a, lda, b, sa, ldsa, sb, c, ldc);
      default: return ukernel_t<1>(kc, a, lda, b, sa, ldsa, sb, c, ldc);
    }
  }
};

#include "gemm/fp8_driver.hpp"

}  // namespace

void run_avx2(const Problem& p) { run_panel<Kern>(p); }

}  // namespace ridge::gemm::fp8
