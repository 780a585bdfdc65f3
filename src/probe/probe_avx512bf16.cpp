// Peak bf16 dot-product rate with AVX512_BF16: vdpbf16ps multiplies 32 bf16 pairs and adds them
// pairwise into 16 fp32 lanes, 64 FLOP per instruction. Its latency is longer than an FMA's on
// some cores (6 on Zen 4), which is why up to 24 chains are tried.
#include <immintrin.h>

#include <cstring>

#include "probe/kernels.hpp"

namespace ridge::probe::detail {
namespace {

#include "probe/kernels_body.inc"

// 2^-4 in bf16 (0x3D80) for both operands: each instruction adds 2 * 2^-8 per lane, exactly, so a
// test can check the sum, and even 10^10 iterations stay far from overflow.
struct Bf16Dot {
  using R = __m512;
  struct Const {
    __m512bh x, y;
  };
  static Const constants() {
    const __m512i bits = _mm512_set1_epi16(0x3D80);
    Const c;
    std::memcpy(&c.x, &bits, sizeof c.x);
    std::memcpy(&c.y, &bits, sizeof c.y);
    return c;
  }
  static R init(int i) { return _mm512_set1_ps(1.0f + 0.01f * static_cast<float>(i)); }
  static R step(R acc, const Const& c) { return _mm512_dpbf16_ps(acc, c.x, c.y); }
  static R add(R x, R y) { return _mm512_add_ps(x, y); }
  static double sum(R r) { return lane_sum<float>(r); }
};

}  // namespace

double peak_bf16_avx512bf16(int chains, int64_t iters) {
  return peak<Bf16Dot>(chains, iters);
}

}  // namespace ridge::probe::detail
