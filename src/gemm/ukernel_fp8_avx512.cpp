// FP8 GEMM on AVX-512 without BF16: fp8 widened to fp32 while packing (table lookup, exact), then
// a 6x32 fp32 FMA micro-kernel with the two-level (per 128-wide K block) scaling in registers.
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

// GCC 12's AVX-512 intrinsics initialise their "undefined" operand from itself, which -O3 reports
// as maybe-uninitialized, and at -O2 (the ASan build) as uninitialized (known false positives).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ridge::gemm::fp8 {
namespace {

using Problem = ::ridge::gemm::fp8::Problem;

template <int MR>
void ukernel_t(int64_t kc, const float* a, int64_t lda, const float* b, const float* sa, int64_t ldsa, const float* sb,
               float* c, int64_t ldc) {
  __m512 f[MR][2];
  for (int i = 0; i < MR; ++i) f[i][0] = f[i][1] = _mm512_setzero_ps();
  for (int64_t kb = 0, k0 = 0; k0 < kc; ++kb, k0 += 128) {
    const int64_t k1 = k0 + 128 < kc ? k0 + 128 : kc;
    __m512 s[MR][2];
    for (int i = 0; i < MR; ++i) s[i][0] = s[i][1] = _mm512_setzero_ps();
    for (int64_t kk = k0; kk < k1; ++kk) {
      const __m512 b0 = _mm512_loadu_ps(b + kk * 32);
      const __m512 b1 = _mm512_loadu_ps(b + kk * 32 + 16);
      for (int i = 0; i < MR; ++i) {
        const __m512 av = _mm512_set1_ps(a[i * lda + kk]);
        s[i][0] = _mm512_fmadd_ps(av, b0, s[i][0]);
        s[i][1] = _mm512_fmadd_ps(av, b1, s[i][1]);
      }
    }
    const float sbk = sb[kb];
    for (int i = 0; i < MR; ++i) {
      const __m512 sc = _mm512_set1_ps(sa[i * ldsa + kb] * sbk);
      f[i][0] = _mm512_fmadd_ps(s[i][0], sc, f[i][0]);
      f[i][1] = _mm512_fmadd_ps(s[i][1], sc, f[i][1]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    float* row = c + i * ldc;
    _mm512_storeu_ps(row, _mm512_add_ps(_mm512_loadu_ps(row), f[i][0]));
    _mm512_storeu_ps(row + 16, _mm512_add_ps(_mm512_loadu_ps(row + 16), f[i][1]));
  }
}

#include "gemm/fp8_lut_pack.inc"

struct Kern : LutPack<32> {
  using Elem = float;
  static constexpr int MR = 6, NR = 32;
  static constexpr int64_t kPad = 16;

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

void run_avx512(const Problem& p) { run_panel<Kern>(p); }

}  // namespace ridge::gemm::fp8
