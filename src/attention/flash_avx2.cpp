// FlashAttention-2 with AVX2 + FMA: 8 floats per register, 6 x 2 register micro-tiles
// (12 accumulators of the 16 ymm registers), polynomial exp2 (simd/avx2.inc), fp32 block products.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "attention/internal.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/memory.hpp"

namespace ridge::attention::detail {
namespace {

#include "simd/scalar.inc"
#include "simd/avx2.inc"
#include "attention/vec_avx2.inc"

#include "attention/flash_body.inc"
#include "attention/blocks_fp32.inc"

}  // namespace

void forward_avx2(const Problem& p) {
  forward<BlocksFp32>(p);
}
void backward_avx2(const Problem& p) {
  backward<BlocksFp32>(p);
}

Kernels kernels_avx2() {
  return {forward_avx2, backward_avx2};
}

}  // namespace ridge::attention::detail
