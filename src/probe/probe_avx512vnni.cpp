// Peak int8 rate with AVX512_VNNI: vpdpbusd multiplies 64 u8 x s8 pairs and adds groups of four
// into 16 int32 lanes, 64 multiply-adds = 128 OP per instruction (OP counted like FLOP: 2 per MAC).
#include <immintrin.h>

#include <cstdint>

#include "probe/kernels.hpp"

namespace ridge::probe::detail {
namespace {

// Horizontal sum through memory: GCC 12's _mm512_reduce_* helpers trip -Wuninitialized.
double hsum_epi32(__m512i v) {
  alignas(64) int32_t o[16];
  _mm512_store_si512(o, v);
  int64_t s = 0;
  for (int32_t x : o) s += x;
  return static_cast<double>(s);
}

template <int N>
double int8_chains(int64_t iters) {
  __m512i acc[N];
  for (int i = 0; i < N; ++i) acc[i] = _mm512_set1_epi32(i);
  // Integer sums wrap harmlessly; the values only keep the work alive.
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 32
    for (int i = 0; i < N; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], u, s);
  }
  __m512i t = acc[0];
  for (int i = 1; i < N; ++i) t = _mm512_add_epi32(t, acc[i]);
  return hsum_epi32(t);
}

}  // namespace

double peak_int8_avx512vnni(int chains, int64_t iters) {
  switch (chains) {
    case 8: return int8_chains<8>(iters);
    case 12: return int8_chains<12>(iters);
    case 16: return int8_chains<16>(iters);
    default: return int8_chains<24>(iters);
  }
}

}  // namespace ridge::probe::detail
