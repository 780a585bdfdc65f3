// Peak-FLOP and bandwidth kernels for AVX2+FMA (ymm), the path for x86-64 machines without
// AVX-512. Two 256-bit FMA pipes with latency 4-5 need 8-10 chains; 8..24 are tried.
#include <immintrin.h>

#include "probe/kernels.hpp"

namespace ridge::probe::detail {
namespace {

template <int N>
double fp32_chains(int64_t iters) {
  __m256 acc[N];
  for (int i = 0; i < N; ++i) acc[i] = _mm256_set1_ps(1.0f + 0.01f * static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-3f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 32
    for (int i = 0; i < N; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < N; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  double r = 0;
  for (float f : out) r += f;
  return r;
}

template <int N>
double fp64_chains(int64_t iters) {
  __m256d acc[N];
  for (int i = 0; i < N; ++i) acc[i] = _mm256_set1_pd(1.0 + 0.01 * i);
  const __m256d a = _mm256_set1_pd(0.999999), b = _mm256_set1_pd(1e-3);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 32
    for (int i = 0; i < N; ++i) acc[i] = _mm256_fmadd_pd(acc[i], a, b);
  }
  __m256d s = acc[0];
  for (int i = 1; i < N; ++i) s = _mm256_add_pd(s, acc[i]);
  alignas(32) double out[4];
  _mm256_store_pd(out, s);
  return out[0] + out[1] + out[2] + out[3];
}

}  // namespace

double peak_fp32_avx2(int chains, int64_t iters) {
  switch (chains) {
    case 8: return fp32_chains<8>(iters);
    case 12: return fp32_chains<12>(iters);
    default: return fp32_chains<14>(iters);  // 16 ymm registers: 14 chains + 2 constants
  }
}

double peak_fp64_avx2(int chains, int64_t iters) {
  switch (chains) {
    case 8: return fp64_chains<8>(iters);
    case 12: return fp64_chains<12>(iters);
    default: return fp64_chains<14>(iters);
  }
}

double read_avx2(const void* p, size_t bytes, int64_t passes) {
  const auto* v = static_cast<const __m256i*>(p);
  const size_t n = bytes / 32;
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (int64_t pass = 0; pass < passes; ++pass) {
    for (size_t i = 0; i + 8 <= n; i += 8) {
      a0 = _mm256_add_epi64(a0, _mm256_load_si256(v + i));
      a1 = _mm256_add_epi64(a1, _mm256_load_si256(v + i + 1));
      a2 = _mm256_add_epi64(a2, _mm256_load_si256(v + i + 2));
      a3 = _mm256_add_epi64(a3, _mm256_load_si256(v + i + 3));
      a4 = _mm256_add_epi64(a4, _mm256_load_si256(v + i + 4));
      a5 = _mm256_add_epi64(a5, _mm256_load_si256(v + i + 5));
      a6 = _mm256_add_epi64(a6, _mm256_load_si256(v + i + 6));
      a7 = _mm256_add_epi64(a7, _mm256_load_si256(v + i + 7));
    }
    __asm__ volatile("" ::: "memory");
  }
  a0 = _mm256_add_epi64(_mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)),
                        _mm256_add_epi64(_mm256_add_epi64(a4, a5), _mm256_add_epi64(a6, a7)));
  alignas(32) long long out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), a0);
  // The lanes wrapped modulo 2^64 (vpaddq); sum the same way, since signed overflow is undefined.
  unsigned long long s = 0;
  for (long long x : out) s += static_cast<unsigned long long>(x);
  return static_cast<double>(static_cast<long long>(s));
}

void update_avx2(void* p, size_t bytes, int64_t passes) {
  auto* v = static_cast<__m256i*>(p);
  const size_t n = bytes / 32;
  const __m256i one = _mm256_set1_epi64x(1);
  for (int64_t pass = 0; pass < passes; ++pass) {
    for (size_t i = 0; i + 4 <= n; i += 4) {
      const __m256i x0 = _mm256_load_si256(v + i), x1 = _mm256_load_si256(v + i + 1);
      const __m256i x2 = _mm256_load_si256(v + i + 2), x3 = _mm256_load_si256(v + i + 3);
      _mm256_store_si256(v + i, _mm256_add_epi64(x0, one));
      _mm256_store_si256(v + i + 1, _mm256_add_epi64(x1, one));
      _mm256_store_si256(v + i + 2, _mm256_add_epi64(x2, one));
      _mm256_store_si256(v + i + 3, _mm256_add_epi64(x3, one));
    }
    __asm__ volatile("" ::: "memory");
  }
}

}  // namespace ridge::probe::detail
