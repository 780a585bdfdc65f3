// Peak-FLOP and bandwidth kernels for AVX-512 (fp32, fp64 FMA on zmm; 512-bit loads and stores).
// Why many chains: Zen 4/5 and Intel server cores issue two 512-bit FMAs per cycle with a latency
// of 4 cycles, so at least 8 independent accumulators are needed to keep both pipes busy; the
// probe tries 8..24 and keeps the best, so a core with a longer latency is not under-reported.
#include <immintrin.h>

#include <cstring>

#include "probe/kernels.hpp"

namespace ridge::probe::detail {
namespace {

#include "probe/kernels_body.inc"

// acc -> acc * a + b converges to b / (1 - a) = 1000, far from overflow and from denormals.
struct Fp32 {
  using R = __m512;
  struct Const {
    R a, b;
  };
  static Const constants() { return {_mm512_set1_ps(0.999999f), _mm512_set1_ps(1e-3f)}; }
  static R init(int i) { return _mm512_set1_ps(1.0f + 0.01f * static_cast<float>(i)); }
  static R step(R acc, const Const& c) { return _mm512_fmadd_ps(acc, c.a, c.b); }
  static R add(R x, R y) { return _mm512_add_ps(x, y); }
  static double sum(R r) { return lane_sum<float>(r); }
};

struct Fp64 {
  using R = __m512d;
  struct Const {
    R a, b;
  };
  static Const constants() { return {_mm512_set1_pd(0.999999), _mm512_set1_pd(1e-3)}; }
  static R init(int i) { return _mm512_set1_pd(1.0 + 0.01 * i); }
  static R step(R acc, const Const& c) { return _mm512_fmadd_pd(acc, c.a, c.b); }
  static R add(R x, R y) { return _mm512_add_pd(x, y); }
  static double sum(R r) { return lane_sum<double>(r); }
};

struct Bw {
  using R = __m512i;
  static constexpr size_t kBytes = 64;
  static R zero() { return _mm512_setzero_si512(); }
  static R one() { return _mm512_set1_epi64(1); }
  static R load(const void* p) { return _mm512_load_si512(p); }
  static void store(void* p, R r) { _mm512_store_si512(p, r); }
  static R add(R x, R y) { return _mm512_add_epi64(x, y); }
  static double sum(R r) { return wrapped_sum64(r); }
};

}  // namespace

double peak_fp32_avx512(int chains, int64_t iters) {
  return peak<Fp32>(chains, iters);
}
double peak_fp64_avx512(int chains, int64_t iters) {
  return peak<Fp64>(chains, iters);
}
double read_avx512(const void* p, size_t bytes, int64_t passes) {
  return read<Bw>(p, bytes, passes);
}
void update_avx512(void* p, size_t bytes, int64_t passes) {
  update<Bw>(p, bytes, passes);
}

}  // namespace ridge::probe::detail
