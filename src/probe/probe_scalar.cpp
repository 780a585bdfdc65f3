// The fallback kernels for any x86-64 machine: plain C++ compiled for the baseline ISA (SSE2,
// no FMA). The compiler may pack the independent chains into SSE registers; that is the point:
// this measures what portable code gets here, and it is only used when no wider path exists.
#include <cstdint>

#include "probe/kernels.hpp"

namespace ridge::probe::detail {
namespace {

template <typename T, int N>
double chains(int64_t iters) {
  T acc[N];
  for (int i = 0; i < N; ++i) acc[i] = T(1) + T(0.01) * static_cast<T>(i);
  const T a = T(0.999999), b = T(1e-3);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 32
    for (int i = 0; i < N; ++i) acc[i] = acc[i] * a + b;
  }
  double s = 0;
  for (int i = 0; i < N; ++i) s += static_cast<double>(acc[i]);
  return s;
}

}  // namespace

double peak_fp32_scalar(int chains_n, int64_t iters) {
  switch (chains_n) {
    case 8: return chains<float, 8>(iters);
    case 12: return chains<float, 12>(iters);
    case 16: return chains<float, 16>(iters);
    default: return chains<float, 24>(iters);
  }
}

double peak_fp64_scalar(int chains_n, int64_t iters) {
  switch (chains_n) {
    case 8: return chains<double, 8>(iters);
    case 12: return chains<double, 12>(iters);
    case 16: return chains<double, 16>(iters);
    default: return chains<double, 24>(iters);
  }
}

double read_scalar(const void* p, size_t bytes, int64_t passes) {
  const auto* v = static_cast<const uint64_t*>(p);
  const size_t n = bytes / 8;
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (int64_t pass = 0; pass < passes; ++pass) {
    for (size_t i = 0; i + 4 <= n; i += 4) {
      a0 += v[i];
      a1 += v[i + 1];
      a2 += v[i + 2];
      a3 += v[i + 3];
    }
    __asm__ volatile("" ::: "memory");
  }
  return static_cast<double>(a0 + a1 + a2 + a3);
}

void update_scalar(void* p, size_t bytes, int64_t passes) {
  auto* v = static_cast<uint64_t*>(p);
  const size_t n = bytes / 8;
  for (int64_t pass = 0; pass < passes; ++pass) {
    for (size_t i = 0; i < n; ++i) v[i] += 1;
    __asm__ volatile("" ::: "memory");
  }
}

}  // namespace ridge::probe::detail
