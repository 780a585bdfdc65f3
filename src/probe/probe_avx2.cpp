// Peak-FLOP and bandwidth kernels for AVX2+FMA (ymm), the path for x86-64 machines without
// AVX-512. Two 256-bit FMA pipes with latency 4-5 need 8-10 chains; 8, 12, 16 and 24 are tried (16 ymm
// registers hold 14 chains and the two constants: 16 and 24 spill and run slower).
#include <immintrin.h>

#include <cstring>

#include "probe/kernels.hpp"

namespace ridge::probe::detail {
namespace {

#include "probe/kernels_body.inc"

struct Fp32 {
  using R = __m256;
  struct Const {
    R a, b;
  };
  static Const constants() { return {_mm256_set1_ps(0.999999f), _mm256_set1_ps(1e-3f)}; }
  static R init(int i) { return _mm256_set1_ps(1.0f + 0.01f * static_cast<float>(i)); }
  static R step(R acc, const Const& c) { return _mm256_fmadd_ps(acc, c.a, c.b); }
  static R add(R x, R y) { return _mm256_add_ps(x, y); }
  static double sum(R r) { return lane_sum<float>(r); }
};

struct Fp64 {
  using R = __m256d;
  struct Const {
    R a, b;
  };
  static Const constants() { return {_mm256_set1_pd(0.999999), _mm256_set1_pd(1e-3)}; }
  static R init(int i) { return _mm256_set1_pd(1.0 + 0.01 * i); }
  static R step(R acc, const Const& c) { return _mm256_fmadd_pd(acc, c.a, c.b); }
  static R add(R x, R y) { return _mm256_add_pd(x, y); }
  static double sum(R r) { return lane_sum<double>(r); }
};

struct Bw {
  using R = __m256i;
  static constexpr size_t kBytes = 32;
  static R zero() { return _mm256_setzero_si256(); }
  static R one() { return _mm256_set1_epi64x(1); }
  static R load(const void* p) { return _mm256_load_si256(static_cast<const R*>(p)); }
  static void store(void* p, R r) { _mm256_store_si256(static_cast<R*>(p), r); }
  static R add(R x, R y) { return _mm256_add_epi64(x, y); }
  static double sum(R r) { return wrapped_sum64(r); }
};

}  // namespace

double peak_fp32_avx2(int chains, int64_t iters) {
  return peak<Fp32>(chains, iters);
}
double peak_fp64_avx2(int chains, int64_t iters) {
  return peak<Fp64>(chains, iters);
}
double read_avx2(const void* p, size_t bytes, int64_t passes) {
  return read<Bw>(p, bytes, passes);
}
void update_avx2(void* p, size_t bytes, int64_t passes) {
  update<Bw>(p, bytes, passes);
}

}  // namespace ridge::probe::detail
