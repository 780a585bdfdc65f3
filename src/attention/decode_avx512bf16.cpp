// Decode attention over a paged KV cache with AVX-512 + AVX512_BF16: bf16 scores by vdpbf16ps (32 products
// of the bf16 query with a cached bf16 key per instruction, fp32 accumulation: half the instructions
// of widening each key to fp32 first); P V as on AVX-512, V widened, P kept in fp32. fp32 operands
// take the AVX-512 body unchanged.
// GCC 12 reports its own _mm512_undefined_*() inside the intrinsics headers as (maybe-)uninitialized
// (GCC PR 105593), a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "attention/internal.hpp"
#include "ridge/core/memory.hpp"

namespace ridge::attention::detail {
namespace {

#include "simd/scalar.inc"
#include "simd/avx512.inc"
#include "attention/vec_avx512.inc"
#include "attention/decode_body.inc"

// Scores from bf16 pairs: the query rows as pairs along d (exact: they were bf16), each key row read
// in place as pairs (its memory already is), W dot products reduced across lanes at once.
struct DotBf16 {
  uint32_t* qp;  // rows x dp/2 pairs
  int64_t half;  // dp / 2
  static size_t bytes(int64_t rows, int64_t dp) {
    return static_cast<size_t>(rows * dp / 2) * sizeof(uint32_t);
  }
  DotBf16(void* ws, int64_t dp) : qp(static_cast<uint32_t*>(ws)), half(dp / 2) {}
  // The pairs from the fp32 rows of Q (columns as column_slot<uint16_t> places them).
  void prepare(const float* Q, int rows) {
    const int64_t dp = 2 * half;
    for (int r = 0; r < rows; ++r)
      for (int64_t t = 0; t < half; ++t)
        qp[r * half + t] =
            static_cast<uint32_t>(to_bf16_bits(Q[r * dp + column_slot<uint16_t>(2 * t)])) |
            (static_cast<uint32_t>(to_bf16_bits(Q[r * dp + column_slot<uint16_t>(2 * t + 1)])) << 16);
  }
  // As DotWiden::group: lane rr * KR + kk = q_(r0 + rr) . K_kk.
  template <int RR, int KR>
  __m512 group(const float*, int r0, const uint16_t* const* krow, int64_t dp) const {
    static_assert(RR * KR == 16);
    const uint16_t* kr[KR];
    __m512 acc[16];
#pragma GCC unroll 16
    for (int j = 0; j < KR; ++j) kr[j] = krow[j];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
    const uint32_t* q = qp + r0 * half;
    for (int64_t c = 0; c < dp; c += 32) {  // dp is a multiple of 32
      __m512bh qv[RR];
#pragma GCC unroll 4
      for (int r = 0; r < RR; ++r) qv[r] = (__m512bh)_mm512_loadu_si512(q + r * half + c / 2);
#pragma GCC unroll 16
      for (int j = 0; j < KR; ++j) {
        const __m512bh kv = (__m512bh)_mm512_loadu_si512(kr[j] + c);
#pragma GCC unroll 4
        for (int r = 0; r < RR; ++r) acc[r * KR + j] = _mm512_dpbf16_ps(acc[r * KR + j], kv, qv[r]);
      }
    }
    return Lanes::sum_each(acc);
  }
};

void decode_avx512bf16(const DecodeProblem& p) {
  if (p.bf16)
    decode<uint16_t, DotBf16>(p);
  else
    decode<float, DotWiden<float>>(p);
}

}  // namespace

DecodeKernels decode_kernels_avx512bf16() {
  return {decode_avx512bf16};
}

}  // namespace ridge::attention::detail
