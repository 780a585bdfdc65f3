// Peak int8 rate with AVX512_VNNI: vpdpbusd multiplies 64 u8 x s8 pairs and adds groups of four
// into 16 int32 lanes, 64 multiply-adds = 128 OP per instruction (OP counted like FLOP: 2 per MAC).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "probe/kernels.hpp"

namespace ridge::probe::detail {
namespace {

#include "probe/kernels_body.inc"

// Integer sums wrap harmlessly; the values only keep the work alive.
struct Int8Dot {
  using R = __m512i;
  struct Const {
    R u, s;
  };
  static Const constants() { return {_mm512_set1_epi8(3), _mm512_set1_epi8(-2)}; }
  static R init(int i) { return _mm512_set1_epi32(i); }
  static R step(R acc, const Const& c) { return _mm512_dpbusd_epi32(acc, c.u, c.s); }
  static R add(R x, R y) { return _mm512_add_epi32(x, y); }
  static double sum(R r) { return lane_sum<int32_t>(r); }
};

}  // namespace

double peak_int8_avx512vnni(int chains, int64_t iters) {
  return peak<Int8Dot>(chains, iters);
}

}  // namespace ridge::probe::detail
