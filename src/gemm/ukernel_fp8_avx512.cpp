// FP8 micro-kernel on AVX-512 without BF16, 6x32 on fp32 panels (fp8 widened through the e4m3 table
// while packing, exact): each 128-wide K block summed in 12 registers and promoted with its two
// scales into 12 more, then the driver's Tile epilogue.
// GCC 12's AVX-512 intrinsics initialise their "undefined" operand from itself, which -O3 reports
// as maybe-uninitialized, and at -O2 (the ASan build) as uninitialized (known false positives).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>

#include <cstdint>
#include <utility>

#include "gemm/kernel.hpp"

namespace ridge::gemm::detail {
namespace {

constexpr int kMR = 6;
constexpr int kNR = 32;

#include "simd/scalar.inc"
#include "simd/avx512.inc"
#include "gemm/epilogue_avx512.inc"

template <int M>
void ukernel(int64_t kc, const void* a_panel, const void* b_panel, int /*mr*/, int nr, const Scales& s,
             const Tile& t) {
  const float* a = static_cast<const float*>(a_panel);
  const float* b = static_cast<const float*>(b_panel);
  __m512 f0[M], f1[M];
  for (int i = 0; i < M; ++i) f0[i] = f1[i] = _mm512_setzero_ps();
  for (int64_t kb = 0, k0 = 0; k0 < kc; ++kb, k0 += 128) {
    const int64_t k1 = k0 + 128 < kc ? k0 + 128 : kc;
    __m512 s0[M], s1[M];
    for (int i = 0; i < M; ++i) s0[i] = s1[i] = _mm512_setzero_ps();
    for (int64_t kk = k0; kk < k1; ++kk) {
      const __m512 b0 = _mm512_loadu_ps(b + kk * kNR);
      const __m512 b1 = _mm512_loadu_ps(b + kk * kNR + 16);
      for (int i = 0; i < M; ++i) {
        const __m512 av = _mm512_set1_ps(a[kk * kMR + i]);
        s0[i] = _mm512_fmadd_ps(av, b0, s0[i]);
        s1[i] = _mm512_fmadd_ps(av, b1, s1[i]);
      }
    }
    const float sbk = s.b[kb];
    for (int i = 0; i < M; ++i) {
      const __m512 sc = _mm512_set1_ps(s.a[i * s.lda + kb] * sbk);
      f0[i] = _mm512_fmadd_ps(s0[i], sc, f0[i]);
      f1[i] = _mm512_fmadd_ps(s1[i], sc, f1[i]);
    }
  }
  store_tile_x32<M>(f0, f1, nr, t);
}

#include "gemm/ukernel_rows.inc"

}  // namespace

KernelInfo kernel_fp8_avx512() {
  return KernelInfo{.name = "fp8_avx512_6x32",
                    .mr = kMR,
                    .nr = kNR,
                    .panel = Panel::f32,
                    .k_granule = 128,
                    .ukernel = &ukernel_dispatch,
                    .pack_a = &pack_fp8_lut,
                    .pack_b = &pack_fp8_lut,
                    .narrow_max_rows = 32};
}

}  // namespace ridge::gemm::detail
