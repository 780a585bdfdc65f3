// The fallback kernels for any x86-64 machine: plain C++ compiled for the baseline ISA (SSE2,
// no FMA). The compiler may pack the independent chains into SSE registers; that is the point:
// this measures what portable code gets here, and it is only used when no wider path exists.
#include <cstdint>
#include <cstring>

#include "probe/kernels.hpp"

namespace ridge::probe::detail {
namespace {

#include "probe/kernels_body.inc"

// Separate multiply and add (the baseline has no FMA).
template <typename T>
struct Mad {
  using R = T;
  struct Const {
    T a, b;
  };
  static Const constants() { return {T(0.999999), T(1e-3)}; }
  static R init(int i) { return T(1) + T(0.01) * static_cast<T>(i); }
  static R step(R acc, const Const& c) { return acc * c.a + c.b; }
  static R add(R x, R y) { return x + y; }
  static double sum(R r) { return static_cast<double>(r); }
};

struct Bw {
  using R = uint64_t;
  static constexpr size_t kBytes = 8;
  static R zero() { return 0; }
  static R one() { return 1; }
  static R load(const void* p) {
    R r;
    std::memcpy(&r, p, sizeof r);
    return r;
  }
  static void store(void* p, R r) { std::memcpy(p, &r, sizeof r); }
  static R add(R x, R y) { return x + y; }
  static double sum(R r) { return static_cast<double>(r); }
};

}  // namespace

double peak_fp32_scalar(int chains, int64_t iters) {
  return peak<Mad<float>>(chains, iters);
}
double peak_fp64_scalar(int chains, int64_t iters) {
  return peak<Mad<double>>(chains, iters);
}
double read_scalar(const void* p, size_t bytes, int64_t passes) {
  return read<Bw>(p, bytes, passes);
}
void update_scalar(void* p, size_t bytes, int64_t passes) {
  update<Bw>(p, bytes, passes);
}

}  // namespace ridge::probe::detail
