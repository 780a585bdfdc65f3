// Peak-FLOP and bandwidth kernels for AVX-512 (fp32, fp64 FMA on zmm; 512-bit loads and stores).
// Why many chains: Zen 4/5 and Intel server cores issue two 512-bit FMAs per cycle with a latency
// of 4 cycles, so at least 8 independent accumulators are needed to keep both pipes busy; the
// probe tries 8..24 and keeps the best, so a core with a longer latency is not under-reported.
#include <immintrin.h>

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

double hsum(__m512d v) {
  alignas(64) double o[8];
  _mm512_store_pd(o, v);
  double s = 0;
  for (double f : o) s += f;
  return s;
}

double hsum_epi64(__m512i v) {
  alignas(64) long long o[8];
  _mm512_store_si512(o, v);
  // The lanes wrapped modulo 2^64 (vpaddq); sum the same way, since signed overflow is undefined.
  unsigned long long s = 0;
  for (long long x : o) s += static_cast<unsigned long long>(x);
  return static_cast<double>(static_cast<long long>(s));
}

template <int N>
double fp32_chains(int64_t iters) {
  __m512 acc[N];
  for (int i = 0; i < N; ++i) acc[i] = _mm512_set1_ps(1.0f + 0.01f * static_cast<float>(i));
  // acc -> acc * a + b converges to b / (1 - a) = 1000, far from overflow and from denormals.
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-3f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 32
    for (int i = 0; i < N; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < N; ++i) s = _mm512_add_ps(s, acc[i]);
  return hsum(s);
}

template <int N>
double fp64_chains(int64_t iters) {
  __m512d acc[N];
  for (int i = 0; i < N; ++i) acc[i] = _mm512_set1_pd(1.0 + 0.01 * i);
  const __m512d a = _mm512_set1_pd(0.999999), b = _mm512_set1_pd(1e-3);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 32
    for (int i = 0; i < N; ++i) acc[i] = _mm512_fmadd_pd(acc[i], a, b);
  }
  __m512d s = acc[0];
  for (int i = 1; i < N; ++i) s = _mm512_add_pd(s, acc[i]);
  return hsum(s);
}

}  // namespace

double peak_fp32_avx512(int chains, int64_t iters) {
  switch (chains) {
    case 8: return fp32_chains<8>(iters);
    case 12: return fp32_chains<12>(iters);
    case 16: return fp32_chains<16>(iters);
    default: return fp32_chains<24>(iters);
  }
}

double peak_fp64_avx512(int chains, int64_t iters) {
  switch (chains) {
    case 8: return fp64_chains<8>(iters);
    case 12: return fp64_chains<12>(iters);
    case 16: return fp64_chains<16>(iters);
    default: return fp64_chains<24>(iters);
  }
}

// Eight independent accumulators: two load ports at one cycle each need only a few, but integer
// adds then never sit on the critical path even at the L1's 2 loads/cycle.
double read_avx512(const void* p, size_t bytes, int64_t passes) {
  const auto* v = static_cast<const __m512i*>(p);
  const size_t n = bytes / 64;
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (int64_t pass = 0; pass < passes; ++pass) {
    for (size_t i = 0; i + 8 <= n; i += 8) {
      a0 = _mm512_add_epi64(a0, _mm512_load_si512(v + i));
      a1 = _mm512_add_epi64(a1, _mm512_load_si512(v + i + 1));
      a2 = _mm512_add_epi64(a2, _mm512_load_si512(v + i + 2));
      a3 = _mm512_add_epi64(a3, _mm512_load_si512(v + i + 3));
      a4 = _mm512_add_epi64(a4, _mm512_load_si512(v + i + 4));
      a5 = _mm512_add_epi64(a5, _mm512_load_si512(v + i + 5));
      a6 = _mm512_add_epi64(a6, _mm512_load_si512(v + i + 6));
      a7 = _mm512_add_epi64(a7, _mm512_load_si512(v + i + 7));
    }
    __asm__ volatile("" ::: "memory");  // each pass must really reload the buffer
  }
  a0 = _mm512_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)),
                        _mm512_add_epi64(_mm512_add_epi64(a4, a5), _mm512_add_epi64(a6, a7)));
  return hsum_epi64(a0);
}

// Regular (write-allocating) stores, in place: every line is read once and written back once,
// the traffic of an in-place elementwise op. Non-temporal stores would skip the caches and so
// could not measure the L1..L3 plateaus; docs/probe.md explains the choice.
void update_avx512(void* p, size_t bytes, int64_t passes) {
  auto* v = static_cast<__m512i*>(p);
  const size_t n = bytes / 64;
  const __m512i one = _mm512_set1_epi64(1);
  for (int64_t pass = 0; pass < passes; ++pass) {
    for (size_t i = 0; i + 4 <= n; i += 4) {
      const __m512i x0 = _mm512_load_si512(v + i), x1 = _mm512_load_si512(v + i + 1);
      const __m512i x2 = _mm512_load_si512(v + i + 2), x3 = _mm512_load_si512(v + i + 3);
      _mm512_store_si512(v + i, _mm512_add_epi64(x0, one));
      _mm512_store_si512(v + i + 1, _mm512_add_epi64(x1, one));
      _mm512_store_si512(v + i + 2, _mm512_add_epi64(x2, one));
      _mm512_store_si512(v + i + 3, _mm512_add_epi64(x3, one));
    }
    __asm__ volatile("" ::: "memory");
  }
}

}  // namespace ridge::probe::detail
