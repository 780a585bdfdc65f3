// Peak bf16 dot-product rate with AVX512_BF16: vdpbf16ps multiplies 32 bf16 pairs and adds them
// pairwise into 16 fp32 lanes, 64 FLOP per instruction. Its latency is longer than an FMA's on
// some cores (6 on Zen 4), which is why up to 24 chains are tried.
#include <immintrin.h>

#include <cstring>

#include "probe/kernels.hpp"

namespace ridge::probe::detail {
namespace {

// Horizontal sums through memory: GCC 12's _mm512_reduce_* helpers trip -Wuninitialized.
double hsum(__m512 v) {
  alignas(64) float o[16];
  _mm512_store_ps(o, v);
  double s = 0;
  for (float f : o) s += f;
  return s;
}

template <int N>
double bf16_chains(int64_t iters) {
  __m512 acc[N];
  for (int i = 0; i < N; ++i) acc[i] = _mm512_set1_ps(1.0f + 0.01f * static_cast<float>(i));
  // 2^-4 in bf16 (0x3D80): each instruction adds 2 * 2^-8 per lane, exactly, so a test can check
  // the sum, and even 10^10 iterations stay far from overflow.
  const __m512i bits = _mm512_set1_epi16(0x3D80);
  __m512bh x, y;
  std::memcpy(&x, &bits, sizeof x);
  std::memcpy(&y, &bits, sizeof y);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 32
    for (int i = 0; i < N; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  }
  __m512 s = acc[0];
  for (int i = 1; i < N; ++i) s = _mm512_add_ps(s, acc[i]);
  return hsum(s);
}

}  // namespace

double peak_bf16_avx512bf16(int chains, int64_t iters) {
  switch (chains) {
    case 8: return bf16_chains<8>(iters);
    case 12: return bf16_chains<12>(iters);
    case 16: return bf16_chains<16>(iters);
    default: return bf16_chains<24>(iters);
  }
}

}  // namespace ridge::probe::detail
