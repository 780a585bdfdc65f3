// FP8 micro-kernel on AVX2 + FMA, 6x16 on fp32 panels (fp8 widened through the e4m3 table while
// packing, exact): each 128-wide K block summed in 12 registers, promoted with its two scales into
// an L1-resident tile (16 registers hold no second set), then the driver's Tile epilogue.
#include <immintrin.h>

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
                    .narrow_max_rows = 32};
}

}  // namespace ridge::gemm::detail
