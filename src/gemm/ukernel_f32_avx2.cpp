// AVX2+FMA fp32 micro-kernel, 6x16: 12 ymm accumulators + 2 B vectors + 1 broadcast fit the 16
// registers. Also the bf16 path on AVX2 machines (the driver widens bf16 to fp32 while packing;
// decode shapes widen in registers, small_m_avx2.inc).
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "ridge/core/cpu.hpp"

#include "gemm/kernel.hpp"

namespace ridge::gemm::detail {
namespace {

// The tile: kMR rows of A broadcast against kNV vectors of B, kMR x kNV accumulators. 4 x 24 (OpenBLAS's
// Haswell sgemm) is the same code with these two constants; against 6 x 16 it was within this VM's noise
// (docs/gemm.md, the AVX2 tier: 0.93-1.07x by shape), so 6 x 16 stays.
constexpr int kMR = 6;
constexpr int kNR = 16;
constexpr int kNV = kNR / 8;  // B vectors per k

template <int M>
void ukernel(int64_t kc, const void* a_panel, const void* b_panel, int mr, int nr, const Scales&,
             const Tile& t) {
  const float* a = static_cast<const float*>(a_panel);
  const float* b = static_cast<const float*>(b_panel);
  __m256 c[M][kNV];
#pragma GCC unroll 6
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 3
    for (int v = 0; v < kNV; ++v) c[i][v] = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    __m256 bv[kNV];
#pragma GCC unroll 3
    for (int v = 0; v < kNV; ++v) bv[v] = _mm256_load_ps(b + 8 * v);
#pragma GCC unroll 6
    for (int i = 0; i < M; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
#pragma GCC unroll 3
      for (int v = 0; v < kNV; ++v) c[i][v] = _mm256_fmadd_ps(ai, bv[v], c[i][v]);
    }
    a += kMR;
    b += kNR;
  }
  if (nr == kNR && !t.src_bf16 && !t.dst_bf16) {
#pragma GCC unroll 6
    for (int i = 0; i < M; ++i) {
      float* d = static_cast<float*>(t.dst) + i * t.ldd;
      const float* s = t.src ? static_cast<const float*>(t.src) + i * t.lds : nullptr;
#pragma GCC unroll 3
      for (int v = 0; v < kNV; ++v)
        _mm256_storeu_ps(d + 8 * v, s ? _mm256_add_ps(c[i][v], _mm256_loadu_ps(s + 8 * v)) : c[i][v]);
    }
    return;
  }
  alignas(32) float acc[kMR][kNR];
#pragma GCC unroll 6
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 3
    for (int v = 0; v < kNV; ++v) _mm256_store_ps(acc[i] + 8 * v, c[i][v]);
  store_tile_generic(&acc[0][0], kNR, mr, nr, t);
}

#include "gemm/ukernel_rows.inc"

#include "simd/scalar.inc"
#include "gemm/small_m_avx2.inc"

// Whether the one-row-at-a-time kernel serves m rows of A of k elements (B's element b_bytes wide; A
// read as fp32): the rule of epilogue_avx512.inc's rows_in_address_order.
bool rows_in_address_order_avx2(int64_t m, int64_t k, int64_t b_bytes) {
  return m <= 4 && k * b_bytes <= 4096 && m * k * 4 <= cpu::cache_sizes().l1d / 2;
}

void small_m_f32(const SmallM& s, int64_t n0, int64_t n1, const Tile& t) {
  small_m_avx2<BF32, float>(s, n0, n1, t, rows_in_address_order_avx2(s.m, s.k, sizeof(float)));
}
void small_m_bf16(const SmallM& s, int64_t n0, int64_t n1, const Tile& t) {
  small_m_avx2<BBf16, uint16_t>(s, n0, n1, t, rows_in_address_order_avx2(s.m, s.k, sizeof(uint16_t)));
}

#include "gemm/transpose_avx2.inc"

// Rows of 32-bit words (Widen: of bf16, each widened to the fp32 whose high half it is) into panels of R
// rows, [word][R], 8 rows by 8 words at a time through transpose8; rows past `rows` are zero. Without it
// the AVX2 path packed with the plain loops, one element at a time, and the packing of A and B set the
// pace of the m = 64..128 shapes (docs/gemm.md, AVX2).
template <bool Widen>
void pack_8x8(const void* src, int64_t ld_bytes, int rows, int64_t words, int R, uint32_t* dst) {
  const auto load = [](const char* row, int nw) {
    if constexpr (Widen) {
      const auto widen = [](__m128i h) {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
      };
      if (nw == 8) return widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)));
      alignas(16) uint16_t tmp[8] = {};
      std::memcpy(tmp, row, static_cast<size_t>(nw) * 2);
      return widen(_mm_load_si128(reinterpret_cast<const __m128i*>(tmp)));
    } else {
      return nw == 8 ? _mm256_loadu_ps(reinterpret_cast<const float*>(row))
                     : _mm256_maskload_ps(reinterpret_cast<const float*>(row), lanes_mask(nw));
    }
  };
  pack_rows8<Widen ? 2 : 4>(src, ld_bytes, rows, words, R, reinterpret_cast<float*>(dst), load);
}

}  // namespace

KernelInfo kernel_f32_avx2() {
  return KernelInfo{.name = "f32_avx2_6x16",
                    .mr = kMR,
                    .nr = kNR,
                    .panel = Panel::f32,
                    .ukernel = &ukernel_dispatch,
                    .pack_a = &pack_dense,
                    .pack_b = &pack_dense,
                    .small_m = &small_m_f32,
                    .small_m_jit = "f32_avx2",
                    .small_m_elem = Elem::f32,
                    .narrow_a_in_l2 = true,
                    .pack_words = &pack_8x8<false>,
                    .pack_widen_bf16 = &pack_8x8<true>};
}

// The same kernel for bf16 inputs (packing widens them), with the bf16 decode path.
KernelInfo kernel_bf16_avx2() {
  KernelInfo k = kernel_f32_avx2();
  k.small_m = &small_m_bf16;
  k.small_m_jit = "bf16_avx2";
  k.small_m_elem = Elem::bf16;
  return k;
}

}  // namespace ridge::gemm::detail
