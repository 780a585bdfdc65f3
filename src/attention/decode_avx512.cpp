// Decode attention over a paged KV cache with AVX-512 (fp32 compute): 16 floats per register, scores
// as 16 dot products reduced across lanes at once, 6 x 4 register tiles for P V, bf16 widened.
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

void decode_avx512(const DecodeProblem& p) {
  if (p.bf16)
    decode<uint16_t, DotWiden<uint16_t>>(p);
  else
    decode<float, DotWiden<float>>(p);
}

}  // namespace

DecodeKernels decode_kernels_avx512() {
  return {decode_avx512};
}

}  // namespace ridge::attention::detail
