// Decode attention over a paged KV cache with AVX2 + FMA: 8 floats per register, scores as 8 dot
// products reduced across lanes at once, 6 x 2 register tiles for P V, bf16 keys and values widened.
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
#include "simd/avx2.inc"
#include "attention/vec_avx2.inc"
#include "attention/decode_body.inc"

void decode_avx2(const DecodeProblem& p) {
  if (p.bf16)
    decode<uint16_t, DotWiden<uint16_t>>(p);
  else
    decode<float, DotWiden<float>>(p);
}

}  // namespace

DecodeKernels decode_kernels_avx2() {
  return {decode_avx2};
}

}  // namespace ridge::attention::detail
